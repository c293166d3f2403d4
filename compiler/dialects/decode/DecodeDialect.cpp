// Registration of the decode dialect's ops and types (runtime/schema/DecodeOps.td).
#include "compiler/dialects/decode/DecodeDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace dlm::decode;

#include "compiler/dialects/decode/DecodeOpsDialect.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "compiler/dialects/decode/DecodeOpsTypes.cpp.inc"
#define GET_OP_CLASSES
#include "compiler/dialects/decode/DecodeOps.cpp.inc"

void DecodeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/dialects/decode/DecodeOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "compiler/dialects/decode/DecodeOpsTypes.cpp.inc"
      >();
}
