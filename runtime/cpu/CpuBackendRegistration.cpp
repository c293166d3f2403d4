// The "cpu" backend in the registry: the artifact's kernel program on host threads.
#include "runtime/backend/BackendRegistry.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/model/KernelProgram.h"
#include "runtime/model/ModelSpec.h"

#include <variant>

namespace dlm {

void registerCpuBackend(BackendRegistry &registry) {
  (void)registry.add("cpu", [](const BackendSource &source) -> StatusOr<std::unique_ptr<Backend>> {
    const artifact::KernelTarget *records =
        source.artifact.findKernelTarget(spec::kernels::kTarget);
    if (!records)
      return Status::error("artifact '" + source.artifact.path() +
                           "' has no cpu kernel records (written before the cpu backend ran "
                           "compiled programs, or --target cuda); recompile it with dlmc "
                           "compile --target cpu (or all)");
    DLM_ASSIGN_OR_RETURN(std::shared_ptr<const model::ModelWeights> weights,
                         source.hostWeights());
    BackendOptions options = source.options;
    const artifact::Attributes &extra = source.artifact.config().extra;
    auto activations = extra.find(spec::kExtraCpuActivations);
    options.bf16Arithmetic = activations != extra.end() &&
                             std::holds_alternative<std::string>(activations->second) &&
                             std::get<std::string>(activations->second) == "bf16";
    DLM_ASSIGN_OR_RETURN(std::unique_ptr<cpu::CpuBackend> backend,
                         cpu::CpuBackend::create(std::move(weights), records->kernels,
                                                 source.artifact.config().maxPositions, options));
    return std::unique_ptr<Backend>(std::move(backend));
  });
}

} // namespace dlm
