// Mixture of experts, step 3 of 4: the experts' products over their slots (MoePlan.cpp's
// lists), a grouped GEMM with no host round trip: block (x, y, z) computes output columns
// [64x, 64x + 64) of rows [64y, 64y + 64) of expert z's list, and a block past the expert's
// count returns at once (the grid is sized for the most slots an expert can have: every token).
// SIMT fp32 FMAs: 256 threads, each 4 rows x 4 columns, over tiles of 16 of the reduced
// dimension staged in shared memory (transposed, so that each thread reads float4s).
//   gated (gate_up): act[slot, n] = act(x[t] . gate_up[e][n]) * (x[t] . gate_up[e][I + n])
//     for n < I, where t = slot / k reads the expert input x (device precision); act is f32.
//   down: out[slot, n] = act[slot] . down[e][n] for n < H; out is f32.
// Each output is a fixed-order sum, so the result does not depend on a list's order.
//
// Arguments: gated: x [tokens, H] (token stride xStride), weights = gate_up [E, 2I, H];
//            down: act [tokens * k, I] (f32), weights = down [E, H, I];
//            then tokens, lists [E, tokens], counts [E], out [tokens * k, n] (f32).
// Grid: x = ceil(outputs / 64), y = ceil(tokens / 64), z = E; 256 threads.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr int64_t kThreads = 256;
constexpr int64_t kTile = 64;
constexpr int64_t kTileReduce = 16;

constexpr std::string_view kBody = R"cuda(using Element = ${element};
using Input = ${input};
constexpr bool kGated = ${gated};
constexpr int kReduce = ${reduce};   // the reduced dimension: H (gated) or I (down)
constexpr int kOutputs = ${outputs}; // output columns: I (gated) or H (down)
constexpr int kWeightRows = kGated ? 2 * kOutputs : kOutputs; // rows per expert
constexpr int kTopK = ${topK};
constexpr int kTile = ${tile};
constexpr int kTileReduce = ${tileReduce};
constexpr int kPitch = kTile + 4;
constexpr int kLoads = kTile * kTileReduce / kThreads; // 4

${activation}

