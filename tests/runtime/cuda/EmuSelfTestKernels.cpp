// Hand-written CUDA kernels that pin down the emulated device's semantics (EmuDeviceTest.cpp):
// barriers order memory, shared memory is per block, shuffles move the right lanes' values,
// atomics are atomic across blocks, and a divergent barrier is reported, not hung on.
#include "runtime/cuda/emu/EmuPrelude.h"

namespace emu_self_test {

// Each thread writes its index to shared memory; after the barrier it reads its neighbour's.
extern "C" __global__ void emu_test_barrier(int *out) {
  __shared__ int values[256];
  values[threadIdx.x] = (int)(threadIdx.x + blockIdx.x * 1000);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = values[(threadIdx.x + 1) % blockDim.x];
}

// Thread 0 of each block accumulates into shared memory through many barrier rounds: another
// block's writes must never show up.
extern "C" __global__ void emu_test_shared_is_per_block(int *out, int rounds) {
  __shared__ int total;
  if (threadIdx.x == 0)
    total = 0;
  __syncthreads();
  for (int r = 0; r < rounds; ++r) {
    atomicAdd(&total, (int)blockIdx.x + 1);
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = total;
}

// Results of each shuffle flavour for every lane.
extern "C" __global__ void emu_test_shuffles(int *xorOut, int *upOut, int *downOut, int *idxOut,
                                             float *sumOut, double *doubleOut) {
  const int lane = threadIdx.x & 31;
  const int t = threadIdx.x;
  xorOut[t] = __shfl_xor_sync(0xffffffffu, t, 5);
  upOut[t] = __shfl_up_sync(0xffffffffu, t, 3);
  downOut[t] = __shfl_down_sync(0xffffffffu, t, 7, 16);
  idxOut[t] = __shfl_sync(0xffffffffu, t, 31 - lane);
  float value = (float)lane;
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  sumOut[t] = value;
  doubleOut[t] = __shfl_sync(0xffffffffu, 0.5 + lane, 0);
}

// Atomics from every thread of every block.
extern "C" __global__ void emu_test_atomics(int *counter, int *maximum, float *sum) {
  atomicAdd(counter, 1);
  atomicMax(maximum, (int)(blockIdx.x * blockDim.x + threadIdx.x));
  atomicAdd(sum, 0.5f);
}

// Indices in a 3-D launch.
extern "C" __global__ void emu_test_indices(int *out) {
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + thread] = block * 10000 + thread;
}

// Half of a warp shuffles while the other half waits at the block barrier: neither can ever
// complete. A GPU hangs; the emulator must report it.
extern "C" __global__ void emu_test_divergent_barrier(int *out) {
  int value = (int)threadIdx.x;
  if (threadIdx.x < 16)
    value = __shfl_xor_sync(0xffffffffu, value, 1);
  else
    __syncthreads();
  out[threadIdx.x] = value;
}

// Threads that return early no longer hold back the barrier (as on Volta and later).
extern "C" __global__ void emu_test_early_return(int *out) {
  __shared__ int value;
  if (threadIdx.x >= 40)
    return;
  if (threadIdx.x == 0)
    value = 7;
  __syncthreads();
  out[threadIdx.x] = value;
}

} // namespace emu_self_test

DLM_EMU_KERNEL(emu_self_test::emu_test_barrier);
DLM_EMU_KERNEL(emu_self_test::emu_test_shared_is_per_block);
DLM_EMU_KERNEL(emu_self_test::emu_test_shuffles);
DLM_EMU_KERNEL(emu_self_test::emu_test_atomics);
DLM_EMU_KERNEL(emu_self_test::emu_test_indices);
DLM_EMU_KERNEL(emu_self_test::emu_test_divergent_barrier);
DLM_EMU_KERNEL(emu_self_test::emu_test_early_return);
