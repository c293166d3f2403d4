#include "compiler/codegen/DeviceCommon.h"

namespace dlm::codegen {

namespace {

// Kept free of <cmath>/<climits>: NVRTC has the CUDA math functions built in and no C library
// headers; the emulated device's prelude supplies the same names on the host.
constexpr std::string_view kDeviceCommon = R"cuda(#ifndef DLM_DEVICE_COMMON
#define DLM_DEVICE_COMMON
namespace dlm_device {

constexpr unsigned kFullWarp = 0xffffffffu;

__device__ __forceinline__ float negativeInfinity() { return __int_as_float(0xff800000u); }
__device__ __forceinline__ float positiveInfinity() { return __int_as_float(0x7f800000u); }

// Counter-based random numbers shared by every backend: each draw is a pure function of
// (seed, request, stream, step, position[, vocabulary index]), so the CPU backend, the Python
// reference and these kernels agree for a seed whatever the batching or launch order.
enum : unsigned long long { kStreamGumbel = 0, kStreamRenoise = 1, kStreamInit = 2 };

// SplitMix64 finaliser.
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The part of a key shared by every position of one step.
__device__ __forceinline__ unsigned long long stepKey(unsigned long long seed,
                                                      unsigned long long request,
                                                      unsigned long long stream,
                                                      unsigned long long step) {
  return mix64(mix64(mix64(mix64(seed) ^ request) ^ stream) ^ step);
}

__device__ __forceinline__ unsigned long long positionKey(unsigned long long stepKeyValue,
                                                          long long position) {
  return mix64(stepKeyValue ^ (unsigned long long)position);
}

// In (0, 1): 53 random bits, centred in their interval.
__device__ __forceinline__ double uniform(unsigned long long key, unsigned long long v) {
  return ((double)(mix64(key ^ v) >> 11) + 0.5) * 0x1p-53;
}

__device__ __forceinline__ double gumbel(unsigned long long key, unsigned long long v) {
  return -log(-log(uniform(key, v)));
}

// uniform() <= 1 - 2^-54, so -log(u) >= 2^-54 and no Gumbel draw exceeds 54 ln 2 = 37.43: a
// logit more than this below the best noisy score cannot win, and its noise need not be drawn.
constexpr double kGumbelCeiling = 38.0;

__device__ __forceinline__ int randomToken(unsigned long long key, int vocab) {
  return (int)(mix64(key) % (unsigned long long)vocab);
}

template <typename T> __device__ __forceinline__ T warpSum(T value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(kFullWarp, value, offset);
  return value;
}

__device__ __forceinline__ float warpMax(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    value = fmaxf(value, __shfl_xor_sync(kFullWarp, value, offset));
  return value;
}

__device__ __forceinline__ float toFloat(float value) { return value; }
__device__ __forceinline__ float toFloat(__nv_bfloat16 value) { return __bfloat162float(value); }
__device__ __forceinline__ void storeFloat(float *to, float value) { *to = value; }
__device__ __forceinline__ void storeFloat(__nv_bfloat16 *to, float value) {
  *to = __float2bfloat16(value);
}

// N consecutive elements as floats in one access of N * sizeof(T) bytes (<= 16); `from` must be
// aligned to that size.
template <int N> __device__ __forceinline__ void loadFloats(const float *from, float *out) {
  if constexpr (N == 4) {
    const float4 v = *reinterpret_cast<const float4 *>(from);
    out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
  } else if constexpr (N == 2) {
    const float2 v = *reinterpret_cast<const float2 *>(from);
    out[0] = v.x; out[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i)
      out[i] = from[i];
  }
}

template <int N> __device__ __forceinline__ void loadFloats(const __nv_bfloat16 *from, float *out) {
  if constexpr (N == 8 || N == 4 || N == 2) {
    // 8 bf16 = one uint4, 4 = one uint2, 2 = one bf16 pair.
    __nv_bfloat162 pairs[N / 2];
    if constexpr (N == 8)
      *reinterpret_cast<uint4 *>(pairs) = *reinterpret_cast<const uint4 *>(from);
    else if constexpr (N == 4)
      *reinterpret_cast<uint2 *>(pairs) = *reinterpret_cast<const uint2 *>(from);
    else
      pairs[0] = *reinterpret_cast<const __nv_bfloat162 *>(from);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i)
      out[i] = __bfloat162float(from[i]);
  }
}

template <int N> __device__ __forceinline__ void storeFloats(float *to, const float *values) {
  if constexpr (N == 4) {
    *reinterpret_cast<float4 *>(to) = make_float4(values[0], values[1], values[2], values[3]);
  } else if constexpr (N == 2) {
    *reinterpret_cast<float2 *>(to) = make_float2(values[0], values[1]);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i)
      to[i] = values[i];
  }
}

template <int N> __device__ __forceinline__ void storeFloats(__nv_bfloat16 *to, const float *values) {
  if constexpr (N == 8 || N == 4 || N == 2) {
    __nv_bfloat162 pairs[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i)
      pairs[i] = __floats2bfloat162_rn(values[2 * i], values[2 * i + 1]);
    if constexpr (N == 8)
      *reinterpret_cast<uint4 *>(to) = *reinterpret_cast<const uint4 *>(pairs);
    else if constexpr (N == 4)
      *reinterpret_cast<uint2 *>(to) = *reinterpret_cast<const uint2 *>(pairs);
    else
      *reinterpret_cast<__nv_bfloat162 *>(to) = pairs[0];
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i)
      to[i] = __float2bfloat16(values[i]);
  }
}

} // namespace dlm_device
#endif // DLM_DEVICE_COMMON
)cuda";

} // namespace

std::string_view deviceCommonSource() { return kDeviceCommon; }

} // namespace dlm::codegen
