// The fused sampler epilogue: one block per [vocab] logits row, one pass over the row, and no
// probability is ever written. Each thread folds its logits (16-byte loads) into
//   - softmax statistics relative to a running maximum m: s = sum e^(z-m) and
//     w = sum e^(z-m) (z-m), so that entropy = log s - w / s and p(v) = e^(z_v - m) / s;
//   - the argmax of z (ties to the lower id; the excluded token, e.g. the mask, never wins);
//   - the Gumbel-max sample argmax(z + g_v), g_v = -log(-log(u_v)) from the shared counter RNG
//     in double, exactly as the CPU backend draws it. g_v < 38 always, so the noise of a logit
//     more than 38 below the thread's best noisy score is never computed: almost the whole row.
// The per-thread states merge through warp shuffles and one shared slot per warp. z = logit / T
// with the request's temperature (T <= 0: greedy, z = logit, the sample is the argmax), after
// the optional soft-cap c tanh(logit / c).
//
// The confidence is the probability of the chosen token (the sample; the argmax when greedy)
// under the specialisation's temperature (SamplerConfidence): softmax(logit) at T = 1 (default;
// LLaDA's low-confidence ranking: the state then also folds the statistics of the unscaled
// logits, needed only when 0 < T != 1, and the chosen logit is read once more at the end), or
// softmax(z) at T.
//
// Arguments: logits [rows, vocab] (row stride rowStride, a multiple of the vector width), rows,
// rowRequest [rows] and rowPosition [rows] (the request and absolute position of each row),
// per request: seed, id, step (the RNG's counters) and temperature; excludedToken (-1: none);
// outputs per row: sampled, argmax, entropy (nats), confidence; with softmaxStatistics also
// softmaxMax (max z) and softmaxSum (sum e^(z - max)) per row.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(using Logit = ${logit};
constexpr int kVocab = ${vocab};
constexpr int kWarps = kThreads / 32;
constexpr int kVector = ${vector};
constexpr bool kSoftcap = ${hasSoftcap};
constexpr float kSoftcapValue = ${softcap};
constexpr bool kUnitConfidence = ${unitConfidence};

struct RowState {
  float max;      // running maximum of z
  float sum;      // sum of e^(z - max)
  float weighted; // sum of e^(z - max) (z - max)
  float bestLogit;
  int best;
  int sample;
  float sampleLogit;
  // Softmax statistics of the unscaled (soft-capped) logits, for the temperature-1 confidence.
  float unitMax;
  float unitSum;
  double sampleScore; // z + Gumbel noise of the current sample
};

__device__ __forceinline__ RowState emptyState() {
  const float none = dlm_device::negativeInfinity();
  return RowState{none, 0.f, 0.f, none, -1, -1, none, none, 0.f, (double)none};
}

// Folds x into the statistics (max, sum of e^(x - max)); -inf adds nothing.
__device__ __forceinline__ void addToSoftmax(float &max, float &sum, float x) {
  if (x > max) {
    sum = (sum > 0.f ? sum * __expf(max - x) : 0.f) + 1.f;
    max = x;
  } else if (x > dlm_device::negativeInfinity()) {
    sum += __expf(x - max);
  }
}

__device__ __forceinline__ void mergeSoftmax(float &max, float &sum, float otherMax,
                                             float otherSum) {
  if (otherSum <= 0.f)
    return;
  if (sum <= 0.f) {
    max = otherMax;
    sum = otherSum;
    return;
  }
  const float merged = fmaxf(max, otherMax);
  sum = sum * __expf(max - merged) + otherSum * __expf(otherMax - merged);
  max = merged;
}

__device__ __forceinline__ void addLogit(RowState &state, float logit, float z, int v,
                                         bool sampling, bool unitStatistics, int excludedToken,
                                         unsigned long long key) {
  if (kUnitConfidence && unitStatistics)
    addToSoftmax(state.unitMax, state.unitSum, logit);
  if (z > state.max) {
    // A new maximum rescales what was summed so far; nothing was when sum == 0.
    const float delta = state.max - z;
    const float rescale = state.sum > 0.f ? __expf(delta) : 0.f;
    state.weighted = state.sum > 0.f ? (state.weighted + delta * state.sum) * rescale : 0.f;
    state.sum = state.sum * rescale + 1.f;
    state.max = z;
  } else {
    const float delta = z - state.max;
    // -inf logits (a masked vocabulary entry) add nothing, rather than NaN.
    const float e = delta > dlm_device::negativeInfinity() ? __expf(delta) : 0.f;
    state.sum += e;
    if (e > 0.f)
      state.weighted = fmaf(e, delta, state.weighted);
  }
  if (v == excludedToken)
    return;
  if (z > state.bestLogit || state.best < 0) {
    state.bestLogit = z;
    state.best = v;
  }
  if (sampling && ((double)z + dlm_device::kGumbelCeiling > state.sampleScore || state.sample < 0)) {
    const double score = (double)z + dlm_device::gumbel(key, (unsigned long long)v);
    if (score > state.sampleScore || state.sample < 0) {
      state.sampleScore = score;
      state.sample = v;
      state.sampleLogit = z;
    }
  }
}

