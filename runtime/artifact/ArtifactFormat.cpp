#include "runtime/artifact/ArtifactFormat.h"

#include <cstdio>
#include <limits>

namespace dlm::artifact {

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::f64:
  case DType::i64:
  case DType::u64:
    return 8;
  case DType::f32:
  case DType::i32:
  case DType::u32:
    return 4;
  case DType::f16:
  case DType::bf16:
  case DType::i16:
  case DType::u16:
    return 2;
  case DType::fp8_e4m3:
  case DType::fp8_e5m2:
  case DType::i8:
  case DType::u8:
  case DType::boolean:
    return 1;
  case DType::invalid:
  case DType::i4:
    return 0;
  }
  // A value from a newer schema or a damaged file.
  return 0;
}

uint64_t storageBytes(DType dtype, uint64_t elements) {
  return dtype == DType::i4 ? (elements + 1) / 2 : elements * dtypeSize(dtype);
}

const char *dtypeName(DType dtype) {
  if (dtype != DType::i4 && (dtype == DType::invalid || dtypeSize(dtype) == 0))
    return "unknown";
  return fb::EnumNameDType(dtype);
}

bool ModelConfig::operator==(const ModelConfig &other) const {
  return architecture == other.architecture && vocabSize == other.vocabSize &&
         embeddingSize == other.embeddingSize && hiddenSize == other.hiddenSize &&
         numLayers == other.numLayers && numHeads == other.numHeads &&
         numKvHeads == other.numKvHeads && headDim == other.headDim &&
         intermediateSize == other.intermediateSize && ropeTheta == other.ropeTheta &&
         rmsNormEps == other.rmsNormEps && maskTokenId == other.maskTokenId &&
         bosTokenId == other.bosTokenId && eosTokenIds == other.eosTokenIds &&
         padTokenId == other.padTokenId && maxPositions == other.maxPositions &&
         tiedEmbeddings == other.tiedEmbeddings && attentionMask == other.attentionMask &&
         extra == other.extra;
}

bool KernelResources::operator==(const KernelResources &other) const {
  return registers == other.registers && spillStoreBytes == other.spillStoreBytes &&
         spillLoadBytes == other.spillLoadBytes && stackBytes == other.stackBytes &&
         sharedMemoryBytes == other.sharedMemoryBytes;
}

std::string ShapeView::toString() const {
  std::string text = "[";
  for (size_t i = 0; i < rank_; ++i) {
    if (i)
      text += ", ";
    text += std::to_string(dims_[i]);
  }
  return text + "]";
}

StatusOr<uint64_t> weightByteSize(std::string_view weight, DType dtype, ShapeView shape) {
  const std::string item = "weight '" + std::string(weight) + "'";
  const size_t elementSize = dtypeSize(dtype);
  if (elementSize == 0 && dtype != DType::i4)
    return Status::error(item + " has unknown dtype " +
                         std::to_string(static_cast<unsigned>(dtype)));
  if (dtype == DType::i4 && (shape.rank() == 0 || shape[shape.rank() - 1] % 2 != 0))
    return Status::error(item + " is i4 with shape " + shape.toString() +
                         ": its rows must have an even length (two elements a byte)");
  bool empty = false;
  for (int64_t dim : shape) {
    if (dim < 0)
      return Status::error(item + " has a negative dimension in shape " + shape.toString());
    empty |= dim == 0;
  }
  if (empty)
    return uint64_t{0};
  uint64_t size = dtype == DType::i4 ? 1 : elementSize; // i4: elements, halved at the end
  for (int64_t dim : shape) {
    if (size > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(dim))
      return Status::error(item + " has shape " + shape.toString() +
                           " whose byte size does not fit in 64 bits");
    size *= static_cast<uint64_t>(dim);
  }
  return dtype == DType::i4 ? size / 2 : size;
}

Status checkWeightByteSize(std::string_view weight, DType dtype, ShapeView shape,
                           uint64_t byteSize) {
  StatusOr<uint64_t> expected = weightByteSize(weight, dtype, shape);
  if (!expected)
    return expected.status();
  if (byteSize != *expected)
    return Status::error("weight '" + std::string(weight) + "' holds " + std::to_string(byteSize) +
                         " bytes but shape " + shape.toString() + " of " + dtypeName(dtype) +
                         " needs " + std::to_string(*expected));
  return Status::ok();
}

std::string attributeValueText(const AttributeValue &value) {
  return std::visit(
      [](const auto &v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>)
          return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return v;
        else if constexpr (std::is_same_v<T, double>) {
          char text[32];
          std::snprintf(text, sizeof text, "%g", v);
          return text;
        } else
          return std::to_string(v);
      },
      value);
}

std::string quotedName(std::string_view name) { return "'" + std::string(name) + "'"; }

std::string tensorDescription(DType dtype, ShapeView shape) {
  return std::string(dtypeName(dtype)) + " " + shape.toString();
}

} // namespace dlm::artifact
