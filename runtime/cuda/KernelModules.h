// The generated kernels of an artifact as the cuda backend launches them: which of the
// artifact's kernel targets serves this device, each needed kernel's module loaded from it and
// its entry point looked up by the kernel record's name.
//
// Target choice: on a real device, the `sm_XY` target of its compute capability (cubin), else
// the PTX of the nearest lower `sm_` target (JIT-compiled by the driver), else a named error
// listing what the artifact has; on the emulated driver, the kernels' CUDA source (its
// cuModuleLoadData compiles source text on the host).
#pragma once

#include "runtime/artifact/ArtifactReader.h"
#include "runtime/cuda/CudaDriver.h"

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::cuda {

struct DeviceKernel {
  CUfunction function = nullptr;
  // Threads per block the kernel was written for (launch with exactly this).
  unsigned blockThreads = 0;
  const artifact::Kernel *record = nullptr;

  // An integer specialisation parameter (head_dim, page_size, rows_per_warp, ...), or `fallback`.
  int64_t integer(std::string_view name, int64_t fallback = 0) const;
  // A text specialisation parameter (mask, stage, launch_arguments, ...), or null when absent.
  const std::string *text(std::string_view name) const;
};

enum class KernelCode { cubin, ptx, source };

struct KernelTargetChoice {
  const artifact::KernelTarget *target = nullptr;
  KernelCode code = KernelCode::cubin;
  // "sm_90 (cubin)", "sm_80 (PTX, JIT-compiled for sm_86)", "sm_80 (emulated, from source)".
  std::string description;
};

// The architecture argument of chooseKernelTarget for the emulated driver.
inline constexpr int kEmulatedArchitecture = 0;

// The target serving a device of compute capability `architecture` (86 for 8.6), or the
// emulated device (kEmulatedArchitecture). Errors: "artifact has no CUDA kernels; compile it
// with --target cuda or all", "artifact has no kernels for sm_75 (it has sm_80, sm_90);
// recompile with dlmc compile --target cuda".
StatusOr<KernelTargetChoice> chooseKernelTarget(const std::vector<artifact::KernelTarget> &targets,
                                                int architecture);

// Whether an artifact of schema `version` holds CUDA kernels that take the arguments this
// backend launches them with (artifact::kFirstMinorWithCurrentKernelArguments); an older one's
// must be recompiled, never launched.
Status checkKernelArguments(artifact::SchemaVersion version);

class KernelModules {
public:
  // Chooses the target for `device` (chooseKernelTarget with its compute capability).
  static StatusOr<std::unique_ptr<KernelModules>>
  open(std::shared_ptr<const CudaDriver> driver, const artifact::ArtifactReader &artifact,
       CUdevice device);
  KernelModules(const KernelModules &) = delete;
  KernelModules &operator=(const KernelModules &) = delete;
  ~KernelModules();

  // The kernel of `kind` whose specialisation has every entry of `match`, its module loaded.
  // Error: "artifact has no rms_norm kernel with width=64, element=f32 for sm_80 (its rms_norm
  // kernels: ...)".
  StatusOr<DeviceKernel> find(std::string_view kind, const artifact::Attributes &match);
  // The kernel whose entry point is `name` (a kernel record's cuda_kernel), its module loaded
  // once. Error: "artifact has no kernel dlm_rope_... for sm_90; recompile ...".
  StatusOr<DeviceKernel> named(std::string_view name);

  // The chosen target ("sm_90", or "sm_80 (emulated, from source)") and how its code is loaded.
  const std::string &description() const { return choice_.description; }
  const artifact::KernelTarget &target() const { return *choice_.target; }

private:
  KernelModules(std::shared_ptr<const CudaDriver> driver, KernelTargetChoice choice)
      : driver_(std::move(driver)), choice_(std::move(choice)) {}

  // Copies the chosen form of every kernel of the target out of the artifact's mapping, under
  // its guard: a module loads long after the artifact opened, when a file truncated meanwhile
  // would otherwise be a SIGBUS.
  Status copyCode(const artifact::ArtifactReader &artifact);

  // Loads `record`'s module (once) and looks up its entry point.
  StatusOr<DeviceKernel> load(const artifact::Kernel &record);

  std::shared_ptr<const CudaDriver> driver_;
  KernelTargetChoice choice_;
  std::vector<CUmodule> modules_;
  std::map<std::string, DeviceKernel> loaded_;
  // Each kernel's cubin, PTX or CUDA source (as choice_.code says), by kernel name; text is
  // NUL-terminated as cuModuleLoadData expects.
  std::map<std::string, std::string, std::less<>> code_;
};

} // namespace dlm::cuda
