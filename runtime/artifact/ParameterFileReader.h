// Opens a dlm parameter file (.dlmp, runtime/schema/parameters.fbs): maps it read-only, verifies
// it as ArtifactReader verifies an artifact's weight index, and hands out views into the mapping.
// ArtifactReader opens the parameter file an artifact names through it; dlmc inspect lists one.
#pragma once

#include "runtime/artifact/ContainerReader.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::artifact {

// Views stay valid while the reader (or the reader it was moved into) lives; like an artifact,
// the file must not be truncated or rewritten in place meanwhile (dlmc replaces it by rename).
class ParameterFileReader {
public:
  // Maps `path` and checks it before anything is used: size, file identifier, schema version,
  // flatbuffer verification, the weight section and every weight descriptor. Errors read
  // "parameter file '<path>': <problem>".
  static StatusOr<ParameterFileReader> open(const std::string &path);

  const std::string &path() const { return path_; }
  uint64_t fileSize() const { return container_.size(); }
  SchemaVersion schemaVersion() const { return container_.schemaVersion(); }
  std::string_view producer() const { return producer_; }
  uint64_t weightSectionStart() const { return container_.weightSectionStart(); }
  uint64_t weightSectionSize() const { return container_.weightSectionSize(); }
  // The metadata hash the writer recorded: which version of the file this is.
  uint64_t metadataHash() const { return container_.recordedMetadataHash(); }
  // The seed the weights' contents were generated with (schema 1.1, dlm-params random);
  // kNoRandomSeed: a checkpoint's weights.
  int64_t randomSeed() const { return randomSeed_; }

  // In the order the writer was given them.
  const std::vector<WeightView> &weights() const { return container_.weights(); }
  // nullptr when there is no weight called `name`.
  const WeightView *findWeight(std::string_view name) const {
    return container_.findWeight(name);
  }

  // MappedFile::guardedRead over this file's mapping, errors in this file's name.
  Status guardedRead(const std::function<void()> &read) const;

  // Recomputes the metadata's hash and every weight's; errors name each damaged section
  // ("parameter file 'm.dlmp': damaged: weight 'layers.0.q' (bytes 4096 to 36864) hashes to
  // 0x..., dlmc recorded 0x...").
  Status verifyIntegrity() const;

private:
  ParameterFileReader() = default;
  Status load();

  std::string path_;
  MappedContainer container_;
  std::string_view producer_;
  int64_t randomSeed_ = kNoRandomSeed;
};

// Whether the file at `path` carries the parameter file's identifier (whatever else it holds):
// dlmc inspect lists such a file as a parameter file, and dlmc overwrites no other kind of file
// with one.
bool hasParameterFileIdentifier(const std::string &path);

} // namespace dlm::artifact
