// Reading the container an artifact and a parameter file share (ContainerFormat.h): the file
// mapped read-only and checked step by step before anything in it is trusted, its weight index as
// views into the mapping, and its integrity hashes recomputed on request. Errors do not name the
// file: ArtifactReader and ParameterFileReader add it.
#pragma once

#include "runtime/artifact/ContainerFormat.h"
#include "support/MappedFile.h"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlm::artifact {

// A weight's descriptor and bytes, pointing into a reader's mapping.
struct WeightView {
  std::string_view name;
  DType dtype = DType::invalid;
  ShapeView shape;
  // 64-byte aligned in memory.
  const void *data = nullptr;
  uint64_t size = 0;
  // Where the bytes sit in the file that holds them (the artifact, or its parameter file), for
  // diagnostics.
  uint64_t fileOffset = 0;
  // XXH3-64 of the bytes as dlmc wrote them (0 before schema 1.4, which recorded none).
  uint64_t contentHash = 0;
};

class MappedContainer {
public:
  MappedContainer() = default;

  // Maps `path` and checks what can be checked before the flatbuffer is verified: the file's size,
  // its identifier, the metadata's size and the schema version, whose major must be `format`'s.
  Status open(const std::string &path, const ContainerFormat &format);

  // Once the caller has verified the flatbuffer (whose root is `root`): where the metadata hash is
  // stored (from the format's first minor version with hashes), the weight section (aligned, after
  // the metadata, ending the file) and, unless `withWeights` is false, every weight descriptor
  // (known dtype, byte size == shape x dtype, 64-byte aligned, inside the section, no overflow, no
  // overlap, unique names).
  Status readWeightIndex(const flatbuffers::Table &root, bool withWeights = true);

  const uint8_t *data() const { return file_.data(); }
  uint64_t size() const { return file_.size(); }
  // Where the size-prefixed flatbuffer ends.
  uint64_t metadataEnd() const { return metadataEnd_; }
  SchemaVersion schemaVersion() const { return schemaVersion_; }
  // Where the weight section starts in the file (the descriptors' offsets count from there).
  uint64_t weightSectionStart() const { return sectionStart_; }
  uint64_t weightSectionSize() const { return sectionSize_; }

  // In the order of the descriptors.
  const std::vector<WeightView> &weights() const { return weights_; }
  // nullptr when there is no weight called `name`.
  const WeightView *findWeight(std::string_view name) const;

  bool hasIntegrityHashes() const { return metadataHash_.has_value(); }
  // The metadata hash the writer recorded (0 without integrity hashes).
  uint64_t recordedMetadataHash() const { return metadataHash_ ? metadataHash_->recorded : 0; }

  // MappedFile::guardedRead over this file's mapping.
  Status guardedRead(const std::function<void()> &read) const { return file_.guardedRead(read); }

  // Recomputes the metadata's hash and every weight's (reading every byte), and describes each
  // section whose bytes no longer hash to what the writer recorded: "weight 'x' (bytes 4096 to
  // 36864) hashes to 0x..., dlmc recorded 0x...". Empty when nothing is damaged; an error when the
  // file cannot be read (it shrank meanwhile). Needs hasIntegrityHashes().
  StatusOr<std::vector<std::string>> damagedSections() const;

private:
  Status checkHeader();
  Status checkSchemaVersion();
  Status readMetadataHash(const flatbuffers::Table &root);
  Status checkWeightSection(const flatbuffers::Table &root);
  Status readWeights(const flatbuffers::Table &root);
  Status readWeight(const fb::Weight &from, size_t index, WeightView &weight) const;
  Status checkOverlaps() const;

  const ContainerFormat *format_ = nullptr;
  MappedFile file_;
  uint64_t metadataEnd_ = 0;
  SchemaVersion schemaVersion_;
  uint64_t sectionStart_ = 0;
  uint64_t sectionSize_ = 0;
  std::vector<WeightView> weights_;
  // Keys point into the mapping.
  std::unordered_map<std::string_view, size_t> weightIndex_;
  // The recorded metadata hash, the metadata's size and where the hash itself is stored.
  struct MetadataHash {
    uint64_t recorded = 0;
    uint64_t size = 0;
    uint64_t fieldOffset = 0;
  };
  std::optional<MetadataHash> metadataHash_;
};

// A weight's descriptor without its place: a non-empty name, the dtype, the shape (aligned in the
// mapping), the byte size (== shape x dtype) and the content hash. `index` names a nameless one.
Status readWeightDescriptor(const fb::Weight &from, size_t index, WeightView &weight);

// "0x%016x".
std::string hexHash(uint64_t value);

// Damage descriptions as one message: the first few, then how many more.
std::string listDamage(const std::vector<std::string> &damaged);

} // namespace dlm::artifact
