// A layer's scalar factor (the `scale` record, DiffusionGemma's per-layer `layer_scalar`):
// out = x * factor[0] over rows of `width`, in float32; factor is a one-element device tensor of
// the device precision (the weight the record names), read once per thread. out may alias x.
//
// Arguments: x, xStride, factor, out, outStride (elements; multiples of the vector width), rows.
// Grid: x = ceil(width / vector / 256), y = rows; 256 threads.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kWidth = ${width};
constexpr int kThreads = ${threads};
constexpr int kVector = ${vector};
constexpr int kChunks = kWidth / kVector;

extern "C" __global__ void __launch_bounds__(kThreads) ${name}(
${signature}) {
  const int row = blockIdx.y;
  const int chunk = blockIdx.x * kThreads + threadIdx.x;
  if (row >= rows || chunk >= kChunks)
    return;
  const float f = dlm_device::toFloat(factor[0]);
  float values[kVector];
  dlm_device::loadFloats<kVector>(x + (long long)row * xStride + chunk * kVector, values);
#pragma unroll
  for (int k = 0; k < kVector; ++k)
    values[k] *= f;
  dlm_device::storeFloats<kVector>(out + (long long)row * outStride + chunk * kVector, values);
}
)cuda";

} // namespace

StatusOr<KernelSource> generateScale(const ScaleParams &params) {
  if (params.width <= 0 || params.width > (int64_t(1) << 24))
    return Status::error("scale: width must be in [1, 2^24], got " +
                         std::to_string(params.width));
  const int vector = vectorWidth(params.element, params.width);
  KernelSource kernel;
  kernel.kind = "scale";
  kernel.name = "dlm_scale_w" + std::to_string(params.width) + "_" +
                std::string(elementTypeName(params.element));
  kernel.hot = false;
  kernel.blockThreads = 256;
  kernel.grid = "x = ceil(" + std::to_string(params.width / vector) + " / 256), y = rows";
  kernel.sharedMemoryBytes = 0;
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const " + element + " *", "x"},
      {"long long", "xStride"},
      {"const " + element + " *__restrict__", "factor"},
      {element + " *", "out"},
      {"long long", "outStride"},
      {"int", "rows"},
  };
  kernel.specialisation = {{"width", params.width},
                           {"element", std::string(elementTypeName(params.element))}};
  const std::string body =
      expandTemplate(kBody, {{"element", element},
                             {"width", std::to_string(params.width)},
                             {"threads", std::to_string(kernel.blockThreads)},
                             {"vector", std::to_string(vector)},
                             {"name", kernel.name},
                             {"signature", renderSignature(kernel.parameters)}});
  kernel.source = assembleTranslationUnit(
      kernel, "x * factor[0] over rows of " + std::to_string(params.width) + ".", body);
  return kernel;
}

} // namespace dlm::codegen
