#include "runtime/artifact/RandomParameters.h"

#include "runtime/artifact/ArtifactHash.h"

#include <algorithm>
#include <cstring>

namespace dlm::artifact {
namespace {

// Why these ranges keep a 32-layer transformer's activations finite, and far from the limits of
// bf16 and f16 (65504):
// - Matrices U[-0.02, 0.02) have a standard deviation of 0.0115, the order real models are
//   initialised at. Every block starts with a norm, so a projection reads inputs of RMS about 1
//   (times the norm's gain, at most 1.5) and gives outputs of RMS sqrt(fan_in) x 0.0115 x gain:
//   about 0.74 for a fan-in of 4096, 1.3 for 12288. Each layer then adds O(1) to the residual
//   stream, whose RMS stays within tens after 32 layers; attention scores q.k / sqrt(head_dim)
//   are O(1) (the softmax is far from saturating) and so are the LM head's logits.
// - Vectors U[0.5, 1.5) are positive like trained norm gains, so that a norm neither flips nor
//   silences a channel; as a bias, an O(1) offset.
// - Quantized matrices hold values of their own range (i8: every byte; fp8_e4m3: |v| < 128) and
//   their row scales U[0.5, 1.5) x 0.02/128, so that their products span about ±0.03.
constexpr float kMatrixHalfWidth = 0.02f;
constexpr float kQuantizedHalfWidth = 128.0f;

// Not a power of two: the rows of a matrix a power of two bytes wide would otherwise repeat
// exactly every few hundred rows; this way each repetition is shifted by 64 bytes. A multiple of
// every element size.
constexpr size_t kBlockBytes = (size_t{1} << 20) - 64;

// splitmix64 (Steele, Lea and Flood 2014): its finalizer, and the generator it drives.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class SplitMix64 {
public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ULL); }

private:
  uint64_t state_;
};

// U[-halfWidth, halfWidth): a 24-bit integer in [-2^23, 2^23), exact as a float, times
// halfWidth / 2^23 (exact: a power of two apart). One IEEE product, so one rounding everywhere.
float symmetric(uint64_t bits, float halfWidth) {
  const int32_t k = static_cast<int32_t>(bits >> 40) - (int32_t{1} << 23);
  return static_cast<float>(k) * (halfWidth * 0x1p-23f);
}

// U[0.5 x scale, 1.5 x scale): an integer in [2^22, 3 x 2^22), exact as a float, times
// scale / 2^23.
float positive(uint64_t bits, float scale) {
  const int32_t k = (int32_t{1} << 22) + static_cast<int32_t>(bits >> 41);
  return static_cast<float>(k) * (scale * 0x1p-23f);
}

float roleValue(DType dtype, RandomRole role, uint64_t bits) {
  switch (role) {
  case RandomRole::matrix:
    return symmetric(bits,
                     dtype == DType::fp8_e4m3 ? kQuantizedHalfWidth : kMatrixHalfWidth);
  case RandomRole::vector:
    return positive(bits, 1.0f);
  case RandomRole::rowScale:
    return positive(bits, kMatrixHalfWidth / kQuantizedHalfWidth);
  }
  return 0.0f;
}

// The bits of `value` (finite, within the format's range) rounded toward zero to a binary float
// format of `exponentBits` and `mantissaBits` with subnormals (bf16 8/7, f16 5/10, fp8_e4m3 4/3):
// integer operations only, so every machine gets the same bytes. Values below the format's
// smallest subnormal become zero of their sign.
uint32_t truncateToFloatFormat(float value, int exponentBits, int mantissaBits) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t sign = bits >> 31;
  const uint32_t biasedExponent = (bits >> 23) & 0xff;
  const uint32_t mantissa = (bits & 0x7fffff) | 0x800000; // with the implicit leading one
  const int exponent = static_cast<int>(biasedExponent) - 127;
  const int bias = (1 << (exponentBits - 1)) - 1;
  const int minExponent = 1 - bias;
  uint32_t magnitude = 0;
  if (biasedExponent == 0) {
    magnitude = 0; // zero (or an f32 subnormal, below every format's smallest value)
  } else if (exponent >= minExponent) {
    magnitude = (static_cast<uint32_t>(exponent + bias) << mantissaBits) |
                ((mantissa & 0x7fffff) >> (23 - mantissaBits));
  } else {
    const int shift = 23 - mantissaBits + (minExponent - exponent);
    magnitude = shift > 24 ? 0 : mantissa >> shift;
  }
  return (sign << (exponentBits + mantissaBits)) | magnitude;
}

