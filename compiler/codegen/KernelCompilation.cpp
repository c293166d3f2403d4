#include "compiler/codegen/KernelCompilation.h"

namespace dlm::codegen {

StatusOr<KernelTable> compileKernels(const std::vector<KernelSource> &kernels,
                                     const NvrtcCompiler &compiler,
                                     const KernelCompileOptions &options) {
  KernelTable table;
  for (const KernelSource &kernel : kernels)
    table.sources.push_back(std::make_unique<const std::string>(kernel.source));
  for (const std::string &target : options.targets) {
    artifact::KernelTarget entry;
    entry.target = target;
    for (size_t index = 0; index < kernels.size(); ++index) {
      const KernelSource &kernel = kernels[index];
      StatusOr<CompiledKernel> compiled =
          compiler.compile(kernel.source, kernel.name, target);
      if (!compiled)
        return compiled.status();
      const artifact::KernelResources &resources = compiled->resources;
      if (options.refuseHotSpills && kernel.hot &&
          (resources.spillStoreBytes || resources.spillLoadBytes))
        return Status::error("kernel " + kernel.name + " (hot) spills on " + target + ": " +
                             std::to_string(resources.spillStoreBytes) + " bytes stored, " +
                             std::to_string(resources.spillLoadBytes) + " loaded, " +
                             std::to_string(resources.registers) + " registers");
      table.compiled.push_back(std::make_unique<CompiledKernel>(std::move(*compiled)));
      const CompiledKernel &stored = *table.compiled.back();

      artifact::Kernel record;
      record.name = kernel.name;
      record.kind = kernel.kind;
      record.cubin = {stored.cubin.data(), stored.cubin.size()};
      record.ptx = stored.ptx;
      record.source = *table.sources[index];
      record.resources = resources;
      // What the launcher needs besides the code: block size, grid rule, hotness.
      record.parameters = kernel.specialisation;
      record.parameters["block_threads"] = static_cast<int64_t>(kernel.blockThreads);
      record.parameters["grid"] = kernel.grid;
      record.parameters["hot"] = kernel.hot;
      entry.kernels.push_back(std::move(record));
    }
    table.targets.push_back(std::move(entry));
  }
  return table;
}

} // namespace dlm::codegen
