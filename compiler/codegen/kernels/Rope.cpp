// NeoX rotary embedding in place, one block per token. Pair (j, j + rotaryDim/2) of every head
// rotates by position * inverseFrequency[j]; the inverse frequencies are computed here in double
// (1 / theta^(2j / frequencyDim), as the CPU backend and the references do) and emitted as a
// table, and the angle is formed and reduced in double: a float angle at position 2^18 would be
// off by 0.02 rad. RoPE is a sliver of a layer's time, so the double math costs nothing that
// matters.
//
// Arguments: x (rotated in place), tokenStride (elements between tokens; heads are contiguous
// within a token), heads, tokens, positions [tokens].
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"
#include "compiler/codegen/RecordKernels.h"

#include <cmath>

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kHeadDim = ${headDim};
constexpr int kHalfRotary = ${halfRotary};
constexpr int kFrequencyPairs = ${frequencyPairs};

// 1 / theta^(2j / ${frequencyDim}), theta = ${theta}.
__device__ const double kInverseFrequency[kFrequencyPairs] = {${inverseFrequencies}};

${entryPoint} {
  const int token = blockIdx.x;
  if (token >= tokens)
    return;
  const double position = (double)positions[token];
  Element *row = x + (long long)token * tokenStride;
  for (int item = threadIdx.x; item < heads * kFrequencyPairs; item += kThreads) {
    const int head = item / kFrequencyPairs;
    const int pair = item % kFrequencyPairs;
    double sine, cosine;
    sincos(position * kInverseFrequency[pair], &sine, &cosine);
    const float s = (float)sine, c = (float)cosine;
    Element *low = row + head * kHeadDim + pair;
    Element *high = low + kHalfRotary;
    const float a = dlm_device::toFloat(*low), b = dlm_device::toFloat(*high);
    dlm_device::storeFloat(low, a * c - b * s);
    dlm_device::storeFloat(high, b * c + a * s);
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateRope(const RopeParams &params) {
  const int64_t headDim = params.headDim;
  const int64_t rotaryDim = params.rotaryDim ? params.rotaryDim : headDim;
  const int64_t frequencyPairs = params.frequencyPairs ? params.frequencyPairs : rotaryDim / 2;
  const int64_t frequencyDim = params.frequencyDim ? params.frequencyDim : rotaryDim;
  if (headDim <= 0 || headDim % 2 != 0 || headDim > 4096)
    return Status::error("rope: head_dim must be even and in [2, 4096], got " +
                         std::to_string(headDim));
  if (rotaryDim <= 0 || rotaryDim % 2 != 0 || rotaryDim > headDim)
    return Status::error("rope: rotary_dim must be even and in [2, head_dim], got " +
                         std::to_string(rotaryDim));
  if (frequencyPairs <= 0 || frequencyPairs > rotaryDim / 2)
    return Status::error("rope: frequency_pairs must be in [1, rotary_dim / 2], got " +
                         std::to_string(frequencyPairs));
  if (frequencyDim <= 0)
    return Status::error("rope: frequency_dim must be positive");
  if (!(params.theta > 1.0) || !std::isfinite(params.theta))
    return Status::error("rope: theta must be a finite number above 1");

  KernelSource kernel;
  kernel.kind = "rope";
  kernel.name = "dlm_rope_d" + std::to_string(headDim) + "_r" + std::to_string(rotaryDim) +
                (frequencyPairs != rotaryDim / 2 ? "_f" + std::to_string(frequencyPairs) : "") +
                (frequencyDim != rotaryDim ? "_fd" + std::to_string(frequencyDim) : "") + "_theta" +
                identifierFragment(params.theta) + "_" +
                std::string(elementTypeName(params.element));
  kernel.hot = false;
  kernel.blockThreads = 128;
  kernel.grid = "x = tokens";
  kernel.sharedMemoryBytes = 0;
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {element + " *__restrict__", "x"},
      {"long long", "tokenStride"},
      {"int", "heads"},
      {"int", "tokens"},
      {"const int *__restrict__", "positions"},
  };
  kernel.specialisation = {{"head_dim", headDim},
                           {"rotary_dim", rotaryDim},
                           {"frequency_pairs", frequencyPairs},
                           {"frequency_dim", frequencyDim},
                           {"theta", params.theta},
                           {"element", std::string(elementTypeName(params.element))}};
  std::string table;
  for (int64_t j = 0; j < frequencyPairs; ++j) {
    const double inverse = 1.0 / std::pow(params.theta, static_cast<double>(2 * j) /
                                                            static_cast<double>(frequencyDim));
    table += (j ? ", " : "") + doubleLiteral(inverse);
  }
  const std::string body = expandKernelBody(kernel, kBody,
                                            {{"element", element},
                                             {"headDim", std::to_string(headDim)},
                                             {"halfRotary", std::to_string(rotaryDim / 2)},
                                             {"frequencyPairs", std::to_string(frequencyPairs)},
                                             {"frequencyDim", std::to_string(frequencyDim)},
                                             {"theta", doubleLiteral(params.theta)},
                                             {"inverseFrequencies", table}});
  kernel.source = assembleTranslationUnit(
      kernel,
      "NeoX RoPE in place: pairs (j, j + " + std::to_string(rotaryDim / 2) + "), " +
          std::to_string(frequencyPairs) + " rotating pairs per head.",
      body);
  return kernel;
}

Status RecordKernels::rope() {
  const auto &p = as<kp::RopeParams>();
  RopeParams rope;
  rope.headDim = p.headDim;
  rope.rotaryDim = p.rotaryDim;
  rope.theta = p.theta;
  if (p.rotatedPairs < p.rotaryDim / 2) {
    // Gemma's proportional RoPE: the first pairs rotate at the frequencies of the rotary dims.
    if (p.rotatedPairs <= 0)
      return r.error("not supported yet: a rope record that rotates no pair");
    rope.frequencyPairs = p.rotatedPairs;
    rope.frequencyDim = p.rotaryDim;
  }
  rope.element = element;
  launched.push_back(generateRope(rope));
  return Status::ok();
}

} // namespace dlm::codegen
