// Conversions between float32 and the formats weights come in: bf16 (round to nearest even, NaN
// kept quiet), IEEE half and FP8 E4M3 (both ways). Shared by the compiler (dlmc
// --weights), the host weights and the CUDA backend's uploads.
#pragma once

#include <cstdint>
#include <cstring>

namespace dlm {

inline float floatFromBf16(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

inline uint16_t bf16FromFloat(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu))
    return static_cast<uint16_t>((bits >> 16) | 0x40); // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float floatFromF16(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t wide;
  if (exponent == 0x1f) { // inf / nan
    wide = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    wide = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    wide = sign;
  } else { // subnormal half: renormalise into a normal float
    int shift = 0;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    wide = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

// The IEEE half nearest to `value`, ties to even (int4 group scales); past 65504 infinity, NaN
// stays NaN, below 2^-14 the subnormal multiples of 2^-24.
inline uint16_t f16FromFloat(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7e00u);
  if (magnitude >= 0x38800000u) { // 2^-14: normal halves
    uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    if (rounded >= 0x47800000u) // 65520 and up round past the largest half
      return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | (((rounded >> 23) - 112) << 10) |
                                 ((rounded >> 13) & 0x3ffu));
  }
  // Subnormal halves: magnitude / 2^-24, rounded to nearest even (by the float unit's own rounding
  // of an exact power-of-two scaling).
  float scaled;
  std::memcpy(&scaled, &magnitude, sizeof scaled);
  scaled *= 16777216.0f; // 2^24, exact
  const float nearest = __builtin_nearbyintf(scaled);
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(nearest));
}

// FP8 E4M3 ("e4m3fn", as compressed-tensors stores weights): sign, 4 exponent bits (bias 7),
// 3 mantissa bits; no infinities, S.1111.111 is NaN.
inline float floatFromE4m3(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7)
    magnitude = __builtin_nanf("");
  else if (exponent == 0)
    magnitude = static_cast<float>(mantissa) * 0.001953125f; // m/8 * 2^-6
  else
    magnitude = (1.0f + static_cast<float>(mantissa) * 0.125f) * static_cast<float>(1 << exponent) *
                0.0078125f; // * 2^(e-7)
  return (bits & 0x80) ? -magnitude : magnitude;
}

// The E4M3 code nearest to `value`, ties to the even code, saturated to +-448 (the largest finite
// value; the format has no infinity); NaN stays NaN. Normal results round float32's mantissa to
// 3 bits (a carry bumps the exponent, as it should); below 2^-6 the codes are multiples of 2^-9.
inline uint8_t e4m3FromFloat(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u)
    return static_cast<uint8_t>(sign | 0x7fu);
  if (magnitude >= 0x3c800000u) { // 2^-6
    magnitude += 0x7ffffu + ((magnitude >> 20) & 1u);
    const int exponent = static_cast<int>(magnitude >> 23) - 127 + 7;
    const uint32_t mantissa = (magnitude >> 20) & 7u;
    if (exponent > 15 || (exponent == 15 && mantissa == 7u))
      return static_cast<uint8_t>(sign | 0x7eu);
    return static_cast<uint8_t>(sign | (static_cast<uint32_t>(exponent) << 3) | mantissa);
  }
  float absolute;
  std::memcpy(&absolute, &magnitude, sizeof absolute);
  const float units = absolute * 512.0f; // exact: a power of two
  uint32_t whole = static_cast<uint32_t>(units);
  const float rest = units - static_cast<float>(whole);
  if (rest > 0.5f || (rest == 0.5f && (whole & 1u)))
    ++whole;
  return static_cast<uint8_t>(sign | whole);
}

} // namespace dlm
