#include "runtime/artifact/RandomParameterFile.h"

#include "runtime/artifact/ContainerReader.h"
#include "runtime/artifact/ParameterFilePath.h"
#include "runtime/artifact/ParameterFileReader.h"
#include "runtime/artifact/RandomParameters.h"

#include <filesystem>

namespace dlm::artifact {
namespace {

// The content hash of each weight as `generator` makes it.
StatusOr<std::vector<uint64_t>> generatedHashes(RandomParameters &generator,
                                                const std::vector<WeightSource> &weights) {
  std::vector<uint64_t> hashes;
  hashes.reserve(weights.size());
  for (const WeightSource &weight : weights) {
    DLM_ASSIGN_OR_RETURN(uint64_t hash,
                         generator.contentHash(weight.name, weight.dtype, ShapeView(weight.shape)));
    hashes.push_back(hash);
  }
  return hashes;
}

// An error unless every weight generates to the hash the artifact recorded for it.
Status checkRecordedHashes(RandomParameters &generator, const ExternalWeightIndex &index) {
  DLM_ASSIGN_OR_RETURN(std::vector<uint64_t> hashes, generatedHashes(generator, index.weights));
  for (size_t i = 0; i < hashes.size(); ++i)
    if (hashes[i] != index.layout.placements[i].contentHash)
      return Status::error("weight " + quotedName(index.weights[i].name) + " generates to hash " +
                           hexHash(hashes[i]) + " but the artifact records " +
                           hexHash(index.layout.placements[i].contentHash) +
                           ": the dlmc that compiled it generates other contents than this "
                           "program (build them from the same source)");
  return Status::ok();
}

// What may be at `path`: nothing, or a parameter file to replace; never the artifact, nor
// another kind of file.
Status checkDestination(const std::string &path, const ExternalWeightIndex &index) {
  if (sameFilePath(path, index.artifactPath))
    return Status::error(quotedName(path) + " is the artifact itself");
  std::error_code error;
  if (std::filesystem::exists(std::filesystem::symlink_status(path, error)) &&
      !hasParameterFileIdentifier(path))
    return Status::error(quotedName(path) + " is there but is not a dlm parameter file (or cannot "
                         "be read): no other file is overwritten with one; remove it or write "
                         "elsewhere");
  return Status::ok();
}

} // namespace

std::string randomParameterFileProducer(std::string_view artifactProducer) {
  return std::string(artifactProducer) + " (random parameters)";
}

StatusOr<RandomParameterPlan> planRandomParameterFile(std::string_view artifactProducer,
                                                      const std::vector<WeightSource> &weights,
                                                      uint64_t seed) {
  RandomParameters generator(seed);
  DLM_ASSIGN_OR_RETURN(std::vector<uint64_t> hashes, generatedHashes(generator, weights));
  RandomParameterPlan plan;
  DLM_ASSIGN_OR_RETURN(plan.layout, layOutWeights(weights, hashes));
  DLM_ASSIGN_OR_RETURN(plan.record,
                       describeParameterFile(randomParameterFileProducer(artifactProducer),
                                             weights, plan.layout, static_cast<int64_t>(seed)));
  return plan;
}

StatusOr<RandomParameterFileOutcome> writeRandomParameterFile(const std::string &path,
                                                              const ExternalWeightIndex &index) {
  if (index.randomSeed < 0)
    return Status::error("artifact " + quotedName(index.artifactPath) +
                         " records no random seed: its weights are a checkpoint's (dlmc compile "
                         "--parameters external --random-parameters SEED makes an artifact of "
                         "generated weights)");
  DLM_RETURN_IF_ERROR(checkDestination(path, index));
  RandomParameters generator(static_cast<uint64_t>(index.randomSeed));
  DLM_RETURN_IF_ERROR(checkRecordedHashes(generator, index)
                          .withContext("artifact " + quotedName(index.artifactPath)));
  const std::vector<WeightSource> &weights = index.weights;
  StatusOr<ParameterFileRecord> record = writeParameterFile(
      path, randomParameterFileProducer(index.producer), weights, index.layout, index.randomSeed,
      [&](size_t i, const ByteSink &sink) {
        return generator.generate(weights[i].name, weights[i].dtype, ShapeView(weights[i].shape),
                                  [&sink](const uint8_t *data, size_t size) {
                                    return sink(data, size);
                                  });
      });
  if (!record)
    return record.status();
  RandomParameterFileOutcome outcome;
  outcome.weightCount = weights.size();
  std::error_code error;
  outcome.fileSize = std::filesystem::file_size(path, error);
  outcome.metadataAsRecorded = record->metadataHash == index.metadataHash;
  return outcome;
}

} // namespace dlm::artifact
