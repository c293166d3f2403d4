// Mixture of experts, step 1 of 4 (the moe record, runtime/model/KernelProgram.h): routing, one
// block per token, as the CPU backend computes it (runtime/cpu/Moe.cpp):
//   z = rms_norm_noweight(r) * router_scale * router_input_scale with the router norm (a null
//   router_scale reads as ones), z = r without (fp32, in shared memory),
//   logits[e] = z . router[e] (warp e % 8 takes expert e, lanes split the hidden dim),
//   p = softmax(logits) over the experts (or sigmoid(logits)), c = p + expert_bias (when not
//   null), with groups only the experts of the top_groups best groups (a group scores the sum of
//   its two largest c; ties: the lower group), the top k by c (ties: the lower expert id), their
//   weights p / (sum of the chosen p) (or p, unnormalised) * expert_scale[e] (when not null)
//   * routed_scale.
// The router product is E x H multiply-adds per token, so it is fused here rather than a GEMM
// launch and a [tokens, E] scratch. The softmax and the selection are serial in thread 0: E and k
// are small (128 and 8 for DiffusionGemma).
//
// Arguments: r [tokens, hidden] (token stride rStride), tokens, router [E, hidden], routerScale
// [hidden], expertScale [E], expertBias [E] (all of the device precision; the scales and the
// bias may be null), eps, routedScale,
// inputScale, choice [tokens, k] (int), weight [tokens, k] (f32). Grid: x = tokens; 256 threads.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

#include <algorithm>

