// The generate dialect: decoding policies in SSA form (GenerateOps.td), lowered into the decode
// dialect by dlm-lower-to-decode-program.
#pragma once

#include "compiler/dialects/decode/DecodeDialect.h"

#include "mlir/Interfaces/ControlFlowInterfaces.h"

#include "compiler/dialects/generate/GenerateOpsDialect.h.inc"
#define GET_OP_CLASSES
#include "compiler/dialects/generate/GenerateOps.h.inc"
