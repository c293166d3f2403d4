// Shared pieces of the CUDA conformance tests: the emulated device, kernel lookup by
// specialisation, bf16 conversions, random data, and the mapping of the kernels' enums onto the
// shared references (tests/runtime/conformance/KernelReferences.h), which the CPU backend's
// kernels are held to as well.
#pragma once

#include "compiler/codegen/Kernels.h"
#include "runtime/cuda/emu/EmuDevice.h"
#include "tests/runtime/conformance/KernelReferences.h"
#include "tests/runtime/conformance/Tolerance.h"

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

// A launch's status as a gtest assertion: a failure shows the emulated device's message (a
// deadlock, a failed access check under DLM_EMU_CHECK).
inline ::testing::AssertionResult launched(const Status &status) {
  if (status)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status.message();
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

using reference::near;

// The codegen enums as the references spell them.
inline reference::MaskKind referenceMask(codegen::MaskKind kind) {
  switch (kind) {
  case codegen::MaskKind::causal:
    return reference::MaskKind::causal;
  case codegen::MaskKind::bidirectional:
    return reference::MaskKind::bidirectional;
  case codegen::MaskKind::blockCausal:
    return reference::MaskKind::blockCausal;
  case codegen::MaskKind::slidingWindow:
    return reference::MaskKind::slidingWindow;
  case codegen::MaskKind::slidingWindowSymmetric:
    return reference::MaskKind::slidingWindowSymmetric;
  case codegen::MaskKind::bidirectionalWindow:
    // No reference of its own: DiffusionGemmaForwardTest checks it against the CPU backend.
    return reference::MaskKind::bidirectional;
  }
  return reference::MaskKind::causal;
}
inline reference::Activation referenceActivation(codegen::Activation activation) {
  return activation == codegen::Activation::silu ? reference::Activation::silu
                                                 : reference::Activation::geluTanh;
}
inline reference::AcceptRule referenceAcceptRule(codegen::AcceptRule rule) {
  switch (rule) {
  case codegen::AcceptRule::entropyBound:
    return reference::AcceptRule::entropyBound;
  case codegen::AcceptRule::confidenceThreshold:
    return reference::AcceptRule::confidenceThreshold;
  case codegen::AcceptRule::topK:
    return reference::AcceptRule::topK;
  }
  return reference::AcceptRule::entropyBound;
}
inline reference::NoiseKind referenceNoise(codegen::NoiseKind noise) {
  return noise == codegen::NoiseKind::uniform ? reference::NoiseKind::uniform
                                              : reference::NoiseKind::maskToken;
}

} // namespace dlm::cudatest