void storeLittleEndian16(uint32_t value, uint8_t *out) {
  out[0] = static_cast<uint8_t>(value & 0xff);
  out[1] = static_cast<uint8_t>((value >> 8) & 0xff);
}

void storeElement(DType dtype, RandomRole role, uint64_t bits, uint8_t *out) {
  if (dtype == DType::i8) {
    *out = static_cast<uint8_t>(bits >> 56);
    return;
  }
  const float value = roleValue(dtype, role, bits);
  switch (dtype) {
  case DType::f32:
    std::memcpy(out, &value, sizeof value); // the artifact is little-endian, as is x86-64
    break;
  case DType::bf16:
    storeLittleEndian16(truncateToFloatFormat(value, 8, 7), out);
    break;
  case DType::f16:
    storeLittleEndian16(truncateToFloatFormat(value, 5, 10), out);
    break;
  case DType::fp8_e4m3:
    *out = static_cast<uint8_t>(truncateToFloatFormat(value, 4, 3));
    break;
  default:
    break; // isRandomDType refused it
  }
}

std::vector<uint8_t> makeBlock(uint64_t seed, DType dtype, RandomRole role) {
  // Each (seed, dtype, role) its own stream.
  const uint64_t stream = (static_cast<uint64_t>(dtype) << 8) | static_cast<uint64_t>(role);
  SplitMix64 random(mix64(mix64(seed) + stream));
  std::vector<uint8_t> block(kBlockBytes);
  const size_t elementSize = dtypeSize(dtype);
  for (size_t offset = 0; offset < block.size(); offset += elementSize)
    storeElement(dtype, role, random.next(), block.data() + offset);
  return block;
}

// Where in the block a weight starts: an element its name picks.
size_t startOffset(std::string_view name, DType dtype) {
  const size_t elementSize = dtypeSize(dtype);
  const uint64_t elements = kBlockBytes / elementSize;
  return static_cast<size_t>(hashBytes(name.data(), name.size()) % elements) * elementSize;
}

} // namespace

RandomRole randomRole(std::string_view name, ShapeView shape) {
  if (shape.rank() >= 2)
    return RandomRole::matrix;
  const bool rowScale = name.size() > kRowScaleSuffix.size() &&
                        name.substr(name.size() - kRowScaleSuffix.size()) == kRowScaleSuffix;
  return rowScale ? RandomRole::rowScale : RandomRole::vector;
}

bool isRandomDType(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 ||
         dtype == DType::fp8_e4m3 || dtype == DType::i8;
}

StatusOr<const std::vector<uint8_t> *> RandomParameters::block(std::string_view name, DType dtype,
                                                               RandomRole role) {
  if (!isRandomDType(dtype))
    return Status::error("weight '" + std::string(name) + "' is " + dtypeName(dtype) +
                         ": random parameters are f32, bf16, f16, fp8_e4m3 or i8");
  auto [it, added] = blocks_.try_emplace({dtype, role});
  if (added)
    it->second = makeBlock(seed_, dtype, role);
  return &it->second;
}

Status RandomParameters::generate(std::string_view name, DType dtype, ShapeView shape,
                                  const Consumer &consume) {
  DLM_ASSIGN_OR_RETURN(uint64_t remaining, weightByteSize(name, dtype, shape));
  DLM_ASSIGN_OR_RETURN(const std::vector<uint8_t> *bytes,
                       block(name, dtype, randomRole(name, shape)));
  size_t position = startOffset(name, dtype);
  while (remaining > 0) {
    const size_t piece =
        static_cast<size_t>(std::min<uint64_t>(remaining, bytes->size() - position));
    DLM_RETURN_IF_ERROR(consume(bytes->data() + position, piece));
    remaining -= piece;
    position = 0;
  }
  return Status::ok();
}

Status RandomParameters::fill(std::string_view name, DType dtype, ShapeView shape, uint8_t *out,
                              uint64_t size) {
  DLM_RETURN_IF_ERROR(checkWeightByteSize(name, dtype, shape, size));
  return generate(name, dtype, shape, [&out](const uint8_t *data, size_t piece) {
    std::memcpy(out, data, piece);
    out += piece;
    return Status::ok();
  });
}

StatusOr<uint64_t> RandomParameters::contentHash(std::string_view name, DType dtype,
                                                 ShapeView shape) {
  StreamingHash hash;
  DLM_RETURN_IF_ERROR(generate(name, dtype, shape, [&hash](const uint8_t *data, size_t piece) {
    hash.update(data, piece);
    return Status::ok();
  }));
  return hash.digest();
}

} // namespace dlm::artifact
