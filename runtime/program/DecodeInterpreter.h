// Runs a loaded decode program (DecodeProgram.h) for one request on a sampling::DecodeModel,
// producing what sampling::decode produces for the policy the program describes: the same
// forwards, the same blocks reported through the same callback, the same outcome. The
// interpreter knows no policy and no knob: the records say what to do, the handlers
// (runtime/program/ops/) reuse runtime/sampling's helpers to do it. A denoise_loop whose steps
// resolve statically goes to a model that runs whole loops on its device (DecodeModel::
// denoiseBlock) as a sampling::LoopPlan (LoopPlanBuilder.h, docs/design/decode-program.md §5);
// every other loop runs on the host (DecodeModel::forwardFull / forwardCached).
#pragma once

#include "runtime/profile/Profiler.h"
#include "runtime/program/DecodeProgram.h"
#include "runtime/program/ProgramKnobs.h"
#include "runtime/sampling/Decoding.h"

#include <cstdint>
#include <vector>

namespace dlm::program {

struct ProgramRequest {
  std::vector<int32_t> prompt;
  // Overrides of the program's knobs ("none" unsets an optional one).
  artifact::Attributes knobs;
  uint64_t seed = 0;
  uint64_t request = 0;
  // Keep the logits of the first forward whose logits are decoded, every row of it.
  bool captureFirstLogits = false;
  // Times the request, its loops and forwards on the track of `request` (null: off).
  profile::Profiler *profiler = nullptr;
  // Knobs of the artifact's other programs, which this one ignores rather than rejects.
  KnobFilter declaredElsewhere;
  // The most positions the request may use (0: no limit) and why, e.g. "the model allows 128":
  // a program that reserves more fails with "prompt too long: ...".
  int64_t maxTokens = 0;
  std::string maxTokensLimit;
};

class DecodeInterpreter {
public:
  // `program` must outlive the interpreter.
  explicit DecodeInterpreter(const DecodeProgram &program) : program_(program) {}

  // Resolves the knobs, checks the prompt, then runs the records. A failed `check` record's
  // message is the request's error, as is a model's.
  StatusOr<sampling::DecodeOutcome> run(sampling::DecodeModel &model,
                                        const sampling::TokenFacts &facts,
                                        const ProgramRequest &request,
                                        const sampling::BlockCallback &onBlock) const;

private:
  const DecodeProgram &program_;
};

} // namespace dlm::program
