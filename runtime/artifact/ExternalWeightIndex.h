// What an artifact whose weights live in a parameter file (schema 1.5) says of that file, read
// from the artifact alone: the file need not exist. dlm-params random reads it to write the file
// an artifact compiled with `dlmc compile --random-parameters` names (RandomParameterFile.h).
#pragma once

#include "runtime/artifact/ContainerWriter.h"

#include <string>
#include <vector>

namespace dlm::artifact {

struct ExternalWeightIndex {
  std::string artifactPath;
  // The artifact's producer ("dlmc 0.1").
  std::string producer;
  // The parameter file as the artifact records it, and where that is (ParameterFilePath.h).
  std::string recordedPath;
  std::string path;
  // The parameter file's metadata hash dlmc recorded.
  uint64_t metadataHash = 0;
  // The seed dlmc generated the weights' contents with (schema 1.6); kNoRandomSeed: they are a
  // checkpoint's.
  int64_t randomSeed = kNoRandomSeed;
  // The weights' descriptors in the artifact's order (no data), their places in the parameter
  // file's weight section with their recorded content hashes, and that section's size.
  std::vector<WeightSource> weights;
  WeightLayout layout;
};

// Maps the artifact at `path` and checks it as ArtifactReader does up to its weights: size,
// identifier, schema version, flatbuffer verification, then every descriptor and its place
// (checkWeightLayout). Errors read "artifact '<path>': <problem>"; an artifact holding its own
// weights is one ("its weights are in it, not in a parameter file").
StatusOr<ExternalWeightIndex> readExternalWeightIndex(const std::string &path);

} // namespace dlm::artifact
