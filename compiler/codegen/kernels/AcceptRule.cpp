// The accept rule of a denoising step, one block per request's canvas, one thread per position,
// plus the convergence test. Candidates are every position (entropy-bound canvases re-predict
// all of them) or, for mask-absorbing models, the positions still holding the mask token.
//
// Each candidate finds its rank among the candidates by comparing itself with every other
// (ascending entropy, or descending confidence; ties to the lower position): O(C^2 / threads)
// shared-memory reads, a few microseconds for C <= 1024 and simpler than a sorting network.
//   - entropy_bound: the entropies are placed in rank order and prefix-summed in double (exact
//     for a canvas of float entropies); rank k is kept while the sum of the ranks before it is
//     <= bound; rank 0 always;
//   - confidence_threshold: kept when confidence >= threshold, and rank 0 always (threshold 0
//     keeps every candidate: Fast-dLLM's last scheduled step of a block);
//   - top_k: kept when rank < k.
// The confidences are the sampler's; the CPU's low-confidence policy ranks by the chosen token's
// probability at temperature 1 (SamplerConfidence::unitTemperature), the entropy-bound rule
// reads only entropies.
// Convergence: stableSteps counts consecutive steps whose argmax canvas equals the previous one
// (previousArgmax starts at -1 for a new canvas); converged = stableSteps >= stability and mean
// entropy over the canvas < confidenceBound. previousArgmax then takes this step's argmax.
//
// Arguments (rows of request b are b * canvas ..): entropy, confidence, argmax, canvas tokens,
// previousArgmax (in/out), stableSteps [requests] (in/out), keep (out), converged [requests]
// (out), bound, threshold, topK, maskToken, stability, confidenceBound.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(constexpr int kCanvas = ${canvas};
constexpr int kWarps = kThreads / 32;
constexpr bool kMaskAbsorbing = ${maskAbsorbing};
constexpr bool kByEntropy = ${byEntropy};

// Whether position j comes before position i in the walk order.
__device__ __forceinline__ bool before(float keyJ, int j, float keyI, int i) {
  return kByEntropy ? (keyJ < keyI || (keyJ == keyI && j < i))
                    : (keyJ > keyI || (keyJ == keyI && j < i));
}

// Inclusive prefix sum over the block, one value per thread.
__device__ __forceinline__ double blockInclusiveSum(double value, double *warpTotals) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const double other = __shfl_up_sync(dlm_device::kFullWarp, value, offset);
    if (lane >= offset)
      value += other;
  }
  if (lane == 31)
    warpTotals[warp] = value;
  __syncthreads();
  if (warp == 0) {
    double total = lane < kWarps ? warpTotals[lane] : 0.0;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const double other = __shfl_up_sync(dlm_device::kFullWarp, total, offset);
      if (lane >= offset)
        total += other;
    }
    if (lane < kWarps)
      warpTotals[lane] = total;
  }
  __syncthreads();
  return warp > 0 ? value + warpTotals[warp - 1] : value;
}

