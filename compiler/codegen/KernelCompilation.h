// Generated kernels -> the artifact's kernel table: each KernelSource compiled by NVRTC for each
// target architecture into artifact::KernelTarget records (cubin, PTX, ptxas's resource report,
// the specialisation plus launch facts as parameters, and the CUDA source itself, which the
// emulated device compiles on the host when a backend loads the kernel). This is what dlmc writes for
// --emit=artifact; built only where the CUDA toolkit (NVRTC) is.
#pragma once

#include "compiler/codegen/KernelSource.h"
#include "compiler/codegen/NvrtcCompiler.h"
#include "support/Status.h"

#include <memory>
#include <string>
#include <vector>

namespace dlm::codegen {

struct KernelTable {
  // One entry per target, kernels in the order given. Cubins and PTX are views into `compiled`,
  // CUDA sources into `sources` (one per kernel, shared by its targets).
  std::vector<artifact::KernelTarget> targets;
  std::vector<std::unique_ptr<CompiledKernel>> compiled;
  std::vector<std::unique_ptr<const std::string>> sources;
};

struct KernelCompileOptions {
  std::vector<std::string> targets = {"sm_80", "sm_90"};
  // A hot kernel (attention, sampler, norm) that spills is refused: it would run every layer or
  // every step at a fraction of its speed.
  bool refuseHotSpills = true;
};

StatusOr<KernelTable> compileKernels(const std::vector<KernelSource> &kernels,
                                     const NvrtcCompiler &compiler,
                                     const KernelCompileOptions &options = {});

} // namespace dlm::codegen
