#include "importer/safetensors/SafetensorsHeader.h"

#include "support/JsonText.h"
#include "support/ShapeText.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace dlm::safetensors {
namespace {

using Json = nlohmann::json;

constexpr size_t kLengthPrefixBytes = 8;
// The reference implementation refuses larger headers; a bigger one means a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

std::string quoted(const std::string &name) { return "tensor '" + name + "'"; }

bool isNonNegativeInteger(const Json &value) {
  return value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() >= 0);
}

StatusOr<HeaderEntry> parseEntry(const std::string &name, const Json &entry) {
  if (!entry.is_object())
    return Status::error(quoted(name) + ": entry is not a JSON object");
  for (const char *key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key))
      return Status::error(quoted(name) + " has no " + key);

  HeaderEntry parsed;
  parsed.name = name;
  const Json &dtype = entry["dtype"];
  const std::optional<DType> known =
      dtype.is_string() ? parseDType(dtype.get<std::string>()) : std::nullopt;
  if (!known)
    return Status::error(quoted(name) + " has unknown dtype " +
                         (dtype.is_string() ? "'" + dtype.get<std::string>() + "'"
                                            : jsonExcerpt(dtype)));
  parsed.dtype = *known;

  const Json &shape = entry["shape"];
  if (!shape.is_array())
    return Status::error(quoted(name) + " has an invalid shape " + jsonExcerpt(shape));
  for (const Json &dim : shape) {
    if (!isNonNegativeInteger(dim) || dim.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return Status::error(quoted(name) + " has an invalid shape " + jsonExcerpt(shape));
    parsed.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
  }

  const Json &offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !isNonNegativeInteger(offsets[0]) ||
      !isNonNegativeInteger(offsets[1]))
    return Status::error(quoted(name) + " has invalid data_offsets " + jsonExcerpt(offsets));
  parsed.begin = offsets[0].get<uint64_t>();
  parsed.end = offsets[1].get<uint64_t>();
  return parsed;
}

Status checkExtent(const HeaderEntry &entry, size_t dataSize) {
  if (entry.begin > entry.end)
    return Status::error(quoted(entry.name) + ": data_offsets begin " +
                         std::to_string(entry.begin) + " is after end " +
                         std::to_string(entry.end));
  if (entry.end > dataSize)
    return Status::error(quoted(entry.name) + ": data_offsets end " + std::to_string(entry.end) +
                         " is past the end of the data section (" + std::to_string(dataSize) +
                         " bytes)");
  uint64_t expected = dtypeSize(entry.dtype);
  bool overflow = false;
  for (int64_t dim : entry.shape)
    overflow |= __builtin_mul_overflow(expected, static_cast<uint64_t>(dim), &expected);
  if (overflow || expected != entry.end - entry.begin)
    return Status::error(quoted(entry.name) + ": dtype " + std::string(dtypeName(entry.dtype)) +
                         " with shape " + shapeText(entry.shape) + " needs " +
                         (overflow ? std::string("more than 2^64") : std::to_string(expected)) +
                         " bytes but data_offsets span " + std::to_string(entry.end - entry.begin));
  return Status::ok();
}

Status checkNoOverlap(std::vector<const HeaderEntry *> entries) {
  std::sort(entries.begin(), entries.end(), [](const HeaderEntry *a, const HeaderEntry *b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  const HeaderEntry *previous = nullptr;
  for (const HeaderEntry *entry : entries) {
    if (entry->begin == entry->end)
      continue; // empty tensors occupy no bytes
    if (previous && entry->begin < previous->end)
      return Status::error("tensors '" + previous->name + "' [" + std::to_string(previous->begin) +
                           ", " + std::to_string(previous->end) + ") and '" + entry->name + "' [" +
                           std::to_string(entry->begin) + ", " + std::to_string(entry->end) +
                           ") overlap");
    previous = entry;
  }
  return Status::ok();
}

StatusOr<std::map<std::string, std::string>> parseMetadata(const Json &metadata) {
  std::map<std::string, std::string> parsed;
  if (metadata.is_null())
    return parsed;
  if (!metadata.is_object())
    return Status::error("__metadata__ is not an object of strings");
  for (const auto &[key, value] : metadata.items()) {
    if (!value.is_string())
      return Status::error("__metadata__ is not an object of strings ('" + key + "' is " +
                           jsonExcerpt(value) + ")");
    parsed.emplace(key, value.get<std::string>());
  }
  return parsed;
}

} // namespace

StatusOr<ParsedHeader> parseSafetensorsHeader(const uint8_t *file, size_t fileSize) {
  if (fileSize < kLengthPrefixBytes)
    return Status::error("file is " + std::to_string(fileSize) +
                         " bytes, shorter than the 8-byte header length");
  uint64_t headerLength = 0;
  for (size_t i = 0; i < kLengthPrefixBytes; ++i)
    headerLength |= static_cast<uint64_t>(file[i]) << (8 * i);
  if (headerLength > fileSize - kLengthPrefixBytes)
    return Status::error("header length " + std::to_string(headerLength) +
                         " runs past the end of the file (" + std::to_string(fileSize) + " bytes)");
  if (headerLength > kMaxHeaderBytes)
    return Status::error("header length " + std::to_string(headerLength) +
                         " exceeds the 100 MiB limit");

  const char *headerText = reinterpret_cast<const char *>(file + kLengthPrefixBytes);
  StatusOr<Json> parsedHeader =
      parseJsonText<Json>(std::string_view(headerText, headerLength), "header");
  if (!parsedHeader)
    return parsedHeader.status();
  const Json &header = *parsedHeader;
  if (!header.is_object())
    return Status::error("header is not a JSON object");

  ParsedHeader parsed;
  parsed.dataOffset = kLengthPrefixBytes + static_cast<size_t>(headerLength);
  parsed.dataSize = fileSize - parsed.dataOffset;
  try {
    for (const auto &[name, entry] : header.items()) {
      if (name == "__metadata__") {
        StatusOr<std::map<std::string, std::string>> metadata = parseMetadata(entry);
        if (!metadata)
          return metadata.status();
        parsed.metadata = std::move(*metadata);
        continue;
      }
      StatusOr<HeaderEntry> tensor = parseEntry(name, entry);
      if (!tensor)
        return tensor.status();
      DLM_RETURN_IF_ERROR(checkExtent(*tensor, parsed.dataSize));
      parsed.tensors.push_back(std::move(*tensor));
    }
  } catch (const Json::exception &error) {
    return Status::error(std::string("unexpected value in header: ") + error.what());
  }

  std::vector<const HeaderEntry *> entries;
  for (const HeaderEntry &entry : parsed.tensors)
    entries.push_back(&entry);
  DLM_RETURN_IF_ERROR(checkNoOverlap(std::move(entries)));
  return parsed;
}

} // namespace dlm::safetensors