// a := a (+) b. Ties go to the lower token id, so the result does not depend on merge order.
__device__ __forceinline__ void merge(RowState &a, const RowState &b) {
  if (b.sum > 0.f) {
    if (a.sum <= 0.f) {
      a.max = b.max;
      a.sum = b.sum;
      a.weighted = b.weighted;
    } else {
      const float max = fmaxf(a.max, b.max);
      const float da = a.max - max, db = b.max - max;
      const float ea = __expf(da), eb = __expf(db);
      a.weighted = (a.weighted + da * a.sum) * ea + (b.weighted + db * b.sum) * eb;
      a.sum = a.sum * ea + b.sum * eb;
      a.max = max;
    }
  }
  if (b.best >= 0 && (a.best < 0 || b.bestLogit > a.bestLogit ||
                      (b.bestLogit == a.bestLogit && b.best < a.best))) {
    a.bestLogit = b.bestLogit;
    a.best = b.best;
  }
  if (b.sample >= 0 && (a.sample < 0 || b.sampleScore > a.sampleScore ||
                        (b.sampleScore == a.sampleScore && b.sample < a.sample))) {
    a.sampleScore = b.sampleScore;
    a.sample = b.sample;
    a.sampleLogit = b.sampleLogit;
  }
  if (kUnitConfidence)
    mergeSoftmax(a.unitMax, a.unitSum, b.unitMax, b.unitSum);
}

__device__ __forceinline__ RowState shuffleXor(const RowState &s, int laneMask) {
  RowState o;
  o.max = __shfl_xor_sync(dlm_device::kFullWarp, s.max, laneMask);
  o.sum = __shfl_xor_sync(dlm_device::kFullWarp, s.sum, laneMask);
  o.weighted = __shfl_xor_sync(dlm_device::kFullWarp, s.weighted, laneMask);
  o.bestLogit = __shfl_xor_sync(dlm_device::kFullWarp, s.bestLogit, laneMask);
  o.best = __shfl_xor_sync(dlm_device::kFullWarp, s.best, laneMask);
  o.sample = __shfl_xor_sync(dlm_device::kFullWarp, s.sample, laneMask);
  o.sampleLogit = __shfl_xor_sync(dlm_device::kFullWarp, s.sampleLogit, laneMask);
  o.sampleScore = __shfl_xor_sync(dlm_device::kFullWarp, s.sampleScore, laneMask);
  o.unitMax = s.unitMax;
  o.unitSum = s.unitSum;
  if (kUnitConfidence) {
    o.unitMax = __shfl_xor_sync(dlm_device::kFullWarp, s.unitMax, laneMask);
    o.unitSum = __shfl_xor_sync(dlm_device::kFullWarp, s.unitSum, laneMask);
  }
  return o;
}

${entryPoint} {
  const int row = blockIdx.x;
  if (row >= rows)
    return;
  const int request = rowRequest[row];
  const float temperature = requestTemperature[request];
  const bool sampling = temperature > 0.f;
  const float inverseTemperature = sampling ? 1.f / temperature : 1.f;
  // Greedy and T = 1 rows have z = logit: their statistics at T are the unit ones.
  const bool unitStatistics = kUnitConfidence && sampling && temperature != 1.f;
  const unsigned long long key = dlm_device::positionKey(
      dlm_device::stepKey(requestSeed[request], requestId[request], dlm_device::kStreamGumbel,
                          (unsigned long long)requestStep[request]),
      rowPosition[row]);
  const Logit *in = logits + (long long)row * rowStride;

  RowState state = emptyState();
  for (int chunk = threadIdx.x; chunk < kVocab / kVector; chunk += kThreads) {
    float values[kVector];
    dlm_device::loadFloats<kVector>(in + chunk * kVector, values);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      float logit = values[k];
      if (kSoftcap)
        logit = kSoftcapValue * tanhf(logit / kSoftcapValue);
      addLogit(state, logit, logit * inverseTemperature, chunk * kVector + k, sampling,
               unitStatistics, excludedToken, key);
    }
  }

