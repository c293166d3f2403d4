// The emulated CUDA device: kernels compiled from the generated CUDA C++ by the host compiler
// (with EmuPrelude.h) and launched like cuLaunchKernel does, with each thread block's threads
// run as Boost.Context fibers. A fiber runs until it reaches a barrier or a warp shuffle, then
// the next one runs, so __syncthreads, shared memory, shuffles and atomics keep their meaning.
// Blocks are spread over worker threads; within a block everything is one worker's.
//
// Device memory is host memory: a device pointer is a host pointer.
#pragma once

#include "support/Status.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dlm::emu {

// A kernel as the device calls it: parameters as cuLaunchKernel takes them, one pointer to each
// argument's value.
using KernelEntry = void (*)(void **parameters);

// Adds a kernel to the process-wide table of compiled-in kernels (DLM_EMU_KERNEL does this).
struct KernelRegistration {
  KernelRegistration(std::string_view name, KernelEntry entry);
};

// The kernel registered under `name`, or null.
KernelEntry findKernel(std::string_view name);

// "ns::detail::name" -> "name".
constexpr std::string_view unqualifiedName(std::string_view qualified) {
  const size_t colon = qualified.rfind(':');
  return colon == std::string_view::npos ? qualified : qualified.substr(colon + 1);
}

// Calls `kernel` with parameters[i] read as its i-th parameter type.
template <typename... Args, size_t... I>
void invokeKernelWith(void (*kernel)(Args...), void **parameters, std::index_sequence<I...>) {
  kernel(*static_cast<std::remove_cv_t<std::remove_reference_t<Args>> *>(parameters[I])...);
}
template <typename... Args> void invokeKernel(void (*kernel)(Args...), void **parameters) {
  invokeKernelWith(kernel, parameters, std::index_sequence_for<Args...>{});
}

// Writes sizeof of `kernel`'s first `capacity` parameter types to `sizes`; returns how many
// parameters it has. The emulated driver copies kernelParams with it (cuLaunchKernel passes
// pointers to the values; a captured graph must keep the values themselves).
template <typename... Args>
unsigned kernelParameterSizes(void (*)(Args...), unsigned long long *sizes, unsigned capacity) {
  const unsigned long long all[] = {sizeof(std::remove_cv_t<std::remove_reference_t<Args>>)...,
                                    0};
  for (unsigned i = 0; i < sizeof...(Args) && i < capacity; ++i)
    sizes[i] = all[i];
  return sizeof...(Args);
}

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

class Device {
public:
  // `workers` threads run blocks (0: one per hardware thread); `stackBytes` per fiber.
  explicit Device(unsigned workers = 0, size_t stackBytes = 64 * 1024);

  // Launches the registered kernel `name`. Fails for an unknown kernel, a bad launch shape
  // (more than 1024 threads per block, an empty grid) or a block that deadlocks (threads waiting
  // at barriers that can never complete, a shuffle reading a lane that does not exist).
  Status launch(std::string_view name, Dim3 grid, Dim3 block, void **parameters) const;
  Status launch(KernelEntry kernel, std::string_view name, Dim3 grid, Dim3 block,
                void **parameters) const;

  // Typed convenience: launchArgs("k", grid, block, a, b, c) passes {&a, &b, &c}. The argument
  // types must be exactly the kernel's parameter types.
  template <typename... Args>
  Status launchArgs(std::string_view name, Dim3 grid, Dim3 block, Args... args) const {
    void *parameters[] = {static_cast<void *>(&args)..., nullptr};
    return launch(name, grid, block, parameters);
  }

  unsigned workers() const { return workers_; }

private:
  unsigned workers_;
  size_t stackBytes_;
};

} // namespace dlm::emu
