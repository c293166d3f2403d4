// Generated kernels -> the artifact's kernel table: each KernelSource compiled by NVRTC for each
// target architecture into artifact::KernelTarget records (cubin, PTX, ptxas's resource report,
// the specialisation plus launch facts as parameters). This is what dlmc writes for
// --emit=artifact; built only where the CUDA toolkit (NVRTC) is.
#pragma once

#include "compiler/codegen/KernelSource.h"
#include "runtime/cuda/NvrtcCompiler.h"
#include "support/Status.h"

#include <memory>
#include <string>
#include <vector>

namespace dlm::codegen {

struct KernelTable {
  // One entry per target, kernels in the order given. Cubins and PTX are views into `compiled`.
  std::vector<artifact::KernelTarget> targets;
  std::vector<std::unique_ptr<cuda::CompiledKernel>> compiled;
};

struct KernelCompileOptions {
  std::vector<std::string> targets = {"sm_80", "sm_90"};
  // A hot kernel (attention, sampler, norm) that spills is refused: it would run every layer or
  // every step at a fraction of its speed.
  bool refuseHotSpills = true;
};

StatusOr<KernelTable> compileKernels(const std::vector<KernelSource> &kernels,
                                     const cuda::NvrtcCompiler &compiler,
                                     const KernelCompileOptions &options = {});

} // namespace dlm::codegen