namespace dlm::codegen {

namespace {

constexpr int64_t kThreads = 256;
constexpr int64_t kStaticSharedLimit = 48 * 1024;

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kHidden = ${hidden};
constexpr int kExperts = ${experts};
constexpr int kTopK = ${topK};
constexpr bool kRouterNorm = ${routerNorm};
constexpr bool kNormalizeTopK = ${normalizeTopK};
constexpr bool kSigmoidScores = ${sigmoidScores};
constexpr int kGroups = ${groups};
constexpr int kTopGroups = ${topGroups};
constexpr int kGroupSize = kExperts / kGroups;
constexpr int kWarps = kThreads / 32;

${entryPoint} {
  const int token = blockIdx.x;
  if (token >= tokens)
    return;
  __shared__ float sZ[kHidden];
  __shared__ float sProbability[kExperts];
  __shared__ float sChoosing[kExperts];
  __shared__ float sGroup[kGroups];
  __shared__ float sWarpSums[kWarps];
  __shared__ float sRowScale;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  const Element *in = r + (long long)token * rStride;
  float sumSquares = 0.f;
  for (int h = threadIdx.x; h < kHidden; h += kThreads) {
    const float v = dlm_device::toFloat(in[h]);
    sZ[h] = v;
    sumSquares = fmaf(v, v, sumSquares);
  }
  if (kRouterNorm) {
    sumSquares = dlm_device::warpSum(sumSquares);
    if (lane == 0)
      sWarpSums[warp] = sumSquares;
    __syncthreads();
    if (threadIdx.x == 0) {
      float total = 0.f;
      for (int w = 0; w < kWarps; ++w)
        total += sWarpSums[w];
      sRowScale = rsqrtf(total / kHidden + eps);
    }
    __syncthreads();
    const float rowScale = sRowScale;
    for (int h = threadIdx.x; h < kHidden; h += kThreads)
      sZ[h] = sZ[h] * rowScale * (routerScale ? dlm_device::toFloat(routerScale[h]) : 1.f) *
              inputScale;
  }
  __syncthreads();

  for (int e = warp; e < kExperts; e += kWarps) {
    const Element *row = router + (long long)e * kHidden;
    float dot = 0.f;
    for (int h = lane; h < kHidden; h += 32)
      dot = fmaf(sZ[h], dlm_device::toFloat(row[h]), dot);
    dot = dlm_device::warpSum(dot);
    if (lane == 0)
      sProbability[e] = dot;
  }
  __syncthreads();

  if (threadIdx.x == 0) {
    if (kSigmoidScores) {
      for (int e = 0; e < kExperts; ++e)
        sProbability[e] = 1.f / (1.f + expf(-sProbability[e]));
    } else {
      float max = dlm_device::negativeInfinity();
      for (int e = 0; e < kExperts; ++e)
        max = fmaxf(max, sProbability[e]);
      float sum = 0.f;
      for (int e = 0; e < kExperts; ++e) {
        sProbability[e] = expf(sProbability[e] - max);
        sum += sProbability[e];
      }
      for (int e = 0; e < kExperts; ++e)
        sProbability[e] /= sum;
    }
    for (int e = 0; e < kExperts; ++e)
      sChoosing[e] = expertBias ? sProbability[e] + dlm_device::toFloat(expertBias[e])
                                : sProbability[e];
    if (kGroups > 1) {
      // A group scores the sum of its two largest; the top_groups best (ties: the lower group)
      // are marked +inf, the others' experts can no longer be chosen. Shared memory, not local
      // arrays: a hot kernel keeps no stack.
      for (int g = 0; g < kGroups; ++g) {
        float first = dlm_device::negativeInfinity(), second = first;
        for (int e = g * kGroupSize; e < (g + 1) * kGroupSize; ++e) {
          if (sChoosing[e] > first) {
            second = first;
            first = sChoosing[e];
          } else if (sChoosing[e] > second) {
            second = sChoosing[e];
          }
        }
        sGroup[g] = first + second;
      }
      for (int j = 0; j < kTopGroups; ++j) {
        int best = -1;
        for (int g = 0; g < kGroups; ++g)
          if (sGroup[g] != dlm_device::positiveInfinity() &&
              (best < 0 || sGroup[g] > sGroup[best]))
            best = g;
        sGroup[best] = dlm_device::positiveInfinity();
      }
      for (int g = 0; g < kGroups; ++g)
        if (sGroup[g] != dlm_device::positiveInfinity())
          for (int e = g * kGroupSize; e < (g + 1) * kGroupSize; ++e)
            sChoosing[e] = dlm_device::negativeInfinity();
    }
    // The top k by the choosing score; a chosen expert's score becomes -inf (enough others stay
    // finite: top_k fits in the kept groups).
    int chosen[kTopK];
    float chosenProbability[kTopK];
    float chosenSum = 0.f;
    for (int j = 0; j < kTopK; ++j) {
      int best = 0;
      for (int e = 1; e < kExperts; ++e) // strictly greater: a tie keeps the lower id
        if (sChoosing[e] > sChoosing[best])
          best = e;
      sChoosing[best] = dlm_device::negativeInfinity();
      chosen[j] = best;
      chosenProbability[j] = sProbability[best];
      chosenSum += sProbability[best];
    }
    for (int j = 0; j < kTopK; ++j) {
      choice[(long long)token * kTopK + j] = chosen[j];
      float w = kNormalizeTopK ? chosenProbability[j] / chosenSum : chosenProbability[j];
      if (expertScale)
        w *= dlm_device::toFloat(expertScale[chosen[j]]);
      weight[(long long)token * kTopK + j] = w * routedScale;
    }
  }
}
)cuda";

} // namespace

Status checkMoeParams(const MoeParams &params) {
  auto in = [](int64_t value, int64_t lo, int64_t hi) { return value >= lo && value <= hi; };
  if (!in(params.hidden, 1, int64_t(1) << 20) || !in(params.expertWidth, 1, int64_t(1) << 20))
    return Status::error("moe: hidden and expert width must be in [1, 2^20], got " +
                         std::to_string(params.hidden) + " and " +
                         std::to_string(params.expertWidth));
  if (!in(params.experts, 1, 1024))
    return Status::error("moe: experts must be in [1, 1024], got " +
                         std::to_string(params.experts));
  if (!in(params.topK, 1, std::min<int64_t>(params.experts, 64)))
    return Status::error("moe: top_k must be in [1, min(experts, 64)], got " +
                         std::to_string(params.topK));
  // KernelOps.td's constraints on the groups, for a generator called on its own.
  const bool groupsFit = params.groups >= 1 && params.experts % params.groups == 0 &&
                         (params.groups == 1 || params.experts / params.groups >= 2) &&
                         params.topGroups >= 1 && params.topGroups <= params.groups &&
                         params.topK <= params.topGroups * (params.experts / params.groups);
  if (!groupsFit)
    return Status::error("moe: groups " + std::to_string(params.groups) + ", top groups " +
                         std::to_string(params.topGroups) + " and top_k " +
                         std::to_string(params.topK) + " do not fit " +
                         std::to_string(params.experts) + " experts in groups of two or more");
  return Status::ok();
}

