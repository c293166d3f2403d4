#include "runtime/cuda/emu/EmuDevice.h"

#include "runtime/cuda/emu/BlockRunner.h"

#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace dlm::emu {

namespace {

// The kernels compiled into this process. Registration happens during static initialisation,
// lookups afterwards; the mutex covers kernels of a dlopen'ed library registering late.
struct Registry {
  std::mutex mutex;
  std::map<std::string, KernelEntry, std::less<>> kernels;
};

Registry &registry() {
  static Registry instance;
  return instance;
}

} // namespace

KernelRegistration::KernelRegistration(std::string_view name, KernelEntry entry) {
  Registry &table = registry();
  std::lock_guard<std::mutex> lock(table.mutex);
  table.kernels.emplace(std::string(name), entry);
}

KernelEntry findKernel(std::string_view name) {
  Registry &table = registry();
  std::lock_guard<std::mutex> lock(table.mutex);
  auto found = table.kernels.find(name);
  return found == table.kernels.end() ? nullptr : found->second;
}

Device::Device(unsigned workers, size_t stackBytes) : stackBytes_(stackBytes) {
  workers_ = workers ? workers : std::max(1u, std::thread::hardware_concurrency());
}

Status Device::launch(std::string_view name, Dim3 grid, Dim3 block, void **parameters) const {
  KernelEntry kernel = findKernel(name);
  if (!kernel)
    return Status::error("emulated device: no kernel named '" + std::string(name) +
                         "' is compiled in");
  return launch(kernel, name, grid, block, parameters);
}

Status Device::launch(KernelEntry kernel, std::string_view name, Dim3 grid, Dim3 block,
                      void **parameters) const {
  const std::string where = "emulated launch of " + std::string(name);
  const unsigned long long threads = static_cast<unsigned long long>(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64)
    return Status::error(where + ": a block has 1 to 1024 threads (z <= 64), got " +
                         std::to_string(block.x) + " x " + std::to_string(block.y) + " x " +
                         std::to_string(block.z));
  const unsigned long long blocks = static_cast<unsigned long long>(grid.x) * grid.y * grid.z;
  if (blocks == 0 || grid.y > 65535 || grid.z > 65535)
    return Status::error(where + ": empty or oversized grid " + std::to_string(grid.x) + " x " +
                         std::to_string(grid.y) + " x " + std::to_string(grid.z));

  const dim3 blockDim(block.x, block.y, block.z);
  const dim3 gridDim(grid.x, grid.y, grid.z);
  std::atomic<unsigned long long> next{0};
  std::mutex errorMutex;
  Status firstError = Status::ok();
  std::atomic<bool> failed{false};
  auto work = [&]() {
    BlockRunner runner(stackBytes_);
    for (;;) {
      const unsigned long long index = next.fetch_add(1);
      if (index >= blocks || failed.load())
        return;
      const uint3 blockIdx = {
          static_cast<unsigned>(index % grid.x), static_cast<unsigned>(index / grid.x % grid.y),
          static_cast<unsigned>(index / (static_cast<unsigned long long>(grid.x) * grid.y))};
      Status status = runner.run(kernel, parameters, blockIdx, blockDim, gridDim);
      if (!status) {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (firstError)
          firstError = status.withContext(where);
        failed = true;
        return;
      }
    }
  };
  const unsigned helpers =
      static_cast<unsigned>(std::min<unsigned long long>(workers_, blocks)) - 1;
  std::vector<std::thread> threadsRunning;
  threadsRunning.reserve(helpers);
  for (unsigned i = 0; i < helpers; ++i)
    threadsRunning.emplace_back(work);
  work();
  for (std::thread &thread : threadsRunning)
    thread.join();
  return firstError;
}

} // namespace dlm::emu
