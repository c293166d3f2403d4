// The decode dialect: the ops and types generated from runtime/schema/DecodeOps.td, one op per
// decode record kind.
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "compiler/dialects/decode/DecodeOpsDialect.h.inc"
#define GET_TYPEDEF_CLASSES
#include "compiler/dialects/decode/DecodeOpsTypes.h.inc"
#define GET_OP_CLASSES
#include "compiler/dialects/decode/DecodeOps.h.inc"
