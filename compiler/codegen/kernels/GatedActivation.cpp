// The elementwise middle of a gated MLP: out = act(gate) * up, with act SiLU or tanh-approximated
// GELU, computed in fp32. gate and up are separate row-strided views, so a fused [tokens, 2I]
// gate|up GEMM output is read in place; out may alias gate.
//
// Arguments: gate, gateStride, up, upStride, out, outStride (elements; multiples of the vector
// width), rows.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kWidth = ${width};
constexpr int kThreads = ${threads};
constexpr int kVector = ${vector};
constexpr int kChunks = kWidth / kVector;

__device__ __forceinline__ float activate(float x) {
${activation}
}

extern "C" __global__ void __launch_bounds__(kThreads) ${name}(
${signature}) {
  const int row = blockIdx.y;
  const int chunk = blockIdx.x * kThreads + threadIdx.x;
  if (row >= rows || chunk >= kChunks)
    return;
  float g[kVector], u[kVector], result[kVector];
  dlm_device::loadFloats<kVector>(gate + (long long)row * gateStride + chunk * kVector, g);
  dlm_device::loadFloats<kVector>(up + (long long)row * upStride + chunk * kVector, u);
#pragma unroll
  for (int k = 0; k < kVector; ++k)
    result[k] = activate(g[k]) * u[k];
  dlm_device::storeFloats<kVector>(out + (long long)row * outStride + chunk * kVector, result);
}
)cuda";

// x * sigmoid(x); __expf's relative error (2 ulp) is far below bf16's.
constexpr std::string_view kSilu = "  return x / (1.f + __expf(-x));";
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), gelu_pytorch_tanh.
constexpr std::string_view kGeluTanh =
    "  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);\n"
    "  return 0.5f * x * (1.f + tanhf(inner));";

} // namespace

StatusOr<KernelSource> generateGatedActivation(const GatedActivationParams &params) {
  if (params.width <= 0 || params.width > (int64_t(1) << 24))
    return Status::error("gated_activation: width must be in [1, 2^24], got " +
                         std::to_string(params.width));
  const int vector = vectorWidth(params.element, params.width);
  KernelSource kernel;
  kernel.kind = "gated_activation";
  kernel.name = "dlm_gated_" + std::string(activationName(params.activation)) + "_w" +
                std::to_string(params.width) + "_" + std::string(elementTypeName(params.element));
  kernel.hot = false;
  kernel.blockThreads = 256;
  kernel.grid = "x = ceil(" + std::to_string(params.width / vector) + " / 256), y = rows";
  kernel.sharedMemoryBytes = 0;
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const " + element + " *", "gate"},
      {"long long", "gateStride"},
      {"const " + element + " *__restrict__", "up"},
      {"long long", "upStride"},
      {element + " *", "out"},
      {"long long", "outStride"},
      {"int", "rows"},
  };
  kernel.specialisation = {{"width", params.width},
                           {"activation", std::string(activationName(params.activation))},
                           {"element", std::string(elementTypeName(params.element))}};
  const std::string body = expandTemplate(
      kBody,
      {{"element", element},
       {"width", std::to_string(params.width)},
       {"threads", std::to_string(kernel.blockThreads)},
       {"vector", std::to_string(vector)},
       {"activation", std::string(params.activation == Activation::silu ? kSilu : kGeluTanh)},
       {"name", kernel.name},
       {"signature", renderSignature(kernel.parameters)}});
  kernel.source =
      assembleTranslationUnit(kernel,
                              std::string(activationName(params.activation)) +
                                  "(gate) * up over rows of " + std::to_string(params.width) + ".",
                              body);
  return kernel;
}

} // namespace dlm::codegen
