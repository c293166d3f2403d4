// Dialect registration and the verifier of !dlm.kv_cache.
#include "compiler/dialects/dlm/DlmDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace dlm::ir;

#include "compiler/dialects/dlm/DlmOpsDialect.cpp.inc"
#include "compiler/dialects/dlm/DlmOpsEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "compiler/dialects/dlm/DlmOpsAttrs.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "compiler/dialects/dlm/DlmOpsTypes.cpp.inc"

void DlmDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/dialects/dlm/DlmOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "compiler/dialects/dlm/DlmOpsTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "compiler/dialects/dlm/DlmOpsAttrs.cpp.inc"
      >();
}

LogicalResult KVCacheType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t layers,
                                  int64_t kvHeads, int64_t headDim, int64_t pageSize) {
  if (layers <= 0)
    return emitError() << "kv_cache needs at least one layer, got " << layers;
  if (kvHeads <= 0)
    return emitError() << "kv_cache needs at least one kv head, got " << kvHeads;
  if (headDim <= 0)
    return emitError() << "kv_cache head_dim must be positive, got " << headDim;
  if (pageSize <= 0 || (pageSize & (pageSize - 1)) != 0)
    return emitError() << "kv_cache page_size must be a positive power of two, got " << pageSize;
  return success();
}
