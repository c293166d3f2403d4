#include "runtime/artifact/ParameterFileWriter.h"

#include <algorithm>

namespace dlm::artifact {
namespace {

// The root table, sealed (ContainerWriter.h's sealMetadata); returns the weight section's start.
uint64_t buildMetadata(flatbuffers::FlatBufferBuilder &builder, std::string_view producer,
                       const std::vector<WeightSource> &weights, const WeightLayout &layout) {
  // Every scalar stored, so that sealing can patch the section's start and the hash in place.
  builder.ForceDefaults(true);
  auto producerText = builder.CreateString(producer.data(), producer.size());
  auto index = createWeightIndex(builder, weights, layout.placements);
  const fb::SchemaVersion version(kParameterSchemaMajor, kParameterSchemaMinor);
  auto root = fb::CreateParameterArchive(builder, &version, producerText, index,
                                         /*weight_section_offset=*/0, layout.sectionSize,
                                         /*metadata_hash=*/0);
  fb::FinishSizePrefixedParameterArchiveBuffer(builder, root);
  return sealMetadata(builder, kParameterFileContainer);
}

StatusOr<ParameterFileRecord> writeFile(const std::string &path, std::string_view producer,
                                        const std::vector<WeightSource> &weights,
                                        const WeightLayout &layout) {
  DLM_RETURN_IF_ERROR(checkWeightSources(weights));
  if (layout.placements.size() != weights.size())
    return Status::error("the layout places " + std::to_string(layout.placements.size()) +
                         " weights but there are " + std::to_string(weights.size()));
  const uint64_t estimate = 4096 + producer.size() + estimateWeightIndexBytes(weights);
  DLM_RETURN_IF_ERROR(checkMetadataEstimate(estimate));
  flatbuffers::FlatBufferBuilder builder(
      static_cast<size_t>(std::min<uint64_t>(estimate, uint64_t{64} << 20)));
  const uint64_t sectionStart = buildMetadata(builder, producer, weights, layout);
  DLM_RETURN_IF_ERROR(writeContainerFile(path, builder, sectionStart, weights, layout.placements));
  const fb::ParameterArchive *root =
      fb::GetSizePrefixedParameterArchive(builder.GetBufferPointer());
  return ParameterFileRecord{layout.sectionSize, root->metadata_hash()};
}

} // namespace

StatusOr<ParameterFileRecord> writeParameterFile(const std::string &path,
                                                 std::string_view producer,
                                                 const std::vector<WeightSource> &weights,
                                                 const WeightLayout &layout) {
  StatusOr<ParameterFileRecord> record = writeFile(path, producer, weights, layout);
  if (!record)
    return record.status().withContext("parameter file '" + path + "'");
  return record;
}

} // namespace dlm::artifact
