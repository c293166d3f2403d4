// dlm-lower-to-decode-program (Passes.td): DecodeLowering.h on every function that holds
// generate ops.
#include "compiler/dialects/generate/GenerateDialect.h"
#include "compiler/passes/DecodeLowering.h"
#include "compiler/passes/Passes.h"

namespace dlm {
#define GEN_PASS_DEF_LOWERTODECODEPROGRAMPASS
#include "compiler/passes/Passes.h.inc"
} // namespace dlm

namespace {

using namespace mlir;

bool holdsGenerateOps(func::FuncOp function) {
  return function
      .walk([](Operation *op) {
        return op->getDialect() && op->getDialect()->getNamespace() == "generate"
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      })
      .wasInterrupted();
}

struct LowerToDecodeProgramPass
    : dlm::impl::LowerToDecodeProgramPassBase<LowerToDecodeProgramPass> {
  void runOnOperation() override {
    for (func::FuncOp function : getOperation().getOps<func::FuncOp>())
      if (holdsGenerateOps(function) && failed(dlm::passes::lowerToDecodeProgram(function)))
        return signalPassFailure();
  }
};

} // namespace
