// A projection weight stored narrower than the device computes (dlmc compile --weights int8 or
// int4, or an FP8 E4M3 checkpoint) widened for one GEMM: out[r, c] = decode(weight[r, c]) *
// scale[r] (i4: * scale[r, c / group], f16 group scales, two codes a byte), at
// the device precision, into a scratch matrix that the cuBLASLt GEMM after it reads. cuBLASLt
// has no GEMM of 8-bit weights by bf16 or f32 activations (its int8 GEMMs take int8 activations,
// its FP8 ones FP8 activations), so the weights stay 8-bit in device memory and only one
// projection at a time is wide. decode is the value of a signed byte (i8) or of an E4M3 code
// (OCP FP8: bias 7, no infinities, S.1111.111 is NaN); the product is formed in float32, as the
// CPU backend widens them (runtime/model/ModelWeights.h, storedValue), so an f32 device gets the
// CPU's weights bit for bit.
//
// Arguments: weight [rows, cols] (bytes; i4: rows * cols / 2 bytes, element 2i in the low nibble
// of byte i), scale [rows] f32 (i4: [rows, cols / group] f16 bits), out [rows, cols] (the device
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

// i4: the code's signed 4-bit value times its group's scale, an IEEE half decoded by hand (as the
// CPU's floatFromF16: exact).
constexpr std::string_view kI4Body = R"cuda(using Element = ${element};
constexpr int kPerThread = ${perThread};
constexpr long long kGroup = ${group};

__device__ __forceinline__ float decodeHalf(unsigned short bits) {
  const unsigned sign = (bits & 0x8000u) << 16, exponent = (bits >> 10) & 31u, mantissa = bits & 1023u;
  if (exponent == 31u)
    return __int_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0u) { // zero or subnormal: mantissa * 2^-24
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return __int_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

${entryPoint} {
  const long long count = rows * cols, groups = cols / kGroup;
  const long long first = ((long long)blockIdx.x * kThreads + threadIdx.x) * kPerThread;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const long long i = first + k;
    if (i < count) {
      const int nibble = (weight[i >> 1] >> ((i & 1) * 4)) & 15;
      const long long row = i / cols, column = i - row * cols;
      dlm_device::storeFloat(out + i, static_cast<float>(nibble >= 8 ? nibble - 16 : nibble) *
                                          decodeHalf(scale[row * groups + column / kGroup]));
    }
  }
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
  switch (stored) {
  case StoredWeight::i8:
    return "i8";
  case StoredWeight::fp8E4m3:
    return "fp8_e4m3";
  case StoredWeight::i4:
    return "i4";
  }
  return "unknown";
}

StatusOr<KernelSource> generateWidenWeight(const WidenWeightParams &params) {
  const bool int4 = params.stored == StoredWeight::i4;
  if (int4 && (params.groupSize < 2 || params.groupSize % 2 != 0))
    return Status::error("widen_weight: an i4 group size must be even and at least 2, got " +
                         std::to_string(params.groupSize));
  KernelSource kernel;
  kernel.kind = "widen_weight";
  kernel.name = "dlm_widen_weight_" + std::string(storedWeightName(params.stored)) +
                (int4 ? "_g" + std::to_string(params.groupSize) : std::string()) + "_" +
                std::string(elementTypeName(params.element));
  kernel.hot = true;
  kernel.blockThreads = static_cast<unsigned>(kThreads);
  kernel.grid = "x = ceil(rows * cols / " + std::to_string(kThreads * kPerThread) + ")";
  kernel.sharedMemoryBytes = 0;
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const unsigned char *__restrict__", "weight"},
      {int4 ? "const unsigned short *__restrict__" : "const float *__restrict__", "scale"},
      {element + " *__restrict__", "out"},
      {"long long", "rows"},
      {"long long", "cols"},
  };
  kernel.specialisation = {{"stored", std::string(storedWeightName(params.stored))},
                           {"element", std::string(elementTypeName(params.element))}};
  if (int4)
    kernel.specialisation["group"] = params.groupSize;
  const std::string body =
      int4 ? expandKernelBody(kernel, kI4Body,
                              {{"element", element},
                               {"perThread", std::to_string(kPerThread)},
                               {"group", std::to_string(params.groupSize)}})
           : expandKernelBody(
                 kernel, kBody,
                 {{"element", element},
                  {"perThread", std::to_string(kPerThread)},
                  {"decode",
                   std::string(params.stored == StoredWeight::i8 ? kI8Decode : kE4m3Decode)}});
  kernel.source = assembleTranslationUnit(kernel,
                                          "a " + std::string(storedWeightName(params.stored)) +
                                              (int4 ? " weight times its group scales, widened."
                                                    : " weight times its row scales, widened."),
                                          body);
  return kernel;
}

} // namespace dlm::codegen