StatusOr<KernelSource> generateMoeRoute(const MoeParams &params) {
  DLM_RETURN_IF_ERROR(checkMoeParams(params));
  const int64_t shared =
      4 * (params.hidden + 2 * params.experts + params.groups + kThreads / 32 + 1);
  if (shared > kStaticSharedLimit)
    return Status::error("moe_route: hidden " + std::to_string(params.hidden) + " and " +
                         std::to_string(params.experts) + " experts need " +
                         std::to_string(shared) +
                         " bytes of shared memory, over the 48 KiB static limit");
  const std::string element(cudaElementType(params.element));
  KernelSource kernel;
  kernel.kind = "moe_route";
  kernel.name = "dlm_moe_route_h" + std::to_string(params.hidden) + "_e" +
                std::to_string(params.experts) + "_k" + std::to_string(params.topK) + "_" +
                std::string(elementTypeName(params.element));
  // DiffusionGemma's routing keeps the name it had before the options.
  if (!params.routerNorm)
    kernel.name += "_plain_router";
  if (!params.normalizeTopK)
    kernel.name += "_unnormalised";
  if (params.sigmoidScores)
    kernel.name += "_sigmoid";
  if (params.groups > 1)
    kernel.name +=
        "_groups" + std::to_string(params.topGroups) + "of" + std::to_string(params.groups);
  kernel.hot = true;
  kernel.blockThreads = static_cast<unsigned>(kThreads);
  kernel.grid = "x = tokens";
  kernel.sharedMemoryBytes = static_cast<unsigned>(shared);
  kernel.parameters = {
      {"const " + element + " *__restrict__", "r"},
      {"long long", "rStride"},
      {"int", "tokens"},
      {"const " + element + " *__restrict__", "router"},
      {"const " + element + " *__restrict__", "routerScale"},
      {"const " + element + " *__restrict__", "expertScale"},
      {"const " + element + " *__restrict__", "expertBias"},
      {"float", "eps"},
      {"float", "inputScale"},
      {"float", "routedScale"},
      {"int *__restrict__", "choice"},
      {"float *__restrict__", "weight"},
  };
  kernel.specialisation = {{"hidden", params.hidden},
                           {"experts", params.experts},
                           {"top_k", params.topK},
                           {"router_norm", params.routerNorm},
                           {"normalize_top_k", params.normalizeTopK},
                           {"sigmoid_scores", params.sigmoidScores},
                           {"groups", params.groups},
                           {"top_groups", params.topGroups},
                           {"element", std::string(elementTypeName(params.element))}};
  const std::string body = expandKernelBody(kernel, kBody,
                                            {{"element", element},
                                             {"routerNorm", boolLiteral(params.routerNorm)},
                                             {"normalizeTopK", boolLiteral(params.normalizeTopK)},
                                             {"sigmoidScores", boolLiteral(params.sigmoidScores)},
                                             {"groups", std::to_string(params.groups)},
                                             {"topGroups", std::to_string(params.topGroups)},
                                             {"hidden", std::to_string(params.hidden)},
                                             {"experts", std::to_string(params.experts)},
                                             {"topK", std::to_string(params.topK)}});
  kernel.source = assembleTranslationUnit(
      kernel,
      std::string(params.routerNorm ? "MoE routing: router norm and scales, " : "MoE routing: ") +
          std::to_string(params.experts) + " expert logits, " +
          (params.sigmoidScores ? "sigmoid" : "softmax") + ", top " + std::to_string(params.topK) +
          ".",
      body);
  return kernel;
}

} // namespace dlm::codegen
