// An add record the compiler did not fold into a GEMM's epilogue (DiffusionGemma's residual adds
// around its post-norms and experts): out = a + b elementwise over rows of `width`, in float32.
// out may alias a or b (the compiler plans it in place).
//
// Arguments: a, aStride, b, bStride, out, outStride (elements; multiples of the vector width),
// rows. Grid: x = ceil(width / vector / 256), y = rows; 256 threads.
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
  float x[kVector], y[kVector];
  dlm_device::loadFloats<kVector>(a + (long long)row * aStride + chunk * kVector, x);
  dlm_device::loadFloats<kVector>(b + (long long)row * bStride + chunk * kVector, y);
#pragma unroll
  for (int k = 0; k < kVector; ++k)
    x[k] += y[k];
  dlm_device::storeFloats<kVector>(out + (long long)row * outStride + chunk * kVector, x);
}
)cuda";

} // namespace

StatusOr<KernelSource> generateAdd(const AddParams &params) {
  if (params.width <= 0 || params.width > (int64_t(1) << 24))
    return Status::error("add: width must be in [1, 2^24], got " + std::to_string(params.width));
  const int vector = vectorWidth(params.element, params.width);
  KernelSource kernel;
  kernel.kind = "add";
  kernel.name = "dlm_add_w" + std::to_string(params.width) + "_" +
                std::string(elementTypeName(params.element));
  kernel.hot = false;
  kernel.blockThreads = 256;
  kernel.grid = "x = ceil(" + std::to_string(params.width / vector) + " / 256), y = rows";
  kernel.sharedMemoryBytes = 0;
  const std::string element(cudaElementType(params.element));
  kernel.parameters = {
      {"const " + element + " *", "a"},
      {"long long", "aStride"},
      {"const " + element + " *", "b"},
      {"long long", "bStride"},
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
      kernel, "a + b over rows of " + std::to_string(params.width) + ".", body);
  return kernel;
}

} // namespace dlm::codegen
