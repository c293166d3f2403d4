#include "runtime/artifact/ExternalParameters.h"

#include "runtime/artifact/ParameterFilePath.h"
#include "runtime/artifact/ParameterFileReader.h"
#include "runtime/artifact/ParameterFileWriter.h"
#include "runtime/artifact/RandomParameterFile.h"

#include <filesystem>
#include <optional>

namespace dlm::artifact {
namespace {

// The parameter file already at `path`, if there is one that can be read; when there is one that
// cannot, `whyNot` says why. An error when the file there is not a parameter file at all: dlmc
// overwrites no other kind of file with one.
StatusOr<std::optional<ParameterFileReader>> openExisting(const std::string &path,
                                                          std::string &whyNot) {
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, error)))
    return std::optional<ParameterFileReader>();
  if (!hasParameterFileIdentifier(path))
    return Status::error(quotedName(path) + " is there but is not a dlm parameter file (or cannot be "
                         "read): dlmc overwrites no other file with one; remove it or give "
                         "another --parameter-file");
  StatusOr<ParameterFileReader> reader = ParameterFileReader::open(path);
  if (!reader) {
    whyNot = "it cannot be read: " + reader.status().message();
    return std::optional<ParameterFileReader>();
  }
  return std::optional<ParameterFileReader>(std::move(*reader));
}

// Why `file` cannot serve `weights` (hashed in `layout`) as it is; empty when it holds each of
// them with the same name, dtype, shape and content hash and its bytes still hash as recorded.
std::string whyStale(const ParameterFileReader &file, const std::vector<WeightSource> &weights,
                     const WeightLayout &layout) {
  for (size_t i = 0; i < weights.size(); ++i) {
    const WeightSource &weight = weights[i];
    const WeightView *held = file.findWeight(weight.name);
    if (!held)
      return "it lacks weight " + quotedName(weight.name);
    const ShapeView shape(weight.shape);
    if (held->dtype != weight.dtype || held->shape.toVector() != weight.shape)
      return "weight " + quotedName(weight.name) + " is " + tensorDescription(held->dtype, held->shape) +
             " there, " + tensorDescription(weight.dtype, shape) + " now";
    if (held->contentHash != layout.placements[i].contentHash)
      return "weight " + quotedName(weight.name) + " holds other values";
  }
  if (Status verified = file.verifyIntegrity(); !verified)
    return "it is damaged: " + verified.message();
  return "";
}

// `layout`'s placements moved to where `file` holds each weight.
std::vector<WeightPlacement> placementsIn(const ParameterFileReader &file,
                                          const std::vector<WeightSource> &weights,
                                          const WeightLayout &layout) {
  std::vector<WeightPlacement> placements = layout.placements;
  for (size_t i = 0; i < weights.size(); ++i)
    placements[i].offset = file.findWeight(weights[i].name)->fileOffset - file.weightSectionStart();
  return placements;
}

// Writes or keeps the parameter file at `path` for `contents`' weights; fills in `reference`
// (all but its path) and `outcome`.
Status provideParameterFile(const std::string &path, const ArtifactContents &contents,
                            ParameterFileReference &reference, ParameterFileOutcome &outcome) {
  StatusOr<WeightLayout> layout = layOutWeights(contents.weights);
  if (!layout)
    return layout.status().withContext("parameter file " + quotedName(path));
  outcome.weightCount = contents.weights.size();
  std::string whyNot;
  {
    StatusOr<std::optional<ParameterFileReader>> existing = openExisting(path, whyNot);
    if (!existing)
      return existing.status();
    if (*existing) {
      const ParameterFileReader &file = **existing;
      whyNot = whyStale(file, contents.weights, *layout);
      if (whyNot.empty()) {
        reference.placements = placementsIn(file, contents.weights, *layout);
        reference.weightSectionSize = file.weightSectionSize();
        reference.metadataHash = file.metadataHash();
        outcome.fileSize = file.fileSize();
        return Status::ok();
      }
    }
  } // the existing file unmapped before it is replaced
  StatusOr<ParameterFileRecord> record =
      writeParameterFile(path, contents.producer, contents.weights, *layout);
  if (!record)
    return record.status();
  reference.placements = std::move(layout->placements);
  reference.weightSectionSize = record->weightSectionSize;
  reference.metadataHash = record->metadataHash;
  outcome.written = true;
  outcome.rewriteReason = whyNot;
  std::error_code error;
  outcome.fileSize = std::filesystem::file_size(path, error);
  return Status::ok();
}

Status checkApart(const std::string &artifactPath, const std::string &parameterPath) {
  if (sameFilePath(artifactPath, parameterPath))
    return Status::error("the parameter file " + quotedName(parameterPath) +
                         " is the artifact itself: give another --parameter-file");
  return Status::ok();
}

} // namespace

StatusOr<ParameterFileOutcome> writeArtifactWithParameterFile(const std::string &artifactPath,
                                                              const std::string &parameterPath,
                                                              const ArtifactContents &contents) {
  DLM_RETURN_IF_ERROR(checkApart(artifactPath, parameterPath));
  ParameterFileReference reference;
  reference.path = recordedParameterFilePath(artifactPath, parameterPath);
  ParameterFileOutcome outcome;
  DLM_RETURN_IF_ERROR(provideParameterFile(parameterPath, contents, reference, outcome));
  DLM_RETURN_IF_ERROR(writeArtifact(artifactPath, contents, reference));
  return outcome;
}

Status writeArtifactWithRandomParameters(const std::string &artifactPath,
                                         const std::string &parameterPath,
                                         const ArtifactContents &contents, uint64_t seed) {
  DLM_RETURN_IF_ERROR(checkApart(artifactPath, parameterPath));
  StatusOr<RandomParameterPlan> plan =
      planRandomParameterFile(contents.producer, contents.weights, seed);
  if (!plan)
    return plan.status().withContext("random parameters");
  ParameterFileReference reference;
  reference.path = recordedParameterFilePath(artifactPath, parameterPath);
  reference.weightSectionSize = plan->record.weightSectionSize;
  reference.metadataHash = plan->record.metadataHash;
  reference.placements = std::move(plan->layout.placements);
  reference.randomSeed = static_cast<int64_t>(seed);
  return writeArtifact(artifactPath, contents, reference);
}

} // namespace dlm::artifact
