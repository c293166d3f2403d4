// Registration of the generate dialect's ops (GenerateOps.td) and the structured ops' verifiers:
// what a region takes and yields matches what the op carries.
#include "compiler/dialects/generate/GenerateDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace dlm::generate;

#include "compiler/dialects/generate/GenerateOpsDialect.cpp.inc"
#define GET_OP_CLASSES
#include "compiler/dialects/generate/GenerateOps.cpp.inc"

void GenerateDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/dialects/generate/GenerateOps.cpp.inc"
      >();
}

namespace {

// `region` ends in a yield of `types`.
LogicalResult verifyYield(Operation *op, Region &region, TypeRange types, StringRef what) {
  if (region.empty())
    return op->emitOpError() << what << " is empty";
  auto yield = dyn_cast<YieldOp>(region.front().getTerminator());
  if (!yield)
    return op->emitOpError() << what << " does not end in generate.yield";
  if (TypeRange(yield.getValues().getTypes()) != types)
    return op->emitOpError() << what << " yields " << yield.getValues().size()
                             << " values whose types differ from the " << types.size()
                             << " the op carries";
  return success();
}

// The body's arguments: `leading` i64s (index, ...) then the carried values' types.
LogicalResult verifyLoop(Operation *op, Region &body, unsigned leading, TypeRange carried) {
  if (body.empty())
    return op->emitOpError("has no body");
  Block &block = body.front();
  if (block.getNumArguments() != leading + carried.size())
    return op->emitOpError() << "'s body takes " << block.getNumArguments()
                             << " arguments, expected " << leading << " i64 and the "
                             << carried.size() << " carried values";
  for (unsigned i = 0; i < leading; ++i)
    if (!block.getArgument(i).getType().isInteger(64))
      return op->emitOpError() << "'s body argument " << i << " is not i64";
  if (TypeRange(block.getArgumentTypes()).drop_front(leading) != carried)
    return op->emitOpError("'s carried arguments differ from its inits' types");
  return verifyYield(op, body, carried, "its body");
}

} // namespace

LogicalResult BlockLoopOp::verify() {
  if (TypeRange(getInits().getTypes()) != TypeRange(getResults().getTypes()))
    return emitOpError("'s results differ from its inits' types");
  return verifyLoop(*this, getBody(), 1, getInits().getTypes());
}

LogicalResult DenoiseLoopOp::verify() {
  if (TypeRange(getInits().getTypes()) != TypeRange(getResults().getTypes()))
    return emitOpError("'s results (after ran) differ from its inits' types");
  return verifyLoop(*this, getBody(), 2, getInits().getTypes());
}

LogicalResult IfOp::verify() {
  if (failed(verifyYield(*this, getThenRegion(), getResultTypes(), "its then region")))
    return failure();
  if (getElseRegion().empty()) {
    if (getNumResults() != 0)
      return emitOpError("with results has no else region");
    return success();
  }
  return verifyYield(*this, getElseRegion(), getResultTypes(), "its else region");
}
