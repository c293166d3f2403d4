// A projection weight stored narrower than the device computes (dlmc compile --weights int8, or
// an FP8 E4M3 checkpoint) widened for one GEMM: out[r, c] = decode(weight[r, c]) * scale[r], at
// the device precision, into a scratch matrix that the cuBLASLt GEMM after it reads. cuBLASLt
// has no GEMM of 8-bit weights by bf16 or f32 activations (its int8 GEMMs take int8 activations,
// its FP8 ones FP8 activations), so the weights stay 8-bit in device memory and only one
// projection at a time is wide. decode is the value of a signed byte (i8) or of an E4M3 code
// (OCP FP8: bias 7, no infinities, S.1111.111 is NaN); the product is formed in float32, as the
// CPU backend widens them (runtime/model/ModelWeights.h, storedValue), so an f32 device gets the
// CPU's weights bit for bit.
//
// Arguments: weight [rows, cols] (bytes), scale [rows] f32, out [rows, cols] (the device
// precision), rows, cols.
// Grid: x = ceil(rows * cols / 1024); 256 threads, 4 consecutive elements each.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr int64_t kThreads = 256;
constexpr int64_t kPerThread = 4;

constexpr std::string_view kI8Decode =
    R"cuda(__device__ __forceinline__ float decodeStored(unsigned char code) {
  return static_cast<float>(static_cast<signed char>(code));
}
)cuda";

constexpr std::string_view kE4m3Decode =
    R"cuda(__device__ __forceinline__ float decodeStored(unsigned char code) {
  const unsigned sign = (code & 0x80u) << 24, exponent = (code >> 3) & 15u, mantissa = code & 7u;
  if (exponent == 15u && mantissa == 7u)
    return __int_as_float(sign | 0x7fc00000u);
  if (exponent == 0u) { // subnormal: mantissa * 2^-9
    const float magnitude = static_cast<float>(mantissa) * 0.001953125f;
    return sign ? -magnitude : magnitude;
  }
  return __int_as_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}
)cuda";

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kPerThread = ${perThread};

${decode}
${entryPoint} {
  const long long count = rows * cols;
  const long long first = ((long long)blockIdx.x * kThreads + threadIdx.x) * kPerThread;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const long long i = first + k;
    if (i < count)
      dlm_device::storeFloat(out + i, decodeStored(weight[i]) * scale[i / cols]);
  }
}
)cuda";

} // namespace

std::string_view storedWeightName(StoredWeight stored) {
  return stored == StoredWeight::i8 ? "i8" : "fp8_e4m3";
}

StatusOr<KernelSource> generateWidenWeight(const WidenWeightParams &params) {
  KernelSource kernel;
  kernel.kind = "widen_weight";
  kernel.name = "dlm_widen_weight_" + std::string(storedWeightName(params.stored)) + "_" +
                std::string(elementTypeName(params.element));
  kernel.hot = true;
  kernel.blockThreads = static_cast<unsigned>(kThreads);
  kernel.grid = "x = ceil(rows * cols / " + std::to_string(kThreads * kPerThread) + ")";
  kernel.sharedMemoryBytes = 0;
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const unsigned char *__restrict__", "weight"},
      {"const float *__restrict__", "scale"},
      {element + " *__restrict__", "out"},
      {"long long", "rows"},
      {"long long", "cols"},
  };
  kernel.specialisation = {{"stored", std::string(storedWeightName(params.stored))},
                           {"element", std::string(elementTypeName(params.element))}};
  const std::string body = expandKernelBody(
      kernel, kBody,
      {{"element", element},
       {"perThread", std::to_string(kPerThread)},
       {"decode", std::string(params.stored == StoredWeight::i8 ? kI8Decode : kE4m3Decode)}});
  kernel.source = assembleTranslationUnit(kernel,
                                          "a " + std::string(storedWeightName(params.stored)) +
                                              " weight times its row scales, widened.",
                                          body);
  return kernel;
}

} // namespace dlm::codegen
