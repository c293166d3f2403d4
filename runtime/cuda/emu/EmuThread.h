// What a kernel running on the emulated device sees of its thread: the CUDA built-in indices and
// the block-level operations that need the scheduler (barriers, warp exchanges). Every emulated
// thread is a fiber; these functions are only valid inside a kernel launched by emu::Device.
#pragma once

#include <vector_types.h>

#include <cstddef>

namespace dlm::emu {

struct ThreadContext {
  uint3 threadIdx;
  uint3 blockIdx;
  dim3 blockDim;
  dim3 gridDim;
  unsigned linearThread; // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
};

// The running fiber's context; set by the block scheduler before it resumes a fiber.
extern thread_local const ThreadContext *currentThread;

inline const ThreadContext &thread() { return *currentThread; }
inline int laneId() { return static_cast<int>(currentThread->linearThread & 31u); }

// __syncthreads(): returns once every live thread of the block has arrived.
void syncBlock();
// __syncwarp(): returns once every live thread of the warp has arrived.
void syncWarp();
// One warp shuffle: every live lane of the warp calls it; `out` receives the `bytes` (<= 16)
// that lane `sourceLane` passed as `value`.
void warpExchange(const void *value, void *out, size_t bytes, int sourceLane);

} // namespace dlm::emu