${entryPoint} {
  const int request = blockIdx.x;
  const int i = threadIdx.x;
  const bool active = i < kCanvas;
  const long long row = (long long)request * kCanvas + i;

  __shared__ float sKey[kCanvas];
  __shared__ unsigned char sCandidate[kCanvas];
  __shared__ double sSorted[kThreads];
  __shared__ double sWarpTotals[kWarps];
  __shared__ double sWarpEntropy[kWarps];
  __shared__ int sWarpChanged[kWarps];

  const float h = active ? entropy[row] : 0.f;
  const float key = kByEntropy ? h : (active ? confidence[row] : 0.f);
  const bool candidate = active && (!kMaskAbsorbing || canvas[row] == maskToken);
  if (active) {
    sKey[i] = key;
    sCandidate[i] = candidate ? 1 : 0;
  }
  sSorted[i] = 0.0;
  __syncthreads();

  int rank = 0;
  if (candidate)
    for (int j = 0; j < kCanvas; ++j)
      rank += (sCandidate[j] && before(sKey[j], j, key, i)) ? 1 : 0;

  bool kept = false;
  if (kByEntropy) {
    if (candidate)
      sSorted[rank] = (double)h;
    __syncthreads();
    const double running = blockInclusiveSum(sSorted[i], sWarpTotals);
    __syncthreads();
    sSorted[i] = running; // sSorted[k] = entropy of ranks 0..k
    __syncthreads();
    kept = candidate && (rank == 0 || sSorted[rank] - (double)h <= bound);
  } else if (${byThreshold}) {
    kept = candidate && (rank == 0 || (double)key >= threshold);
  } else {
    kept = candidate && rank < topK;
  }

  // Convergence: block sums of the entropy and of the positions whose argmax changed, summed
  // in a fixed order so that the mean entropy is the same bits on every run.
  const double warpEntropy = dlm_device::warpSum((double)h);
  const int current = active ? argmax[row] : 0;
  const int warpChanged =
      dlm_device::warpSum((active && current != previousArgmax[row]) ? 1 : 0);
  if ((i & 31) == 0) {
    sWarpEntropy[i >> 5] = warpEntropy;
    sWarpChanged[i >> 5] = warpChanged;
  }
  __syncthreads();
  if (active) {
    keep[row] = kept ? 1 : 0;
    previousArgmax[row] = current;
  }
  if (i == 0) {
    double entropySum = 0.0;
    int changed = 0;
    for (int w = 0; w < kWarps; ++w) {
      entropySum += sWarpEntropy[w];
      changed += sWarpChanged[w];
    }
    const int steps = changed == 0 ? stableSteps[request] + 1 : 0;
    stableSteps[request] = steps;
    converged[request] = (steps >= stability && entropySum / kCanvas < confidenceBound) ? 1 : 0;
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateAccept(const AcceptParams &params) {
  if (params.canvas <= 0 || params.canvas > 1024)
    return Status::error("accept: canvas must be in [1, 1024], got " +
                         std::to_string(params.canvas));
  const int64_t threads = roundUp(params.canvas, 32);
  KernelSource kernel;
  kernel.kind = "accept";
  kernel.name = "dlm_accept_" + std::string(acceptRuleName(params.rule)) + "_c" +
                std::to_string(params.canvas) + (params.maskAbsorbing ? "_masked" : "");
  kernel.hot = false;
  kernel.blockThreads = static_cast<unsigned>(threads);
  kernel.grid = "x = requests";
  kernel.sharedMemoryBytes =
      static_cast<unsigned>(roundUp(params.canvas * 5, 8) + threads * 8 + (threads / 32) * 20);
  kernel.parameters = {
      {"const float *__restrict__", "entropy"},
      {"const float *__restrict__", "confidence"},
      {"const int *__restrict__", "argmax"},
      {"const int *__restrict__", "canvas"},
      {"int *__restrict__", "previousArgmax"},
      {"int *__restrict__", "stableSteps"},
      {"unsigned char *__restrict__", "keep"},
      {"int *__restrict__", "converged"},
      {"double", "bound"},
      {"double", "threshold"},
      {"int", "topK"},
      {"int", "maskToken"},
      {"int", "stability"},
      {"double", "confidenceBound"},
  };
  kernel.specialisation = {{"canvas", params.canvas},
                           {"rule", std::string(acceptRuleName(params.rule))},
                           {"mask_absorbing", params.maskAbsorbing}};
  const std::string body = expandKernelBody(
      kernel, kBody,
      {{"canvas", std::to_string(params.canvas)},
       {"maskAbsorbing", boolLiteral(params.maskAbsorbing)},
       {"byEntropy", boolLiteral(params.rule == AcceptRule::entropyBound)},
       {"byThreshold", boolLiteral(params.rule == AcceptRule::confidenceThreshold)}});
  kernel.source = assembleTranslationUnit(
      kernel,
      "Accept rule " + std::string(acceptRuleName(params.rule)) + " over canvases of " +
          std::to_string(params.canvas) + ", and the convergence test.",
      body);
  return kernel;
}

} // namespace dlm::codegen
