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
#include <functional>
#include <string_view>
#include <vector>

namespace dlm::program {

namespace detail {
class State;
struct Register;
} // namespace detail

// Read access to a running program's registers by name (without the '%'), for test hooks. A
// name the program lacks, or a register of another type, reads as an empty register.
class RegisterView {
public:
  explicit RegisterView(const detail::State &state) : state_(state) {}

  int64_t integer(std::string_view name) const;
  double real(std::string_view name) const;
  bool boolean(std::string_view name) const;
  const std::vector<int32_t> &tokens(std::string_view name) const;
  const std::vector<double> &reals(std::string_view name) const;
  const std::vector<uint8_t> &flags(std::string_view name) const;
  // seq[window]: the canvas as the records left it.
  std::vector<int32_t> window() const;

private:
  const detail::Register &find(std::string_view name) const;

  const detail::State &state_;
};

// FOR TESTS ONLY: no session, tool or backend sets these. They replace dlm's counter-RNG draws
// with draws a test supplies, so that a test can replay another implementation's random choices
// (tests/runtime/program/DiffusionGemmaReplayTest.cpp replays transformers' DiffusionGemma
// trace), and let it watch the registers after every record. Unset members keep dlm's draws. A
// request with hooks runs every denoise loop on the host (never DecodeModel::denoiseBlock).
struct ProgramTestHooks {
  // seq_extend fill=noise: the token at sequence position `position` (`step`: the record's).
  std::function<int32_t(int64_t step, int64_t position)> noiseToken;
  // sample kind=tempered: the sampled token of `position` at RNG step `step` (the argmax and
  // entropy are still computed from the logits).
  std::function<int32_t(int64_t step, int64_t position)> sampledToken;
  // renoise noise=uniform: the fresh token of a rejected `position` at RNG step `step`.
  std::function<int32_t(int64_t step, int64_t position)> renoiseToken;
  // spec_verify: a deliberately broken verifier that replaces a rejected draft with a draw from
  // the target's p instead of the residual max(0, p - q) (the losslessness test must catch it).
  bool verifyWithoutResidual = false;
  // Called after every record that is not control flow (loops, if/else/end, until, exit_if),
  // with the record's kind.
  std::function<void(std::string_view kind, const RegisterView &registers)> afterRecord;
};

struct ProgramRequest {
  std::vector<int32_t> prompt;
  // Overrides of the program's knobs ("none" unsets an optional one).
  artifact::Attributes knobs;
  uint64_t seed = 0;
  uint64_t request = 0;
  // Keep the logits of the first forward whose logits are decoded, every row of it.
  bool captureFirstLogits = false;
  // Tokens that replace the noise draws of the first `seq_extend fill=noise` (the first canvas's
  // initial tokens, to start from a given canvas as a reference run did): exactly as many as it
  // draws, each in [0, vocab), and an error if the program never draws a canvas from noise.
  // Empty: all noise is drawn.
  std::vector<int32_t> initialNoise;
  // Times the request, its loops and forwards on the track of `request` (null: off).
  profile::Profiler *profiler = nullptr;
  // Knobs of the artifact's other programs, which this one ignores rather than rejects.
  KnobFilter declaredElsewhere;
  // The most positions the request may use (0: no limit) and why, e.g. "the model allows 128":
  // a program that reserves more fails with "prompt too long: ...".
  int64_t maxTokens = 0;
  std::string maxTokensLimit;
  // Tests only (see ProgramTestHooks); null otherwise.
  const ProgramTestHooks *testHooks = nullptr;
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
