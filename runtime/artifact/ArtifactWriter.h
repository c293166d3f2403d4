// Writes a dlm artifact (layout: runtime/schema/artifact.fbs), its weights inside it or in a
// parameter file. Used by the dlmc compiler.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/artifact/ContainerWriter.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::artifact {

// Everything an artifact holds. Views (tokenizer, MLIR, cubins, PTX, weight bytes) must stay
// valid until writeArtifact returns.
struct ArtifactContents {
  // Who wrote the file, e.g. "dlmc 0.1"; shown in diagnostics.
  std::string producer;
  ModelConfig config;
  // tokenizer.json exactly as the checkpoint shipped it.
  std::string_view tokenizerJson;
  // The chat template as the checkpoint shipped it, if it has one (schema 1.3).
  std::optional<std::string_view> chatTemplate;
  // The special tokens the template sees as variables (bos_token, eos_token, ...), as text.
  Attributes chatSpecialTokens;
  DecodingProgram program;
  // The decode programs a request can select by policy name, the default first (schema 1.2).
  std::vector<DecodingProgram> decodePrograms;
  std::vector<KernelTarget> kernelTargets;
  // Written in this order, each at the next 64-byte boundary of the weight section.
  std::vector<WeightSource> weights;
};

// Schema 1.5: the parameter file an artifact's weights live in (ParameterFileWriter.h writes it,
// ExternalParameters.h decides whether to).
struct ParameterFileReference {
  // As the artifact records it: relative to the artifact's directory, or absolute
  // (ParameterFilePath.h).
  std::string path;
  // The parameter file's weight section size and metadata hash.
  uint64_t weightSectionSize = 0;
  uint64_t metadataHash = 0;
  // Where each of ArtifactContents::weights lies in the parameter file, in the same order.
  std::vector<WeightPlacement> placements;
  // Schema 1.6: the seed the weights' contents are generated with (RandomParameters.h), whose
  // hashes the placements hold; kNoRandomSeed: the checkpoint's weights.
  int64_t randomSeed = kNoRandomSeed;
};

// Checks `contents` (unique non-empty names, weight sizes matching shape x dtype, metadata within
// the 2 GiB flatbuffer limit), then writes the artifact to a temporary file next to `path` and
// renames it over `path` once it is complete and synced, so a failure never leaves a partial
// artifact at `path` (an existing file there stays as it was). Errors name the file, the item
// and, for I/O errors, the system's reason.
Status writeArtifact(const std::string &path, const ArtifactContents &contents);

// The same, but with the weights' descriptors only: their bytes are in `parameters`' file, and
// the artifact's weight section is empty.
Status writeArtifact(const std::string &path, const ArtifactContents &contents,
                     const ParameterFileReference &parameters);

} // namespace dlm::artifact
