#include "runtime/artifact/ParameterFileWriter.h"

#include <algorithm>
#include <memory>

namespace dlm::artifact {
namespace {

// The sealed metadata of a parameter file (ContainerWriter.h's sealMetadata) and where its
// weight section starts.
struct Metadata {
  std::unique_ptr<flatbuffers::FlatBufferBuilder> builder;
  uint64_t sectionStart = 0;

  ParameterFileRecord record(const WeightLayout &layout) const {
    const fb::ParameterArchive *root =
        fb::GetSizePrefixedParameterArchive(builder->GetBufferPointer());
    return ParameterFileRecord{layout.sectionSize, root->metadata_hash()};
  }
};

// The root table, sealed. The weights' descriptors and the layout must have been checked.
StatusOr<Metadata> buildMetadata(std::string_view producer,
                                 const std::vector<WeightSource> &weights,
                                 const WeightLayout &layout, int64_t randomSeed) {
  const uint64_t estimate = 4096 + producer.size() + estimateWeightIndexBytes(weights);
  DLM_RETURN_IF_ERROR(checkMetadataEstimate(estimate));
  Metadata metadata;
  metadata.builder = std::make_unique<flatbuffers::FlatBufferBuilder>(
      static_cast<size_t>(std::min<uint64_t>(estimate, uint64_t{64} << 20)));
  flatbuffers::FlatBufferBuilder &builder = *metadata.builder;
  // Every scalar stored, so that sealing can patch the section's start and the hash in place.
  builder.ForceDefaults(true);
  auto producerText = builder.CreateString(producer.data(), producer.size());
  auto index = createWeightIndex(builder, weights, layout.placements);
  const fb::SchemaVersion version(kParameterSchemaMajor, kParameterSchemaMinor);
  auto root = fb::CreateParameterArchive(builder, &version, producerText, index,
                                         /*weight_section_offset=*/0, layout.sectionSize,
                                         /*metadata_hash=*/0, randomSeed);
  fb::FinishSizePrefixedParameterArchiveBuffer(builder, root);
  metadata.sectionStart = sealMetadata(builder, kParameterFileContainer);
  return metadata;
}

StatusOr<Metadata> checkAndBuild(std::string_view producer,
                                 const std::vector<WeightSource> &weights,
                                 const WeightLayout &layout, int64_t randomSeed) {
  DLM_RETURN_IF_ERROR(checkWeightDescriptors(weights));
  DLM_RETURN_IF_ERROR(checkWeightLayout(weights, layout));
  return buildMetadata(producer, weights, layout, randomSeed);
}

StatusOr<ParameterFileRecord> writeFile(const std::string &path, std::string_view producer,
                                        const std::vector<WeightSource> &weights,
                                        const WeightLayout &layout, int64_t randomSeed,
                                        const WeightBytes &bytes) {
  DLM_ASSIGN_OR_RETURN(Metadata metadata, checkAndBuild(producer, weights, layout, randomSeed));
  DLM_RETURN_IF_ERROR(writeContainerFile(path, *metadata.builder, metadata.sectionStart, weights,
                                         layout.placements, bytes));
  return metadata.record(layout);
}

} // namespace

StatusOr<ParameterFileRecord> writeParameterFile(const std::string &path,
                                                 std::string_view producer,
                                                 const std::vector<WeightSource> &weights,
                                                 const WeightLayout &layout) {
  if (Status sources = checkWeightSources(weights); !sources)
    return sources.withContext("parameter file '" + path + "'");
  return writeParameterFile(path, producer, weights, layout, kNoRandomSeed,
                            [&weights](size_t index, const ByteSink &sink) {
                              const WeightSource &weight = weights[index];
                              return sink(weight.data, static_cast<size_t>(weight.size));
                            });
}

StatusOr<ParameterFileRecord> writeParameterFile(const std::string &path,
                                                 std::string_view producer,
                                                 const std::vector<WeightSource> &weights,
                                                 const WeightLayout &layout, int64_t randomSeed,
                                                 const WeightBytes &bytes) {
  StatusOr<ParameterFileRecord> record =
      writeFile(path, producer, weights, layout, randomSeed, bytes);
  if (!record)
    return record.status().withContext("parameter file '" + path + "'");
  return record;
}

StatusOr<ParameterFileRecord> describeParameterFile(std::string_view producer,
                                                    const std::vector<WeightSource> &weights,
                                                    const WeightLayout &layout,
                                                    int64_t randomSeed) {
  DLM_ASSIGN_OR_RETURN(Metadata metadata, checkAndBuild(producer, weights, layout, randomSeed));
  return metadata.record(layout);
}

} // namespace dlm::artifact
