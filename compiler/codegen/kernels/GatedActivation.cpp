// The elementwise middle of a gated MLP: out = act(gate) * up, with act SiLU or tanh-approximated
// GELU, computed in fp32. gate and up are separate row-strided views, so a fused [tokens, 2I]
// gate|up GEMM output is read in place; out may alias gate.
//
// Arguments: gate, gateStride, up, upStride, out, outStride (elements; multiples of the vector
// width), rows.
#include "compiler/codegen/RecordKernels.h"
#include "compiler/codegen/kernels/RowChunkKernel.h"

namespace dlm::codegen {

namespace {

// x * sigmoid(x); __expf's relative error (2 ulp) is far below bf16's.
constexpr std::string_view kSilu = "  return x / (1.f + __expf(-x));";
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), gelu_pytorch_tanh.
constexpr std::string_view kGeluTanh =
    "  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);\n"
    "  return 0.5f * x * (1.f + tanhf(inner));";

} // namespace

std::string activationFunction(Activation activation) {
  return "__device__ __forceinline__ float activate(float x) {\n" +
         std::string(activation == Activation::silu ? kSilu : kGeluTanh) + "\n}";
}

StatusOr<KernelSource> generateGatedActivation(const GatedActivationParams &params) {
  const std::string activation(activationName(params.activation));
  RowChunkKernel spec =
      pairRowChunkKernel("gated_activation", "dlm_gated_" + activation, params.element,
                         params.width, "gate", "up", "activate(x[k]) * y[k]");
  spec.helpers = activationFunction(params.activation);
  spec.summary = activation + "(gate) * up";
  spec.specialisation = {{"activation", activation}};
  return generateRowChunkKernel(spec);
}

Status RecordKernels::gatedActivation() {
  const bool silu = std::holds_alternative<kp::SiluMulParams>(params);
  launched.push_back(
      generateGatedActivation({width, silu ? Activation::silu : Activation::geluTanh, element}));
  return Status::ok();
}

} // namespace dlm::codegen
