// dlm-lower-to-decode-program: a decoding policy in SSA form (the generate dialect) lowered to
// the decode dialect, whose ops are the records the runtime's interpreter runs.
//
// Each record op becomes the decode op of the same kind with the same literals. Values become
// what records refer to: a decode.constant or decode.fact stays one (a literal, an @fact), a
// knob's value is the knob ($name), and every other value gets a register that the op defining
// it writes. A structured op's carried values (a loop's iteration values, an if's results) share
// one register: written in place where the value that replaces them is defined last in the
// region and read nowhere after, else by a `set` at the end of the region (before its closing
// until or exit_if). An in-out operand's register is written by the op: the value must have no
// other use and be defined in the op's block. Register names come from the `names` attribute
// (one per result) and the structured ops' `arg_names` (one per body argument), else from the
// parameter's key, numbered when taken.
#pragma once

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace dlm::passes {

// Replaces `function`'s body (generate ops, decode.constant, decode.fact) with the decode ops of
// its records. On failure the error is emitted on the op at fault and `function` is unchanged.
mlir::LogicalResult lowerToDecodeProgram(mlir::func::FuncOp function);

} // namespace dlm::passes
