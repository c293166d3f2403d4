#include "compiler/codegen/kernels/RowChunkKernel.h"

#include "compiler/codegen/KernelText.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(using Element = ${element};
constexpr int kWidth = ${width};
constexpr int kThreads = ${threads};
constexpr int kVector = ${vector};
constexpr int kChunks = kWidth / kVector;
${helpers}
extern "C" __global__ void __launch_bounds__(kThreads) ${name}(
${signature}) {
  const int row = blockIdx.y;
  const int chunk = blockIdx.x * kThreads + threadIdx.x;
  if (row >= rows || chunk >= kChunks)
    return;
${chunk}}
)cuda";

constexpr unsigned kThreads = 256;

} // namespace

StatusOr<KernelSource> generateRowChunkKernel(const RowChunkKernel &spec) {
  if (spec.width <= 0 || spec.width > (int64_t(1) << 24))
    return Status::error(spec.kind + ": width must be in [1, 2^24], got " +
                         std::to_string(spec.width));
  const int vector = vectorWidth(spec.element, spec.width);
  const std::string element(cudaElementType(spec.element));
  const std::string elementName(elementTypeName(spec.element));
  KernelSource kernel;
  kernel.kind = spec.kind;
  kernel.name = spec.namePrefix + "_w" + std::to_string(spec.width) + "_" + elementName;
  kernel.hot = false;
  kernel.blockThreads = kThreads;
  kernel.grid = "x = ceil(" + std::to_string(spec.width / vector) + " / 256), y = rows";
  kernel.sharedMemoryBytes = 0;
  for (const KernelParameter &parameter : spec.parameters)
    kernel.parameters.push_back({parameter.type.find("${element}") == std::string::npos
                                     ? parameter.type
                                     : expandTemplate(parameter.type, {{"element", element}}),
                                 parameter.name});
  kernel.parameters.push_back({"int", "rows"});
  kernel.specialisation = spec.specialisation;
  kernel.specialisation["width"] = spec.width;
  kernel.specialisation["element"] = elementName;
  std::vector<std::string> arguments = spec.launchArguments;
  arguments.push_back("rows");
  DLM_RETURN_IF_ERROR(
      declareLaunch(kernel, arguments,
                    std::to_string((spec.width / vector + kThreads - 1) / kThreads) + ",rows"));
  const std::string body =
      expandTemplate(kBody, {{"element", element},
                             {"width", std::to_string(spec.width)},
                             {"threads", std::to_string(kThreads)},
                             {"vector", std::to_string(vector)},
                             {"helpers", spec.helpers.empty() ? "" : "\n" + spec.helpers + "\n"},
                             {"name", kernel.name},
                             {"signature", renderSignature(kernel.parameters)},
                             {"chunk", spec.chunk}});
  kernel.source = assembleTranslationUnit(
      kernel, spec.summary + " over rows of " + std::to_string(spec.width) + ".", body);
  return kernel;
}

} // namespace dlm::codegen
