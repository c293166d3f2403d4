// Counter-based random numbers, bit for bit as tests/reference/counter_rng.py defines them: every
// draw is a pure function of (seed, request, stream, step, position[, vocabulary index]), so the
// reference, the CPU backend and GPU kernels agree for a seed whatever the batching or threading.
//
//   mix64(z)          SplitMix64 finaliser
//   key(...)          = mix64(mix64(mix64(mix64(mix64(seed) ^ request) ^ stream) ^ step) ^
//   position) uniform(key, v)   = ((mix64(key ^ v) >> 11) + 0.5) * 2^-53, in (0, 1) gumbel(key, v)
//   = -log(-log(uniform(key, v))) randomToken(key, V) = mix64(key) mod V
#pragma once

#include <cmath>
#include <cstdint>

namespace dlm::sampling::rng {

// Which random quantity a draw feeds; part of the key.
enum Stream : uint64_t {
  kStreamGumbel = 0,  // Gumbel noise over the vocabulary
  kStreamRenoise = 1, // renoise token id (uniform-noise canvases)
  kStreamInit = 2,    // initial canvas token id (uniform-noise canvases)
  kStreamVerify = 3,  // speculative verification: acceptance and correction draws
};

inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The part of the key shared by every position of one step: saves four mixes per position.
inline uint64_t stepKey(uint64_t seed, uint64_t request, uint64_t stream, uint64_t step) {
  return mix64(mix64(mix64(mix64(seed) ^ request) ^ stream) ^ step);
}

inline uint64_t positionKey(uint64_t stepKeyValue, int64_t position) {
  return mix64(stepKeyValue ^ static_cast<uint64_t>(position));
}

inline uint64_t key(uint64_t seed, uint64_t request, uint64_t stream, uint64_t step,
                    int64_t position) {
  return positionKey(stepKey(seed, request, stream, step), position);
}

inline double uniform(uint64_t keyValue, uint64_t v) {
  return (static_cast<double>(mix64(keyValue ^ v) >> 11) + 0.5) * 0x1p-53;
}

inline double gumbel(uint64_t keyValue, uint64_t v) {
  return -std::log(-std::log(uniform(keyValue, v)));
}

inline int64_t randomToken(uint64_t keyValue, int64_t vocab) {
  return static_cast<int64_t>(mix64(keyValue) % static_cast<uint64_t>(vocab));
}

} // namespace dlm::sampling::rng
