// RMSNorm, one block per row: the row is read once into registers (16-byte loads), the sum of
// squares is reduced in fp32 through warp shuffles and one shared slot per warp, and the row is
// scaled and written back. Row r is token r / rowsPerToken, sub-row r % rowsPerToken, so the same
// kernel normalises a [tokens, width] activation and every head of a [tokens, heads, width]
// projection (q_norm / k_norm) inside a wider fused buffer.
//
// Arguments: x, xTokenStride, y, yTokenStride (elements; y may be x), weight [width] (of the
// activations' element type: the backend converts weights at load time; unused without weight),
// rows, rowsPerToken, eps. Token strides must be multiples of the vector
// width (8 bf16 / 4 f32 when width allows it).
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"
#include "compiler/codegen/RecordKernels.h"

#include <algorithm>

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(${rowConstants}constexpr int kWarps = kThreads / 32;
constexpr int kChunksPerThread = (kChunks + kThreads - 1) / kThreads;
constexpr bool kHasWeight = ${hasWeight};

${entryPoint} {
  const int row = blockIdx.x;
  if (row >= rows)
    return;
  const long long token = row / rowsPerToken;
  const long long within = (long long)(row % rowsPerToken) * kWidth;
  const Element *in = x + token * xTokenStride + within;
  Element *out = y + token * yTokenStride + within;

  float values[kChunksPerThread][kVector];
  float sumSquares = 0.f;
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const int chunk = threadIdx.x + i * kThreads;
    if (chunk < kChunks) {
      dlm_device::loadFloats<kVector>(in + chunk * kVector, values[i]);
#pragma unroll
      for (int k = 0; k < kVector; ++k)
        sumSquares = fmaf(values[i][k], values[i][k], sumSquares);
    }
  }

  __shared__ float warpSums[kWarps];
  __shared__ float rowScale;
  sumSquares = dlm_device::warpSum(sumSquares);
  if ((threadIdx.x & 31) == 0)
    warpSums[threadIdx.x >> 5] = sumSquares;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w)
      total += warpSums[w];
    rowScale = rsqrtf(total / kWidth + eps);
  }
  __syncthreads();
  const float scale = rowScale;

#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const int chunk = threadIdx.x + i * kThreads;
    if (chunk < kChunks) {
      float scaled[kVector];
      float weights[kVector];
      if (kHasWeight)
        dlm_device::loadFloats<kVector>(weight + chunk * kVector, weights);
#pragma unroll
      for (int k = 0; k < kVector; ++k)
        scaled[k] = kHasWeight ? values[i][k] * scale * weights[k] : values[i][k] * scale;
      dlm_device::storeFloats<kVector>(out + chunk * kVector, scaled);
    }
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateRmsNorm(const RmsNormParams &params) {
  DLM_RETURN_IF_ERROR(checkWidth("rms_norm: width", params.width, 20));
  const int64_t chunks = params.width / vectorWidth(params.element, params.width);
  // Up to 256 threads; wider rows give each thread several 16-byte chunks (more loads in flight).
  const int64_t threads = std::clamp<int64_t>(roundUp(chunks, 32), 32, 256);

  KernelSource kernel = rowKernelSource("rms_norm", "dlm_rms_norm", params.width, params.element,
                                        true, static_cast<unsigned>(threads));
  if (!params.hasWeight)
    kernel.name += "_noscale";
  kernel.specialisation["has_weight"] = params.hasWeight;
  kernel.grid = "x = rows";
  kernel.sharedMemoryBytes = static_cast<unsigned>(4 * (threads / 32) + 4);
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const " + element + " *", "x"},
      {"long long", "xTokenStride"},
      {element + " *", "y"},
      {"long long", "yTokenStride"},
      {"const " + element + " *__restrict__", "weight"},
      {"int", "rows"},
      {"int", "rowsPerToken"},
      {"float", "eps"},
  };
  const std::string body =
      expandKernelBody(kernel, kBody,
                       {{"rowConstants", rowVectorConstants(params.element, params.width)},
                        {"hasWeight", boolLiteral(params.hasWeight)}});
  kernel.source = assembleTranslationUnit(
      kernel, "RMSNorm over rows of " + std::to_string(params.width) + ", fp32 accumulation.",
      body);
  return kernel;
}

Status RecordKernels::rmsNorm() {
  const auto &p = as<kp::RmsNormParams>();
  launched.push_back(p.weight ? normOf(p.weight)
                              : generateRmsNorm({p.normWidth.value_or(width), false, element}));
  return Status::ok();
}

} // namespace dlm::codegen
