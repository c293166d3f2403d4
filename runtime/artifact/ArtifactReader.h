// Opens a dlm artifact (layout: runtime/schema/artifact.fbs) for the runtime: maps it read-only
// (and the parameter file its weights live in, when they are not in it), verifies everything it
// indexes, and hands out views into the mappings; nothing is copied except the small config,
// program and kernel records.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/artifact/ContainerReader.h"
#include "runtime/artifact/ParameterFileReader.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlm::artifact {

// Schema 1.5: what an artifact records of the parameter file its weights live in.
struct ParameterFileRecordView {
  // As recorded (ParameterFilePath.h: relative to the artifact's directory, or absolute).
  std::string_view path;
  // The parameter file's weight section size and metadata hash when dlmc compiled the artifact.
  uint64_t weightSectionSize = 0;
  uint64_t metadataHash = 0;
  // Schema 1.6: the seed the weights' contents were generated with; kNoRandomSeed: a checkpoint's.
  int64_t randomSeed = kNoRandomSeed;
};

// Views stay valid while the reader (or the reader it was moved into) lives. The files must not be
// truncated or rewritten in place meanwhile; dlmc replaces files by rename, which leaves an open
// reader on the old contents.
class ArtifactReader {
public:
  // Maps `path` and checks it before anything is used: size, file identifier, schema version,
  // flatbuffer verification, then every weight (dtype known, byte size == shape x dtype, 64-byte
  // aligned, inside the weight section, no overflow, no overlap, unique names) and every kernel
  // record (unique names, aligned cubin). An artifact whose weights live in a parameter file
  // (schema 1.5) opens that file too (ParameterFilePath.h says where it is), checks it as it
  // would its own weights, and refuses it unless it holds every weight the artifact describes with
  // the same dtype, shape and content hash. Errors read "artifact '<path>': <problem>", and
  // "artifact '<path>': parameter file '<path>': <problem>" for the parameter file's.
  static StatusOr<ArtifactReader> open(const std::string &path);

  ArtifactReader(ArtifactReader &&other) noexcept;
  ArtifactReader &operator=(ArtifactReader &&other) noexcept;
  ArtifactReader(const ArtifactReader &) = delete;
  ArtifactReader &operator=(const ArtifactReader &) = delete;
  ~ArtifactReader();

  const std::string &path() const { return path_; }
  uint64_t fileSize() const { return container_.size(); }
  SchemaVersion schemaVersion() const { return container_.schemaVersion(); }
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
  const std::vector<WeightView> &weights() const {
    return parameterFile_ ? externalWeights_ : container_.weights();
  }
  // nullptr when there is no weight called `name`.
  const WeightView *findWeight(std::string_view name) const;
  // Like findWeight, with an error naming the artifact and the weight when it is missing.
  StatusOr<WeightView> weight(std::string_view name) const;

  // The parameter file the weights live in (schema 1.5), as recorded and as opened; nullopt and
  // nullptr when they live in the artifact.
  std::optional<ParameterFileRecordView> parameterFileRecord() const { return parameterRecord_; }
  const ParameterFileReader *parameterFile() const { return parameterFile_.get(); }
  // The seed the weights' contents were generated with (schema 1.6, `dlmc compile
  // --random-parameters`: what runs on them means nothing, only how fast it runs); nullopt when
  // they are a checkpoint's.
  std::optional<uint64_t> randomWeightSeed() const;

  // Runs `read`, which reads views of this artifact (its weights too, wherever they live),
  // turning the SIGBUS of a file truncated meanwhile into an error (MappedFile::guardedRead;
  // `read` must own nothing it would leak).
  Status guardedRead(const std::function<void()> &read) const;

  // Whether dlmc recorded integrity hashes (schema 1.4 and later).
  bool hasIntegrityHashes() const { return container_.hasIntegrityHashes(); }
  // Recomputes the hashes dlmc recorded, the metadata's and every weight's (reading every byte of
  // the file, and of the parameter file). Errors name each damaged section and where it lies
  // ("artifact 'm.dlm': damaged: weight 'layers.0.q' (bytes 4096 to 36864) hashes to 0x..., dlmc
  // recorded 0x..."; "artifact 'm.dlm': parameter file 'm.dlmp': damaged: ..."); an artifact
  // written before schema 1.4 has nothing to check, which is an error saying so.
  Status verifyIntegrity() const;

private:
  class Loader;
  ArtifactReader() = default;

  std::string path_;
  MappedContainer container_;
  std::optional<ParameterFileRecordView> parameterRecord_;
  // Null when the weights live in the artifact.
  std::unique_ptr<ParameterFileReader> parameterFile_;
  std::string_view producer_;
  ModelConfig config_;
  std::string_view tokenizerJson_;
  std::optional<std::string_view> chatTemplate_;
  Attributes chatSpecialTokens_;
  DecodingProgram program_;
  std::vector<DecodingProgram> decodePrograms_;
  std::vector<KernelTarget> kernelTargets_;
  // With a parameter file: the artifact's weights, its views, in the artifact's order.
  std::vector<WeightView> externalWeights_;
  // Keys point into the mappings.
  std::unordered_map<std::string_view, size_t> externalIndex_;
};

} // namespace dlm::artifact
