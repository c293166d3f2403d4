// Opens a dlm artifact (layout: runtime/schema/artifact.fbs) for the runtime: maps it read-only,
// verifies everything it indexes, and hands out views into the mapping; nothing is copied except
// the small config, program and kernel records.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/MappedFile.h"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlm::artifact {

// A weight's descriptor and bytes, pointing into the reader's mapping.
struct WeightView {
  std::string_view name;
  DType dtype = DType::invalid;
  ShapeView shape;
  // 64-byte aligned in memory.
  const void *data = nullptr;
  uint64_t size = 0;
  // Where the bytes sit in the file, for diagnostics.
  uint64_t fileOffset = 0;
  // XXH3-64 of the bytes as dlmc wrote them (0 before schema 1.4, which recorded none).
  uint64_t contentHash = 0;
};

// Views stay valid while the reader (or the reader it was moved into) lives. The file must not be
// truncated or rewritten in place meanwhile; writeArtifact replaces files by rename, which leaves
// an open reader on the old contents.
class ArtifactReader {
public:
  // Maps `path` and checks it before anything is used: size, file identifier, schema version,
  // flatbuffer verification, then every weight (dtype known, byte size == shape x dtype, 64-byte
  // aligned, inside the weight section, no overflow, no overlap, unique names) and every kernel
  // record (unique names, aligned cubin). Errors read "artifact '<path>': <problem>".
  static StatusOr<ArtifactReader> open(const std::string &path);

  ArtifactReader(ArtifactReader &&other) noexcept;
  ArtifactReader &operator=(ArtifactReader &&other) noexcept;
  ArtifactReader(const ArtifactReader &) = delete;
  ArtifactReader &operator=(const ArtifactReader &) = delete;
  ~ArtifactReader();

  const std::string &path() const { return path_; }
  uint64_t fileSize() const { return file_.size(); }
  SchemaVersion schemaVersion() const { return schemaVersion_; }
  std::string_view producer() const { return producer_; }

  const ModelConfig &config() const { return config_; }
  // tokenizer.json as the checkpoint shipped it; empty if the artifact has none.
  std::string_view tokenizerJson() const { return tokenizerJson_; }
  // The checkpoint's chat template; nullopt when it had none (and before schema 1.3).
  std::optional<std::string_view> chatTemplate() const { return chatTemplate_; }
  // The special tokens the template sees as variables (bos_token, ...), as text attributes.
  const Attributes &chatSpecialTokens() const { return chatSpecialTokens_; }
  const DecodingProgram &program() const { return program_; }
  // The decode programs, the default first (empty before schema 1.2).
  const std::vector<DecodingProgram> &decodePrograms() const { return decodePrograms_; }

  const std::vector<KernelTarget> &kernelTargets() const { return kernelTargets_; }
  // nullptr when the artifact has no kernels for `target` ("sm_90", "cpu", ...).
  const KernelTarget *findKernelTarget(std::string_view target) const;

  // In the order the writer was given them.
  const std::vector<WeightView> &weights() const { return weights_; }
  // nullptr when there is no weight called `name`.
  const WeightView *findWeight(std::string_view name) const;
  // Like findWeight, with an error naming the artifact and the weight when it is missing.
  StatusOr<WeightView> weight(std::string_view name) const;

  // Runs `read`, which reads views of this artifact, turning the SIGBUS of a file truncated
  // meanwhile into an error (MappedFile::guardedRead; `read` must own nothing it would leak).
  Status guardedRead(const std::function<void()> &read) const;

  // Whether dlmc recorded integrity hashes (schema 1.4 and later).
  bool hasIntegrityHashes() const { return metadataHash_.has_value(); }
  // Recomputes the hashes dlmc recorded, the metadata's and every weight's (reading every byte of
  // the file). Errors name each damaged section and where it lies ("artifact 'm.dlm': damaged:
  // weight 'layers.0.q' (bytes 4096 to 36864) hashes to 0x..., dlmc recorded 0x..."); an
  // artifact written before schema 1.4 has nothing to check, which is an error saying so.
  Status verifyIntegrity() const;

private:
  class Loader;
  ArtifactReader() = default;

  std::string path_;
  MappedFile file_;
  SchemaVersion schemaVersion_;
  std::string_view producer_;
  ModelConfig config_;
  std::string_view tokenizerJson_;
  std::optional<std::string_view> chatTemplate_;
  Attributes chatSpecialTokens_;
  DecodingProgram program_;
  std::vector<DecodingProgram> decodePrograms_;
  std::vector<KernelTarget> kernelTargets_;
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

} // namespace dlm::artifact