${entryPoint} {
  const int expert = blockIdx.z;
  const int count = counts[expert];
  const int firstRow = blockIdx.y * kTile;
  if (firstRow >= count)
    return; // the whole block, before any barrier
  const int firstColumn = blockIdx.x * kTile;
  const int rowThread = threadIdx.x / 16;
  const int columnThread = threadIdx.x % 16;

  __shared__ int sSlot[kTile];
  __shared__ __align__(16) float sInput[kTileReduce][kPitch];   // [reduced][row]
  __shared__ __align__(16) float sWeight[kTileReduce][kPitch];  // [reduced][column]
  __shared__ __align__(16) float sUp[kGated ? kTileReduce : 1][kPitch];
  for (int r = threadIdx.x; r < kTile; r += kThreads)
    sSlot[r] = firstRow + r < count ? lists[(long long)expert * tokens + firstRow + r] : -1;
  __syncthreads();

  const Element *expertWeights = weights + (long long)expert * kWeightRows * kReduce;
  float acc[4][4], up[kGated ? 4 : 1][kGated ? 4 : 1];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      acc[i][j] = 0.f;
#pragma unroll
  for (int i = 0; i < (kGated ? 4 : 1); ++i)
#pragma unroll
    for (int j = 0; j < (kGated ? 4 : 1); ++j)
      up[i][j] = 0.f;

  for (int first = 0; first < kReduce; first += kTileReduce) {
#pragma unroll
    for (int part = 0; part < kLoads; ++part) {
      const int index = threadIdx.x + part * kThreads;
      const int r = index / kTileReduce, k = index % kTileReduce;
      const int slot = sSlot[r];
      float value = 0.f;
      if (slot >= 0 && first + k < kReduce)
        value = dlm_device::toFloat(
            kGated ? input[(long long)(slot / kTopK) * inputStride + first + k]
                   : input[(long long)slot * kReduce + first + k]);
      sInput[k][r] = value;
      const int n = firstColumn + r; // the same split for the weight tile's columns
      const bool inside = n < kOutputs && first + k < kReduce;
      sWeight[k][r] =
          inside ? dlm_device::toFloat(expertWeights[(long long)n * kReduce + first + k]) : 0.f;
      if (kGated)
        sUp[kGated ? k : 0][r] =
            inside ? dlm_device::toFloat(
                         expertWeights[(long long)(kOutputs + n) * kReduce + first + k])
                   : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTileReduce; ++k) {
      const float4 a = *reinterpret_cast<const float4 *>(&sInput[k][rowThread * 4]);
      const float4 b = *reinterpret_cast<const float4 *>(&sWeight[k][columnThread * 4]);
      const float as[4] = {a.x, a.y, a.z, a.w};
      const float bs[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          acc[i][j] = fmaf(as[i], bs[j], acc[i][j]);
      if (kGated) {
        const float4 u = *reinterpret_cast<const float4 *>(&sUp[kGated ? k : 0][columnThread * 4]);
        const float us[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < (kGated ? 4 : 1); ++i)
#pragma unroll
          for (int j = 0; j < (kGated ? 4 : 1); ++j)
            up[i][j] = fmaf(as[i], us[j], up[i][j]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int slot = sSlot[rowThread * 4 + i];
    if (slot < 0)
      continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = firstColumn + columnThread * 4 + j;
      if (n >= kOutputs)
        continue;
      float value = acc[i][j];
      if (kGated)
        value = activate(value) * up[kGated ? i : 0][kGated ? j : 0];
      out[(long long)slot * kOutputs + n] = value;
    }
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateMoeExperts(const MoeParams &params, bool gated) {
  DLM_RETURN_IF_ERROR(checkMoeParams(params));
  const std::string element(cudaElementType(params.element));
  const int64_t reduce = gated ? params.hidden : params.expertWidth;
  const int64_t outputs = gated ? params.expertWidth : params.hidden;
  KernelSource kernel;
  kernel.kind = "moe_experts";
  // gelu_tanh's names are those of the kernels before SiLU was served.
  const std::string activation(activationName(params.activation));
  const std::string stage = !gated                                      ? "down"
                            : params.activation == Activation::geluTanh ? "gate_up"
                                                                        : "gate_up_" + activation;
  kernel.name = "dlm_moe_" + stage + "_h" + std::to_string(params.hidden) + "_i" +
                std::to_string(params.expertWidth) + "_e" + std::to_string(params.experts) + "_k" +
                std::to_string(params.topK) + "_" + std::string(elementTypeName(params.element));
  kernel.hot = true;
  kernel.blockThreads = static_cast<unsigned>(kThreads);
  kernel.grid = "x = ceil(" + std::to_string(outputs) + " / 64), y = ceil(tokens / 64), z = " +
                std::to_string(params.experts) + " (experts)";
  kernel.sharedMemoryBytes = static_cast<unsigned>(
      4 * kTile + 4 * (kTile + 4) * (2 * kTileReduce + (gated ? kTileReduce : 1)));
  kernel.parameters = {
      {gated ? "const " + element + " *__restrict__" : "const float *__restrict__", "input"},
      {"long long", "inputStride"},
      {"const " + element + " *__restrict__", "weights"},
      {"int", "tokens"},
      {"const int *__restrict__", "lists"},
      {"const int *__restrict__", "counts"},
      {"float *__restrict__", "out"},
  };
  kernel.specialisation = {{"stage", std::string(gated ? "gate_up" : "down")},
                           {"hidden", params.hidden},
                           {"expert_width", params.expertWidth},
                           {"experts", params.experts},
                           {"top_k", params.topK},
                           {"element", std::string(elementTypeName(params.element))}};
  if (gated)
    kernel.specialisation["activation"] = activation;
  const std::string body = expandKernelBody(kernel, kBody,
                                            {{"element", element},
                                             {"activation", activationFunction(params.activation)},
                                             {"input", gated ? element : "float"},
                                             {"gated", boolLiteral(gated)},
                                             {"reduce", std::to_string(reduce)},
                                             {"outputs", std::to_string(outputs)},
                                             {"topK", std::to_string(params.topK)},
                                             {"tile", std::to_string(kTile)},
                                             {"tileReduce", std::to_string(kTileReduce)}});
  kernel.source = assembleTranslationUnit(
      kernel,
      std::string("MoE expert products (") +
          (gated ? "gate_up, " + activation + "(gate) * up" : std::string("down")) +
          ") over each expert's slots, " + std::to_string(params.experts) + " experts.",
      body);
  return kernel;
}

} // namespace dlm::codegen
