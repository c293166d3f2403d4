// Reader for Hugging Face safetensors checkpoints: one model.safetensors, or shards listed by
// model.safetensors.index.json. Each file is memory-mapped once; tensors are views into the
// mappings, valid while the SafetensorsCheckpoint lives. Headers are validated before anything
// is trusted, and every malformed input gives an error naming the file and the problem.
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section, which the offsets index.
#pragma once

#include "support/MappedFile.h"
#include "support/Status.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlm::safetensors {

enum class DType {
  BOOL,
  U8,
  I8,
  U16,
  I16,
  F16,
  BF16,
  U32,
  I32,
  F32,
  U64,
  I64,
  F64,
  F8_E4M3,
  F8_E5M2
};

// The spelling used in safetensors headers ("BF16", "F8_E4M3", ...).
std::string_view dtypeName(DType dtype);
size_t dtypeSize(DType dtype);
std::optional<DType> parseDType(std::string_view name);

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape; // empty for a scalar
  // Start of the tensor's bytes in the mapped file. Safetensors does not align tensors, so read
  // through memcpy or unaligned-safe loads.
  const uint8_t *data;
  size_t byteSize;
  std::string shardFile; // path of the file the tensor lives in

  int64_t numElements() const;
};

class SafetensorsCheckpoint {
public:
  // `dirOrFile` is a checkpoint directory (model.safetensors.index.json is preferred over
  // model.safetensors), a .safetensors file, or an .index.json file.
  static StatusOr<SafetensorsCheckpoint> open(const std::string &dirOrFile);

  SafetensorsCheckpoint(SafetensorsCheckpoint &&) noexcept;
  SafetensorsCheckpoint &operator=(SafetensorsCheckpoint &&) noexcept;
  SafetensorsCheckpoint(const SafetensorsCheckpoint &) = delete;
  SafetensorsCheckpoint &operator=(const SafetensorsCheckpoint &) = delete;
  ~SafetensorsCheckpoint();

  // Null when there is no tensor of this name. Any dtype, FP8 included, can be looked at.
  const TensorView *find(std::string_view name) const;
  // The tensor for use as weights: an error when it is missing or stored in a dtype the
  // importer cannot use yet (FP8).
  StatusOr<const TensorView *> load(std::string_view name) const;

  // Tensor names in sorted order.
  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }
  // "__metadata__" of the file(s), e.g. {"format": "pt"}; the first shard wins on conflicts.
  const std::map<std::string, std::string> &metadata() const { return metadata_; }
  // Paths of the mapped files, in the order they were opened.
  std::vector<std::string> shardFiles() const;

private:
  SafetensorsCheckpoint() = default;
  Status addFile(const std::string &path, const std::vector<std::string> *onlyTheseTensors);
  static StatusOr<SafetensorsCheckpoint> openIndex(const std::string &indexPath);

  std::vector<MappedFile> files_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> indexByName_;
  std::map<std::string, std::string> metadata_;
};

} // namespace dlm::safetensors