#pragma unroll
  for (int laneMask = 16; laneMask > 0; laneMask >>= 1)
    merge(state, shuffleXor(state, laneMask));
  __shared__ RowState warpStates[kWarps];
  if ((threadIdx.x & 31) == 0)
    warpStates[threadIdx.x >> 5] = state;
  __syncthreads();
  if (threadIdx.x != 0)
    return;
  RowState total = warpStates[0];
  for (int w = 1; w < kWarps; ++w)
    merge(total, warpStates[w]);
  const int chosen = sampling ? total.sample : total.best;
  const float chosenLogit = sampling ? total.sampleLogit : total.bestLogit;
  sampled[row] = chosen;
  argmax[row] = total.best;
  entropy[row] = fmaxf(0.f, __logf(total.sum) - total.weighted / total.sum);
  float chosenProbability = 0.f;
  if (chosen >= 0 && unitStatistics) {
    float logit = dlm_device::toFloat(in[chosen]);
    if (kSoftcap)
      logit = kSoftcapValue * tanhf(logit / kSoftcapValue);
    chosenProbability = __expf(logit - total.unitMax) / total.unitSum;
  } else if (chosen >= 0) {
    chosenProbability = __expf(chosenLogit - total.max) / total.sum;
  }
  confidence[row] = chosenProbability;
${statisticsStores}}
)cuda";

} // namespace

StatusOr<KernelSource> generateSampler(const SamplerParams &params) {
  if (params.vocab < 2 || params.vocab > (int64_t(1) << 30))
    return Status::error("sampler: vocab must be in [2, 2^30], got " +
                         std::to_string(params.vocab));
  if (params.threads < 32 || params.threads > 1024 || params.threads % 32 != 0)
    return Status::error("sampler: threads must be a multiple of 32 in [32, 1024], got " +
                         std::to_string(params.threads));
  if (params.softcap < 0)
    return Status::error("sampler: softcap must be >= 0 (0: none)");
  const int vector = vectorWidth(params.logits, params.vocab);

  KernelSource kernel;
  kernel.kind = "sampler";
  kernel.name = "dlm_sampler_v" + std::to_string(params.vocab) + "_" +
                std::string(elementTypeName(params.logits)) + "_t" + std::to_string(params.threads);
  if (params.softcap > 0)
    kernel.name += "_cap" + identifierFragment(params.softcap);
  // The temperature-1 confidence (what low-confidence ranks by) carries no suffix.
  if (params.confidence == SamplerConfidence::atTemperature)
    kernel.name += "_conf_at_t";
  if (params.softmaxStatistics)
    kernel.name += "_stats";
  kernel.hot = true;
  kernel.blockThreads = static_cast<unsigned>(params.threads);
  kernel.grid = "x = rows";
  // RowState is 48 bytes (8-byte aligned for its double).
  kernel.sharedMemoryBytes = static_cast<unsigned>(48 * (params.threads / 32));
  const std::string logit(cudaElementType(params.logits));
  kernel.parameters = {
      {"const " + logit + " *__restrict__", "logits"},
      {"long long", "rowStride"},
      {"int", "rows"},
      {"const int *__restrict__", "rowRequest"},
      {"const int *__restrict__", "rowPosition"},
      {"const unsigned long long *__restrict__", "requestSeed"},
      {"const unsigned long long *__restrict__", "requestId"},
      {"const long long *__restrict__", "requestStep"},
      {"const float *__restrict__", "requestTemperature"},
      {"int", "excludedToken"},
      {"int *__restrict__", "sampled"},
      {"int *__restrict__", "argmax"},
      {"float *__restrict__", "entropy"},
      {"float *__restrict__", "confidence"},
  };
  if (params.softmaxStatistics) {
    kernel.parameters.push_back({"float *__restrict__", "softmaxMax"});
    kernel.parameters.push_back({"float *__restrict__", "softmaxSum"});
  }
  kernel.specialisation = {{"vocab", params.vocab},
                           {"logits", std::string(elementTypeName(params.logits))},
                           {"softcap", params.softcap},
                           {"threads", params.threads},
                           {"confidence", std::string(samplerConfidenceName(params.confidence))},
                           {"softmax_statistics", params.softmaxStatistics}};
  const std::string body = expandKernelBody(
      kernel, kBody,
      {{"logit", logit},
       {"vocab", std::to_string(params.vocab)},
       {"vector", std::to_string(vector)},
       {"hasSoftcap", boolLiteral(params.softcap > 0)},
       {"softcap", floatLiteral(params.softcap > 0 ? params.softcap : 1.0)},
       {"unitConfidence", boolLiteral(params.confidence == SamplerConfidence::unitTemperature)},
       {"statisticsStores", params.softmaxStatistics ? "  softmaxMax[row] = total.max;\n"
                                                       "  softmaxSum[row] = total.sum;\n"
                                                     : ""}});
  kernel.source = assembleTranslationUnit(
      kernel,
      "Fused sampler over " + std::to_string(params.vocab) +
          " logits per row: softmax statistics, entropy, argmax, Gumbel-max sample, its " +
          (params.confidence == SamplerConfidence::unitTemperature
               ? "probability at temperature 1."
               : "probability at the temperature."),
      body);
  return kernel;
}

} // namespace dlm::codegen
