// The dlm dialect: ops, types and attributes generated from DlmBase.td / DlmOps.td.
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "compiler/dialects/dlm/DlmOpsDialect.h.inc"
#include "compiler/dialects/dlm/DlmOpsEnums.h.inc"
#define GET_ATTRDEF_CLASSES
#include "compiler/dialects/dlm/DlmOpsAttrs.h.inc"
#define GET_TYPEDEF_CLASSES
#include "compiler/dialects/dlm/DlmOpsTypes.h.inc"
#define GET_OP_CLASSES
#include "compiler/dialects/dlm/DlmOps.h.inc"
