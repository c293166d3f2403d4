// dlm-lower-to-decode-program: a decoding policy in SSA form (the generate dialect) lowered to
// the decode dialect, whose ops are the records the runtime's interpreter runs.
//
// Each record op becomes the decode op of the same kind with the same literals. Values become
// what records refer to: a decode.constant or decode.fact stays one (a literal, an @fact), a
// knob's value is the knob ($name), and every other value gets a register that the op defining
// it writes. A structured op's carried values (a loop's iteration values, an if's results) share
// one register. A value the region yields is written into it in place when it is defined in the
// region's block after the last read of the value it replaces (also along a chain of in-out
// updates) and nothing else the register holds is read after it; else a `set` writes it at the
// end of the region, before its closing until or exit_if (whose condition is copied first when
// a set would overwrite it). A loop's init keeps its register when nothing reads it after the
// loop or inside it; an if's result takes the register of a value a branch passes on unchanged
// when nothing reads that value after the if. An in-out operand's register is written by the
// op: the value may not be read after the op, again by it, or inside a loop below its
// definition. Registers are named by the `names` attribute (one per result) and the loops'
// `arg_names` (one per body argument), else by the parameter's key or the structured op's word
// (index, global, ran, result, carried); a register of that name and type is reused when no
// value it held is read any more, else the name is numbered. What cannot be lowered so is an
// error on the op at fault.
#pragma once

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace dlm::passes {

// Replaces `function`'s body (generate ops, decode.constant, decode.fact) with the decode ops of
// its records. On failure the error is emitted on the op at fault and `function` is unchanged.
mlir::LogicalResult lowerToDecodeProgram(mlir::func::FuncOp function);

} // namespace dlm::passes
