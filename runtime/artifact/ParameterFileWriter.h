// Writes a dlm parameter file (.dlmp, runtime/schema/parameters.fbs): weights and their index,
// apart from any program. dlmc writes one with `compile --parameters external`
// (ExternalParameters.h decides when).
#pragma once

#include "runtime/artifact/ContainerWriter.h"

#include <string>
#include <string_view>
#include <vector>

namespace dlm::artifact {

// What an artifact records of the parameter file its weights live in.
struct ParameterFileRecord {
  uint64_t weightSectionSize = 0;
  uint64_t metadataHash = 0;
};

// Writes `weights` at `layout` (layOutWeights(weights): their offsets and hashes) to `path`, by
// way of a temporary file beside it renamed over it once complete, so a failure leaves an existing
// file as it was. Checks the weights as writeArtifact does. Errors read
// "parameter file '<path>': <problem>".
StatusOr<ParameterFileRecord> writeParameterFile(const std::string &path,
                                                 std::string_view producer,
                                                 const std::vector<WeightSource> &weights,
                                                 const WeightLayout &layout);

} // namespace dlm::artifact
