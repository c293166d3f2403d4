// The portability prelude that lets generated CUDA C++ compile with the host C++ compiler and
// run on the emulated device. Include it before the kernel source. After the CUDA headers have
// been read in host mode it redefines what host mode gets wrong or lacks:
//   - __shared__ becomes `static thread_local`: the block scheduler runs one block at a time per
//     worker thread, all of the block's fibers on that thread, so each block has its own shared
//     memory and all its threads see the same one;
//   - threadIdx / blockIdx / blockDim / gridDim read the running fiber's context;
//   - __syncthreads, __syncwarp and the warp shuffles go through the fiber scheduler;
//   - atomics are real atomics (blocks run on several worker threads);
//   - fast-math intrinsics are their accurate host counterparts.
// Kernels are registered with DLM_EMU_KERNEL(qualified::name) so the device finds them by name.
#pragma once

#include <cuda_bf16.h>
#include <vector_types.h>

#include "runtime/cuda/emu/EmuDevice.h"
#include "runtime/cuda/emu/EmuThread.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __forceinline__
#define __forceinline__ inline
#undef __shared__
#define __shared__ static thread_local
#undef __constant__
#define __constant__
#undef __launch_bounds__
#define __launch_bounds__(...)

#define threadIdx (::dlm::emu::thread().threadIdx)
#define blockIdx (::dlm::emu::thread().blockIdx)
#define blockDim (::dlm::emu::thread().blockDim)
#define gridDim (::dlm::emu::thread().gridDim)
#define warpSize 32

inline void __syncthreads() { ::dlm::emu::syncBlock(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::dlm::emu::syncWarp(); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

namespace dlm::emu::detail {

template <typename T> inline T shuffleFrom(T value, int sourceLane) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 16,
                "warp shuffles move trivially copyable values of at most 16 bytes");
  T result;
  ::dlm::emu::warpExchange(&value, &result, sizeof(T), sourceLane);
  return result;
}

// The first lane of the width-sized segment `lane` belongs to.
inline int segmentBase(int lane, int width) { return lane & ~(width - 1); }

} // namespace dlm::emu::detail

template <typename T> inline T __shfl_sync(unsigned, T value, int sourceLane, int width = 32) {
  const int lane = ::dlm::emu::laneId();
  return ::dlm::emu::detail::shuffleFrom(value, ::dlm::emu::detail::segmentBase(lane, width) +
                                                    (sourceLane & (width - 1)));
}

template <typename T> inline T __shfl_up_sync(unsigned, T value, unsigned delta, int width = 32) {
  const int lane = ::dlm::emu::laneId();
  const int source = lane - static_cast<int>(delta);
  return ::dlm::emu::detail::shuffleFrom(
      value, source < ::dlm::emu::detail::segmentBase(lane, width) ? lane : source);
}

template <typename T> inline T __shfl_down_sync(unsigned, T value, unsigned delta, int width = 32) {
  const int lane = ::dlm::emu::laneId();
  const int source = lane + static_cast<int>(delta);
  return ::dlm::emu::detail::shuffleFrom(
      value, source >= ::dlm::emu::detail::segmentBase(lane, width) + width ? lane : source);
}

template <typename T> inline T __shfl_xor_sync(unsigned, T value, int laneMask, int width = 32) {
  const int lane = ::dlm::emu::laneId();
  const int source = lane ^ laneMask;
  return ::dlm::emu::detail::shuffleFrom(
      value, source >= ::dlm::emu::detail::segmentBase(lane, width) + width ? lane : source);
}

// Atomics on integers map onto the compiler's; floating point ones are compare-and-swap loops.
template <typename T> inline T atomicAdd(T *address, T value) {
  if constexpr (std::is_integral<T>::value) {
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
  } else {
    T expected;
    __atomic_load(address, &expected, __ATOMIC_RELAXED);
    for (;;) {
      T desired = expected + value;
      if (__atomic_compare_exchange(address, &expected, &desired, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        return expected;
    }
  }
}
template <typename T> inline T atomicMax(T *address, T value) {
  T expected = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (expected < value && !__atomic_compare_exchange_n(address, &expected, value, false,
                                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return expected;
}
template <typename T> inline T atomicMin(T *address, T value) {
  T expected = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (value < expected && !__atomic_compare_exchange_n(address, &expected, value, false,
                                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return expected;
}
template <typename T> inline T atomicExch(T *address, T value) {
  return __atomic_exchange_n(address, value, __ATOMIC_RELAXED);
}
template <typename T> inline T atomicCAS(T *address, T compare, T value) {
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
template <typename T> inline T atomicOr(T *address, T value) {
  return __atomic_fetch_or(address, value, __ATOMIC_RELAXED);
}
template <typename T> inline T atomicAnd(T *address, T value) {
  return __atomic_fetch_and(address, value, __ATOMIC_RELAXED);
}

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __int_as_float(unsigned bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
inline float __int_as_float(int bits) { return __int_as_float(static_cast<unsigned>(bits)); }
inline int __float_as_int(float value) {
  int bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
template <typename T> inline T __ldg(const T *address) { return *address; }

// Registers kernel `qualifiedName` (an extern "C" function of the generated source) under its
// unqualified name.
#define DLM_EMU_KERNEL(qualifiedName) DLM_EMU_KERNEL_AT(qualifiedName, __COUNTER__)
#define DLM_EMU_KERNEL_AT(qualifiedName, counter) DLM_EMU_KERNEL_AT_(qualifiedName, counter)
#define DLM_EMU_KERNEL_AT_(qualifiedName, counter)                                                 \
  static const ::dlm::emu::KernelRegistration dlmEmuKernelRegistration##counter(                   \
      ::dlm::emu::unqualifiedName(#qualifiedName),                                                 \
      [](void **parameters) { ::dlm::emu::invokeKernel(&qualifiedName, parameters); })
