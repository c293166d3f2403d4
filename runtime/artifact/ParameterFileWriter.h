// Writes a dlm parameter file (.dlmp, runtime/schema/parameters.fbs): weights and their index,
// apart from any program. dlmc writes one with `compile --parameters external`
// (ExternalParameters.h decides when); dlm-params writes one of generated weights
// (RandomParameterFile.h).
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

// The same for weights whose bytes come from `bytes` as they are written (their data are not
// read), recording `randomSeed` (kNoRandomSeed: none). `layout` may come from a file: it is
// checked (checkWeightLayout) first.
StatusOr<ParameterFileRecord> writeParameterFile(const std::string &path,
                                                 std::string_view producer,
                                                 const std::vector<WeightSource> &weights,
                                                 const WeightLayout &layout, int64_t randomSeed,
                                                 const WeightBytes &bytes);

// The record of the parameter file the call above would write, without writing it (its metadata
// is built and hashed): what dlmc records in an artifact whose parameter file another program
// writes later.
StatusOr<ParameterFileRecord> describeParameterFile(std::string_view producer,
                                                    const std::vector<WeightSource> &weights,
                                                    const WeightLayout &layout,
                                                    int64_t randomSeed);

} // namespace dlm::artifact
