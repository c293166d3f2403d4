// Shared pieces of the CUDA conformance tests: the emulated device, kernel lookup by
// specialisation, bf16 conversions and random data. References are written out in each test.
#pragma once

#include "compiler/codegen/Kernels.h"
#include "runtime/cuda/emu/EmuDevice.h"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace dlm::cudatest {

// Two workers, as the machines here have: blocks run concurrently, so shared memory and atomics
// are exercised across threads too.
inline const emu::Device &emulatedDevice() {
  static const emu::Device device(2);
  return device;
}

// The name of the kernel a generator produces for `params` (aborts the test on an error).
template <typename Params>
std::string kernelName(StatusOr<codegen::KernelSource> (*generate)(const Params &),
                       const Params &params) {
  StatusOr<codegen::KernelSource> kernel = generate(params);
  EXPECT_TRUE(kernel) << kernel.status().message();
  return kernel ? kernel->name : std::string();
}

inline __nv_bfloat16 toBf16(float value) { return __float2bfloat16(value); }
inline float fromBf16(__nv_bfloat16 value) { return __bfloat162float(value); }

// An element of a kernel's storage type from / to float.
template <typename T> T storeAs(float value) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return toBf16(value);
  else
    return value;
}
template <typename T> float loadFloat(T value) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return fromBf16(value);
  else
    return value;
}
// Half an ulp of the storage type, relative: what rounding the output costs.
template <typename T> constexpr double storageRounding() {
  return std::is_same_v<T, __nv_bfloat16> ? 1.0 / 256 : 1.0 / (1 << 23);
}

// Uniform values in [low, high) rounded to bf16; returns the bf16s, and `exact` the floats they
// represent (the reference computes from exactly what the kernel reads).
inline std::vector<__nv_bfloat16> randomBf16(std::mt19937 &random, size_t count, float low,
                                             float high, std::vector<float> *exact = nullptr) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<__nv_bfloat16> values(count);
  if (exact)
    exact->resize(count);
  for (size_t i = 0; i < count; ++i) {
    values[i] = toBf16(uniform(random));
    if (exact)
      (*exact)[i] = fromBf16(values[i]);
  }
  return values;
}

inline int randomInt(std::mt19937 &random, int low, int high) {
  return std::uniform_int_distribution<int>(low, high)(random);
}

// |got - want| <= atol + rtol |want|, with a message naming the element.
inline ::testing::AssertionResult near(double got, double want, double atol, double rtol,
                                       const std::string &what) {
  if (std::isfinite(got) && std::fabs(got - want) <= atol + rtol * std::fabs(want))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": got " << got << ", want " << want << " (difference " << got - want << ")";
}

// tests/reference/counter_rng.py, written out again for the kernel tests: the reference must not
// share code with the kernels it checks (compiler/codegen/DeviceCommon.cpp).
inline uint64_t referenceMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t referenceKey(uint64_t seed, uint64_t request, uint64_t stream, uint64_t step,
                             uint64_t position) {
  return referenceMix64(
      referenceMix64(referenceMix64(referenceMix64(referenceMix64(seed) ^ request) ^ stream) ^
                     step) ^
      position);
}
inline double referenceGumbel(uint64_t key, uint64_t v) {
  const double u = (static_cast<double>(referenceMix64(key ^ v) >> 11) + 0.5) * 0x1p-53;
  return -std::log(-std::log(u));
}

} // namespace dlm::cudatest
