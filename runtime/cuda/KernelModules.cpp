#include "runtime/cuda/KernelModules.h"

#include <algorithm>
#include <cstring>
#include <variant>

namespace dlm::cuda {

namespace {

std::string attributesText(const artifact::Attributes &attributes) {
  std::string text;
  for (const auto &[name, value] : attributes)
    text += (text.empty() ? "" : ", ") + name + "=" + artifact::attributeValueText(value);
  return text;
}

bool isCudaTarget(const artifact::KernelTarget &target) {
  return target.target.rfind("sm_", 0) == 0;
}

// 86 for "sm_86"; -1 when the name is not of that form.
int architectureOf(const std::string &target) {
  if (target.rfind("sm_", 0) != 0)
    return -1;
  try {
    return std::stoi(target.substr(3));
  } catch (...) {
    return -1;
  }
}

bool hasSource(const artifact::KernelTarget &target) {
  return !target.kernels.empty() &&
         std::all_of(target.kernels.begin(), target.kernels.end(),
                     [](const artifact::Kernel &k) { return !k.source.empty(); });
}

} // namespace

int64_t DeviceKernel::integer(std::string_view name, int64_t fallback) const {
  auto it = record->parameters.find(name);
  if (it == record->parameters.end() || !std::holds_alternative<int64_t>(it->second))
    return fallback;
  return std::get<int64_t>(it->second);
}

const std::string *DeviceKernel::text(std::string_view name) const {
  auto it = record->parameters.find(name);
  if (it == record->parameters.end() || !std::holds_alternative<std::string>(it->second))
    return nullptr;
  return &std::get<std::string>(it->second);
}

StatusOr<KernelTargetChoice>
chooseKernelTarget(const std::vector<artifact::KernelTarget> &targets, int architecture) {
  std::vector<const artifact::KernelTarget *> cuda;
  for (const artifact::KernelTarget &target : targets)
    if (isCudaTarget(target))
      cuda.push_back(&target);
  if (cuda.empty())
    return Status::error("artifact has no CUDA kernels; compile it with --target cuda or all");

  if (architecture == kEmulatedArchitecture) {
    // The emulated device compiles CUDA source on the host; any sm_ target carrying it will do.
    for (const artifact::KernelTarget *target : cuda)
      if (hasSource(*target))
        return KernelTargetChoice{target, KernelCode::source,
                                  target->target + " (emulated, from source)"};
    return Status::error("artifact's CUDA kernels carry no source for the emulated device; "
                         "recompile with this dlmc (dlmc compile --target cuda)");
  }

  const std::string wanted = "sm_" + std::to_string(architecture);
  for (const artifact::KernelTarget *target : cuda)
    if (target->target == wanted && !target->kernels.empty() &&
        std::all_of(target->kernels.begin(), target->kernels.end(),
                    [](const artifact::Kernel &k) { return k.cubin.size > 0; }))
      return KernelTargetChoice{target, KernelCode::cubin, wanted + " (cubin)"};
  // PTX of the nearest lower architecture: the driver JIT-compiles it for this device.
  const artifact::KernelTarget *nearest = nullptr;
  for (const artifact::KernelTarget *target : cuda) {
    const int arch = architectureOf(target->target);
    if (arch <= 0 || arch > architecture || target->kernels.empty())
      continue;
    if (!std::all_of(target->kernels.begin(), target->kernels.end(),
                     [](const artifact::Kernel &k) { return !k.ptx.empty(); }))
      continue;
    if (!nearest || arch > architectureOf(nearest->target))
      nearest = target;
  }
  if (nearest)
    return KernelTargetChoice{nearest, KernelCode::ptx,
                              nearest->target + " (PTX, JIT-compiled for " + wanted + ")"};
  std::string has;
  for (const artifact::KernelTarget *target : cuda)
    has += (has.empty() ? "" : ", ") + target->target;
  return Status::error("artifact has no kernels for " + wanted + " (it has " + has +
                       "); recompile with dlmc compile --target cuda");
}

Status checkKernelArguments(artifact::SchemaVersion version) {
  if (version.minor >= artifact::kFirstMinorWithCurrentKernelArguments)
    return Status::ok();
  return Status::error("artifact schema " + std::to_string(version.major) + "." +
                       std::to_string(version.minor) +
                       ": its CUDA kernels take the arguments of an older dlmc (they changed in "
                       "1." +
                       std::to_string(artifact::kFirstMinorWithCurrentKernelArguments) +
                       "); recompile it with this dlmc");
}

StatusOr<std::unique_ptr<KernelModules>>
KernelModules::open(std::shared_ptr<const CudaDriver> driver,
                    const artifact::ArtifactReader &artifact, CUdevice device) {
  int architecture = kEmulatedArchitecture;
  if (!driver->emulated()) {
    int major = 0, minor = 0;
    DLM_RETURN_IF_ERROR(driver->check(
        driver->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
        "cuDeviceGetAttribute(compute capability major)"));
    DLM_RETURN_IF_ERROR(driver->check(
        driver->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
        "cuDeviceGetAttribute(compute capability minor)"));
    architecture = major * 10 + minor;
  }
  DLM_ASSIGN_OR_RETURN(KernelTargetChoice choice,
                       chooseKernelTarget(artifact.kernelTargets(), architecture));
  DLM_RETURN_IF_ERROR(checkKernelArguments(artifact.schemaVersion()));
  std::unique_ptr<KernelModules> modules(new KernelModules(std::move(driver), choice));
  DLM_RETURN_IF_ERROR(modules->copyCode(artifact));
  return modules;
}

Status KernelModules::copyCode(const artifact::ArtifactReader &artifact) {
  // The buffers are made first: the guarded read leaves by a long jump, so it allocates nothing.
  std::vector<std::pair<std::string *, std::string_view>> copies;
  for (const artifact::Kernel &kernel : choice_.target->kernels) {
    std::string_view bytes;
    switch (choice_.code) {
    case KernelCode::cubin:
      bytes =
          std::string_view(reinterpret_cast<const char *>(kernel.cubin.data), kernel.cubin.size);
      break;
    case KernelCode::ptx:
      bytes = kernel.ptx;
      break;
    case KernelCode::source:
      bytes = kernel.source;
      break;
    }
    std::string &copy = code_[kernel.name];
    copy.assign(bytes.size(), '\0');
    copies.emplace_back(&copy, bytes);
  }
  return artifact.guardedRead([&] {
    for (auto &[copy, bytes] : copies)
      if (!bytes.empty())
        std::memcpy(copy->data(), bytes.data(), bytes.size());
  });
}

KernelModules::~KernelModules() {
  for (CUmodule module : modules_)
    (void)driver_->cuModuleUnload(module);
}

StatusOr<DeviceKernel> KernelModules::find(std::string_view kind,
                                           const artifact::Attributes &match) {
  const artifact::Kernel *chosen = nullptr;
  std::string candidates;
  for (const artifact::Kernel &kernel : choice_.target->kernels) {
    if (kernel.kind != kind)
      continue;
    candidates += (candidates.empty() ? "" : "; ") + kernel.name + " (" +
                  attributesText(kernel.parameters) + ")";
    bool matches = true;
    for (const auto &[name, value] : match) {
      auto it = kernel.parameters.find(name);
      if (it == kernel.parameters.end() || it->second != value) {
        matches = false;
        break;
      }
    }
    if (matches) {
      chosen = &kernel;
      break;
    }
  }
  if (!chosen)
    return Status::error("artifact has no " + std::string(kind) + " kernel with " +
                         attributesText(match) + " for " + choice_.target->target + " (its " +
                         std::string(kind) + " kernels: " +
                         (candidates.empty() ? "none" : candidates) +
                         "); recompile with dlmc compile --target cuda");
  return load(*chosen);
}

StatusOr<DeviceKernel> KernelModules::named(std::string_view name) {
  auto cached = loaded_.find(std::string(name));
  if (cached != loaded_.end())
    return cached->second;
  for (const artifact::Kernel &kernel : choice_.target->kernels)
    if (kernel.name == name)
      return load(kernel);
  return Status::error("artifact has no kernel " + std::string(name) + " for " +
                       choice_.target->target + "; recompile with dlmc compile --target cuda");
}

StatusOr<DeviceKernel> KernelModules::load(const artifact::Kernel &record) {
  auto cached = loaded_.find(record.name);
  if (cached != loaded_.end())
    return cached->second;
  const artifact::Kernel *chosen = &record;

  // A cubin image, or NUL-terminated PTX / CUDA source text: the copy made at open.
  const auto code = code_.find(chosen->name);
  if (code == code_.end())
    return Status::error("kernel " + chosen->name + " is not among the chosen target's kernels");
  const void *image = code->second.c_str();
  const std::string what = "loading kernel " + chosen->name + " (" + choice_.description + ")";
  CUmodule module = nullptr;
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuModuleLoadData(&module, image), what.c_str()));
  modules_.push_back(module);
  DeviceKernel kernel;
  kernel.record = chosen;
  DLM_RETURN_IF_ERROR(driver_->check(
      driver_->cuModuleGetFunction(&kernel.function, module, chosen->name.c_str()),
      ("cuModuleGetFunction(" + chosen->name + ")").c_str()));
  kernel.blockThreads = static_cast<unsigned>(kernel.integer("block_threads", 0));
  if (kernel.blockThreads == 0)
    return Status::error("kernel " + chosen->name + " does not record its block_threads");
  loaded_[chosen->name] = kernel;
  return kernel;
}

} // namespace dlm::cuda
