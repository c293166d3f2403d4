// The NVRTC compile service: CUDA C++ text in, a cubin plus PTX for one architecture out, with
// what ptxas reports about the kernel (registers, spills, stack, shared memory) parsed into
// artifact::KernelResources. Used by the compiler at build time; it needs no GPU and no libcuda.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::codegen {

struct CompiledKernel {
  std::string target; // "sm_90"
  std::vector<uint8_t> cubin;
  std::string ptx;
  artifact::KernelResources resources;
  // NVRTC's program log, including the ptxas report.
  std::string log;
};

struct NvrtcOptions {
  // Where cuda_bf16.h and friends live; defaults to the toolkit found at build time.
  std::vector<std::string> includeDirectories;
  // Line tables in the cubin for profilers (no effect on the code).
  bool lineInfo = false;
};

class NvrtcCompiler {
public:
  explicit NvrtcCompiler(NvrtcOptions options = {});

  // Compiles `source` for `target` ("sm_80", "sm_90", ...) and reports on kernel `entry` (an
  // extern "C" function of the source). A compile error returns NVRTC's log in the message.
  StatusOr<CompiledKernel> compile(std::string_view source, std::string_view entry,
                                   std::string_view target) const;

  // "sm_75", "sm_80", ... as this NVRTC reports them.
  static std::vector<std::string> supportedTargets();
  // "13.0".
  static std::string version();

private:
  NvrtcOptions options_;
};

// Reads ptxas's `-v` report for `entry` out of a program log:
//   ptxas info    : Function properties for <entry>
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 40 registers, used 1 barriers, 12544 bytes smem, ...
StatusOr<artifact::KernelResources> parsePtxasReport(std::string_view log, std::string_view entry);

} // namespace dlm::codegen
