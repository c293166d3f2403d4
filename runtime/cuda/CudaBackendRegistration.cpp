// The "cuda" (libcuda + cuBLASLt, opened at run time) and "cuda-emu" (the emulated driver)
// backends in the registry. DLM_CUDA_GRAPHS=0 runs every forward eagerly; DLM_CUDA_DEVICE_LOOP=0
// runs every block's steps from the host (=require: a block the device loop cannot run is an
// error naming why); DLM_CUDA_DEVICE_LOOP_CHUNK=K unrolls K steps per graph of the device loop.
#include "runtime/backend/BackendRegistry.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/emu/EmuDriver.h"

#include <cstdlib>
#include <cstring>

namespace dlm {
namespace {

StatusOr<cuda::CudaBackendSettings> settingsFromEnvironment() {
  cuda::CudaBackendSettings settings;
  const char *graphs = std::getenv("DLM_CUDA_GRAPHS");
  settings.graphs = !(graphs && std::strcmp(graphs, "0") == 0);
  const char *deviceLoop = std::getenv("DLM_CUDA_DEVICE_LOOP");
  settings.deviceLoop = !(deviceLoop && std::strcmp(deviceLoop, "0") == 0);
  settings.requireDeviceLoop = deviceLoop && std::strcmp(deviceLoop, "require") == 0;
  if (const char *chunk = std::getenv("DLM_CUDA_DEVICE_LOOP_CHUNK")) {
    char *end = nullptr;
    const long long steps = std::strtoll(chunk, &end, 10);
    if (end == chunk || *end != '\0' || steps < 1)
      return Status::error("DLM_CUDA_DEVICE_LOOP_CHUNK must be a positive integer, got '" +
                           std::string(chunk) + "'");
    settings.deviceLoopChunkSteps = steps;
  }
  return settings;
}

// The cuda backend over a driver and cuBLASLt, real or emulated.
StatusOr<std::unique_ptr<Backend>> cudaBackend(std::shared_ptr<const cuda::CudaDriver> driver,
                                               std::shared_ptr<const cuda::CublasLt> lt,
                                               const BackendSource &source) {
  DLM_ASSIGN_OR_RETURN(std::shared_ptr<const model::ModelWeights> weights, source.hostWeights());
  DLM_ASSIGN_OR_RETURN(cuda::CudaBackendSettings settings, settingsFromEnvironment());
  DLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> backend,
                       cuda::CudaBackend::create(std::move(driver), std::move(lt),
                                                 source.artifact, std::move(weights),
                                                 source.artifact.config().maxPositions,
                                                 source.options, settings));
  return std::unique_ptr<Backend>(std::move(backend));
}

} // namespace

void registerCudaBackends(BackendRegistry &registry) {
  (void)registry.add("cuda",
                     [](const BackendSource &source) -> StatusOr<std::unique_ptr<Backend>> {
                       // A machine without a driver learns that first; one with a driver
                       // learns what else is missing.
                       DLM_ASSIGN_OR_RETURN(std::shared_ptr<const cuda::CudaDriver> driver,
                                            cuda::CudaDriver::load());
                       DLM_ASSIGN_OR_RETURN(std::shared_ptr<const cuda::CublasLt> lt,
                                            cuda::CublasLt::load());
                       return cudaBackend(std::move(driver), std::move(lt), source);
                     });
  (void)registry.add(
      "cuda-emu", [](const BackendSource &source) -> StatusOr<std::unique_ptr<Backend>> {
        // The emulated device runs blocks on the session's threads.
        emu::EmuDriverOptions emulation;
        emulation.workers =
            source.options.threads > 0 ? static_cast<unsigned>(source.options.threads) : 0;
        DLM_ASSIGN_OR_RETURN(std::shared_ptr<const cuda::CudaDriver> driver,
                             emu::emulatedCudaDriver(emulation));
        DLM_ASSIGN_OR_RETURN(std::shared_ptr<const cuda::CublasLt> lt, emu::emulatedCublasLt());
        return cudaBackend(std::move(driver), std::move(lt), source);
      });
}

} // namespace dlm
