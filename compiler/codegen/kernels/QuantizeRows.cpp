// Activations quantized to FP8 E4M3 for cuBLASLt's FP8 GEMM (sm_90; its FP8 GEMMs take FP8 on
// both sides): one scale per row, scale = max|x| / 448 (E4M3's largest finite value, so the row's
// largest element maps to +-448), codes = E4M3(x / scale) rounded to nearest even and saturated
// to +-448. The GEMM multiplies the scales back in as its B scale vector (outer-vector scaling),
// beside the weights' per-output-channel scales. One block per row: the row's absolute maximum
// through warp shuffles and one shared slot per warp, then the codes. The encoding is written out
// (no cuda_fp8.h): normal values round their float32 mantissa to 3 bits (the carry may bump the
// exponent, as it should), values below 2^-6 are multiples of 2^-9 (a result of 8 such units is
// the smallest normal, code 0x08).
//
// Arguments: x [rows, width] (row stride xStride elements, the device precision), codes
// [rows, width] bytes (contiguous), scales [rows] f32, rows.
// Grid: x = rows; 256 threads.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr int64_t kThreads = 256;

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kWidth = ${width};
constexpr int kWarps = kThreads / 32;
constexpr float kE4m3Max = 448.f;

__device__ __forceinline__ unsigned char encodeE4m3(float value) {
  const unsigned bits = static_cast<unsigned>(__float_as_int(value));
  const unsigned sign = (bits >> 24) & 0x80u;
  const float magnitude = fabsf(value);
  if (!(magnitude == magnitude))
    return static_cast<unsigned char>(sign | 0x7fu);
  if (magnitude >= 0.015625f) { // 2^-6, the smallest normal
    unsigned magnitudeBits = bits & 0x7fffffffu;
    magnitudeBits += 0x7ffffu + ((magnitudeBits >> 20) & 1u); // to nearest even at bit 20
    const int exponent = static_cast<int>(magnitudeBits >> 23) - 127 + 7;
    const unsigned mantissa = (magnitudeBits >> 20) & 7u;
    if (exponent > 15 || (exponent == 15 && mantissa == 7u))
      return static_cast<unsigned char>(sign | 0x7eu); // saturated to 448
    return static_cast<unsigned char>(sign | (static_cast<unsigned>(exponent) << 3) | mantissa);
  }
  // Subnormal: a multiple of 2^-9, rounded to nearest even (8 is the smallest normal's code).
  return static_cast<unsigned char>(sign | static_cast<unsigned>(rintf(magnitude * 512.f)));
}

${entryPoint} {
  const int row = blockIdx.x;
  if (row >= rows)
    return;
  const Element *in = x + (long long)row * xStride;
  float largest = 0.f;
  for (int i = threadIdx.x; i < kWidth; i += kThreads)
    largest = fmaxf(largest, fabsf(dlm_device::toFloat(in[i])));
  __shared__ float warpLargest[kWarps];
  __shared__ float rowScale;
  largest = dlm_device::warpMax(largest);
  if ((threadIdx.x & 31) == 0)
    warpLargest[threadIdx.x >> 5] = largest;
  __syncthreads();
  if (threadIdx.x == 0) {
    float rowLargest = 0.f;
    for (int w = 0; w < kWarps; ++w)
      rowLargest = fmaxf(rowLargest, warpLargest[w]);
    // At least the smallest normal float: a tiny row's scale must not underflow to 0.
    rowScale = rowLargest > 0.f ? fmaxf(rowLargest / kE4m3Max, 1.17549435e-38f) : 1.f;
    scales[row] = rowScale;
  }
  __syncthreads();
  const float scale = rowScale;
  unsigned char *out = codes + (long long)row * kWidth;
  for (int i = threadIdx.x; i < kWidth; i += kThreads)
    out[i] = encodeE4m3(dlm_device::toFloat(in[i]) / scale);
}
)cuda";

} // namespace

StatusOr<KernelSource> generateQuantizeRows(const QuantizeRowsParams &params) {
  DLM_RETURN_IF_ERROR(checkWidth("quantize_rows: width", params.width, 24));
  KernelSource kernel = rowKernelSource("quantize_rows", "dlm_quantize_rows_fp8_e4m3", params.width,
                                        params.element, true, static_cast<unsigned>(kThreads));
  kernel.grid = "x = rows";
  kernel.sharedMemoryBytes = (kThreads / 32 + 1) * sizeof(float);
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const " + element + " *__restrict__", "x"},
      {"long long", "xStride"},
      {"unsigned char *__restrict__", "codes"},
      {"float *__restrict__", "scales"},
      {"int", "rows"},
  };
  const std::string body = expandKernelBody(
      kernel, kBody, {{"element", element}, {"width", std::to_string(params.width)}});
  kernel.source = assembleTranslationUnit(
      kernel, "rows of " + std::to_string(params.width) + " to FP8 E4M3, one scale per row.", body);
  return kernel;
}

} // namespace dlm::codegen
