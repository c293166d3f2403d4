// Parsing and validation of one safetensors file's header. Kept apart from the checkpoint class
// so that every rule about untrusted bytes lives in one place.
#pragma once

#include "importer/safetensors/Safetensors.h"
#include "support/Status.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dlm::safetensors {

struct HeaderEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin; // offsets relative to the data section
  uint64_t end;
};

struct ParsedHeader {
  std::vector<HeaderEntry> tensors;
  std::map<std::string, std::string> metadata;
  size_t dataOffset; // where the data section starts in the file
  size_t dataSize;
};

// Validates `fileSize` bytes at `file`: header length, JSON, every entry's dtype, shape and
// offsets, sizes, and that no two tensors overlap. Errors do not name the file; callers add it.
StatusOr<ParsedHeader> parseSafetensorsHeader(const uint8_t *file, size_t fileSize);

} // namespace dlm::safetensors
