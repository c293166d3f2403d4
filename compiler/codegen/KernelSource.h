// A generated CUDA kernel as the rest of the toolchain sees it: one self-contained translation
// unit of CUDA C++ text (it includes only <cuda_bf16.h>), the name of its `extern "C"` entry
// point, the launch shape it was written for, and the parameters it was specialised on. NVRTC
// turns the text into a cubin; the emulated device compiles the same text on the host.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"

#include <string>
#include <vector>

namespace dlm::codegen {

// One kernel parameter in signature order, e.g. {"const __nv_bfloat16 *", "q"}.
struct KernelParameter {
  std::string type;
  std::string name;
};

struct KernelSource {
  // The entry point, stable for a given kind and specialisation: the same parameters always
  // give the same name, different ones a different name.
  std::string name;
  // "rms_norm", "rope", "attention", "gated_activation", "sampler", "accept", "renoise",
  // "embedding", "kv_store", "add", "scale", "softcap", "soft_embedding", "widen_weight",
  // "quantize_rows",
  // "moe_route", "moe_plan", "moe_experts", "moe_combine".
  std::string kind;
  // Kernels that run every layer or every denoising step; a spill in one of them is a bug.
  bool hot = false;
  // The whole translation unit.
  std::string source;
  std::vector<KernelParameter> parameters;
  // Threads per block the kernel is written for (it relies on it: launch with exactly this).
  unsigned blockThreads = 0;
  // How the grid is derived from the run-time shape, in words ("x = rows").
  std::string grid;
  // Static shared memory the kernel declares, in bytes: an upper bound of what ptxas reports
  // (it drops arrays a specialisation never reads). Always <= 48 KiB, so no opt-in attribute
  // is needed at launch.
  unsigned sharedMemoryBytes = 0;
  // The specialisation (head_dim, mask, vocab, ...), as recorded in the artifact's kernel table.
  artifact::Attributes specialisation;
};

} // namespace dlm::codegen
