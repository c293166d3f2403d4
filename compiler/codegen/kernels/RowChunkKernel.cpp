#include "compiler/codegen/kernels/RowChunkKernel.h"

#include "compiler/codegen/KernelText.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(${rowConstants}${helpers}
${entryPoint} {
  const int row = blockIdx.y;
  const int chunk = blockIdx.x * kThreads + threadIdx.x;
  if (row >= rows || chunk >= kChunks)
    return;
${chunk}}
)cuda";

constexpr unsigned kThreads = 256;

} // namespace

StatusOr<KernelSource> generateRowChunkKernel(const RowChunkKernel &spec) {
  DLM_RETURN_IF_ERROR(checkWidth(spec.kind + ": width", spec.width, 24));
  const int vector = vectorWidth(spec.element, spec.width);
  const std::string element(cudaElementType(spec.element));
  KernelSource kernel =
      rowKernelSource(spec.kind, spec.namePrefix, spec.width, spec.element, false, kThreads);
  kernel.grid = "x = ceil(" + std::to_string(spec.width / vector) + " / 256), y = rows";
  kernel.sharedMemoryBytes = 0;
  for (const KernelParameter &parameter : spec.parameters)
    kernel.parameters.push_back({parameter.type.find("${element}") == std::string::npos
                                     ? parameter.type
                                     : expandTemplate(parameter.type, {{"element", element}}),
                                 parameter.name});
  kernel.parameters.push_back({"int", "rows"});
  kernel.specialisation.insert(spec.specialisation.begin(), spec.specialisation.end());
  std::vector<std::string> arguments = spec.launchArguments;
  arguments.push_back("rows");
  DLM_RETURN_IF_ERROR(
      declareLaunch(kernel, arguments,
                    std::to_string((spec.width / vector + kThreads - 1) / kThreads) + ",rows"));
  const std::string body =
      expandKernelBody(kernel, kBody,
                       {{"rowConstants", rowVectorConstants(spec.element, spec.width)},
                        {"helpers", spec.helpers.empty() ? "" : "\n" + spec.helpers + "\n"},
                        {"chunk", spec.chunk}});
  kernel.source = assembleTranslationUnit(
      kernel, spec.summary + " over rows of " + std::to_string(spec.width) + ".", body);
  return kernel;
}

RowChunkKernel pairRowChunkKernel(std::string kind, std::string namePrefix, ElementType element,
                                  int64_t width, const std::string &first,
                                  const std::string &second, const std::string &combine) {
  RowChunkKernel spec;
  spec.kind = std::move(kind);
  spec.namePrefix = std::move(namePrefix);
  spec.element = element;
  spec.width = width;
  spec.parameters = {{"const ${element} *", first},  {"long long", first + "Stride"},
                     {"const ${element} *", second}, {"long long", second + "Stride"},
                     {"${element} *", "out"},        {"long long", "outStride"}};
  spec.launchArguments = {"operand0",        "operand0_stride", "operand1",
                          "operand1_stride", "result",          "result_stride"};
  auto load = [](const std::string &operand, const char *into) {
    return "  dlm_device::loadFloats<kVector>(" + operand + " + (long long)row * " + operand +
           "Stride + chunk * kVector, " + into + ");\n";
  };
  spec.chunk = "  float x[kVector], y[kVector];\n" + load(first, "x") + load(second, "y") +
               "#pragma unroll\n  for (int k = 0; k < kVector; ++k)\n    x[k] = " + combine +
               ";\n  dlm_device::storeFloats<kVector>(out + (long long)row * outStride + chunk * "
               "kVector, x);\n";
  return spec;
}

} // namespace dlm::codegen
