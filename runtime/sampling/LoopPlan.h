// A denoise loop handed whole to a model that can run it without returning to the host between
// steps (DecodeModel::denoiseBlock): per step, the resolved parameters of the loop body's
// records (docs/design/decode-program.md §5), forward, sample, accept, gate and renoise, in that
// order, followed by `until` on the gate's verdict. Whoever builds it (the decode interpreter from
// a program's records; the legacy policies LowConfidence.cpp and EntropyBound.cpp) has decided
// everything a step decides statically, so that a device makes exactly the host loop's decisions
// and needs to know nothing about policies or knobs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlm::sampling {

// The forward record: full (the K/V cache is rebuilt, then [0, keep) is kept), cached (fed
// [keep, count) over the cached K/V of [0, keep), which stays as it was) or window (fed
// [keep, feedEnd) over the cached K/V of all [0, count), its own replacing [keep, feedEnd):
// ForwardSpec::Mode::window), over sequence[0, count), returning the absolute logit rows
// [rowBegin, rowEnd).
struct ForwardStep {
  enum class Mode : uint8_t { full, cached, window };
  Mode mode = Mode::full;
  int64_t count = 0;
  int64_t keep = 0;
  int64_t feedEnd = 0; // window only
  int64_t rowBegin = 0;
  int64_t rowEnd = 0;
};

// The sample record: Gumbel-max proposals with unit-temperature confidences (decodeRow), or a
// tempered sample, argmax and entropy (temperedRow); `excluded` never wins (-1: none).
struct SampleStep {
  enum class Kind : uint8_t { gumbelMax, tempered };
  Kind kind = Kind::gumbelMax;
  double temperature = 0;
  int64_t excluded = -1;
  // The counter-RNG step its draws are keyed by (the request's decoded-forward count).
  int64_t rngStep = 0;
};

// The accept record: which rows take their sample, and (converge = stable_confident) whether the
// argmax canvas has been stable for `stability` steps with a mean entropy below `confidence`.
struct AcceptStep {
  enum class Rule : uint8_t { topK, threshold, entropyBound };
  enum class Candidates : uint8_t { masked, all };
  enum class Converge : uint8_t { none, stableConfident };
  Rule rule = Rule::topK;
  int64_t k = 0;        // top_k
  double threshold = 0; // threshold
  double bound = 0;     // entropy_bound
  Candidates candidates = Candidates::masked;
  Converge converge = Converge::none;
  int64_t stability = 0;
  double confidence = 0;
};

// The gate record: the step finishes the loop when no masked row is left unkept
// (no_mask_left), or when it converged or is the last one (converged_or_last: the argmax canvas
// is committed).
struct GateStep {
  enum class Rule : uint8_t { noMaskLeft, convergedOrLast };
  Rule rule = Rule::noMaskLeft;
  bool last = false;
};

// The renoise record: the next canvas, rejected rows taking the mask or a counter-RNG token.
struct RenoiseStep {
  enum class Noise : uint8_t { mask, uniform };
  enum class Candidates : uint8_t { maskedOnly, everyRejected };
  Noise noise = Noise::mask;
  Candidates candidates = Candidates::maskedOnly;
  int64_t rngStep = 0;
};

struct StepPlan {
  ForwardStep forward;
  SampleStep sample;
  AcceptStep accept;
  GateStep gate;
  RenoiseStep renoise;
};

struct LoopPlan {
  // One entry per step the loop may run: min(cap, bound) of the denoise loop.
  std::vector<StepPlan> steps;
  // Reaching the last step without the gate finishing is normal (the loop's cap) rather than an
  // error (its bound).
  bool capped = true;
  // sequence[0, total) as the forwards feed it (not owned; valid during denoiseBlock); the loop
  // denoises [begin, end), which holds its initial canvas.
  const int32_t *sequence = nullptr;
  int64_t total = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int32_t maskToken = -1; // -1: none
  // Counter RNG keys.
  uint64_t seed = 0;
  uint64_t request = 0;
  // Steps per device launch chunk (the program's unroll); 0: the backend's choice.
  int64_t unroll = 0;
};

// Canonical text of one step's parameters ("forward full count=12 keep=0 rows=4,12; sample ..."),
// reals printed to round-trip: equal texts mean equal steps.
std::string stepPlanText(const StepPlan &step);
// The loop's fields and every step, one per line.
std::string loopPlanText(const LoopPlan &plan);

} // namespace dlm::sampling
