// A denoise_loop as a sampling::LoopPlan (docs/design/decode-program.md §5), so that a model
// that can run a loop's steps without returning to the host (DecodeModel::denoiseBlock) runs
// them. Internal to runtime/program (DecodeInterpreter.cpp).
#pragma once

#include "runtime/program/InterpreterState.h"
#include "runtime/sampling/LoopPlan.h"

namespace dlm::program::detail {

// The plan of the denoise_loop at instruction `loop`, about to run at most `limit` steps from the
// global step `base` (`capped`: stopping at `limit` is its cap, not its bound). Each step's body
// is evaluated with the loop index set, its ALU records and `if`s resolved; the plan exists only
// when every step resolves to exactly forward, sample, accept, gate, renoise and until, wired as a
// device loop wires them (the sample's outputs feed the accept, the accept's the gate and
// renoise, the gate's verdict the until), from static values, and when no register the loop
// writes but its `ran` is read outside it. Otherwise the error says why, and the host runs the
// loop. The registers are left as they were.
StatusOr<sampling::LoopPlan> buildLoopPlan(State &state, size_t loop, int64_t limit, bool capped,
                                           int64_t base);

} // namespace dlm::program::detail
