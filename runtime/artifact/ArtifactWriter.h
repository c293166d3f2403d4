// Writes a dlm artifact (layout: runtime/schema/artifact.fbs). Used by the dlmc compiler.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::artifact {

// A weight whose bytes are already in memory, typically in an mmapped safetensors file. The
// writer streams them straight to the artifact, so they are never copied into a second buffer.
struct WeightSource {
  std::string name;
  DType dtype = DType::invalid;
  std::vector<int64_t> shape;
  // Must stay valid until writeArtifact returns; may be null when size is 0.
  const void *data = nullptr;
  // Must equal product(shape) * dtypeSize(dtype).
  uint64_t size = 0;
};

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

// Checks `contents` (unique non-empty names, weight sizes matching shape x dtype, metadata within
// the 2 GiB flatbuffer limit), then writes the artifact to a temporary file next to `path` and
// renames it over `path` once it is complete and synced, so a failure never leaves a partial
// artifact at `path` (an existing file there stays as it was). Errors name the file, the item
// and, for I/O errors, the system's reason.
Status writeArtifact(const std::string &path, const ArtifactContents &contents);

} // namespace dlm::artifact
