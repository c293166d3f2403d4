#include "runtime/artifact/ExternalWeightIndex.h"

#include "runtime/artifact/ContainerReader.h"
#include "runtime/artifact/ParameterFilePath.h"

namespace dlm::artifact {
namespace {

std::string text(const flatbuffers::String *value) {
  return value ? std::string(value->c_str(), value->size()) : std::string();
}

// Each descriptor as a WeightSource without data, and its place in the parameter file.
Status readDescriptors(const fb::Artifact &root, ExternalWeightIndex &index) {
  const auto *descriptors = root.weights();
  if (!descriptors)
    return Status::ok();
  for (flatbuffers::uoffset_t i = 0; i < descriptors->size(); ++i) {
    const fb::Weight &descriptor = *descriptors->Get(i);
    WeightView view;
    DLM_RETURN_IF_ERROR(readWeightDescriptor(descriptor, i, view));
    index.weights.push_back(
        {std::string(view.name), view.dtype, view.shape.toVector(), nullptr, view.size});
    index.layout.placements.push_back({descriptor.offset(), view.contentHash});
  }
  // The artifact's descriptors may share names no more than a parameter file's may.
  return checkWeightDescriptors(index.weights);
}

Status readIndex(const std::string &path, ExternalWeightIndex &index) {
  MappedContainer container;
  DLM_RETURN_IF_ERROR(container.open(path, kArtifactContainer));
  flatbuffers::Verifier verifier(container.data(), container.metadataEnd());
  if (!fb::VerifySizePrefixedArtifactBuffer(verifier))
    return Status::error("corrupt metadata: the flatbuffer (bytes 0 to " +
                         std::to_string(container.metadataEnd()) + ") failed verification");
  const fb::Artifact &root = *fb::GetSizePrefixedArtifact(container.data());
  const fb::ExternalParameters *parameters = root.parameters();
  if (!parameters)
    return Status::error("its weights are in it, not in a parameter file (dlmc compile "
                         "--parameters external puts them in one)");
  DLM_RETURN_IF_ERROR(container.readWeightIndex(
      *reinterpret_cast<const flatbuffers::Table *>(&root), /*withWeights=*/false));
  index.producer = text(root.producer());
  index.recordedPath = text(parameters->path());
  if (index.recordedPath.empty())
    return Status::error("corrupt metadata: the parameter file's path is empty");
  index.path = resolveParameterFilePath(path, index.recordedPath);
  index.metadataHash = parameters->metadata_hash();
  index.randomSeed = parameters->random_seed();
  index.layout.sectionSize = parameters->weight_section_size();
  DLM_RETURN_IF_ERROR(readDescriptors(root, index));
  return checkWeightLayout(index.weights, index.layout);
}

} // namespace

StatusOr<ExternalWeightIndex> readExternalWeightIndex(const std::string &path) {
  ExternalWeightIndex index;
  index.artifactPath = path;
  if (Status read = readIndex(path, index); !read)
    return read.withContext("artifact '" + path + "'");
  return index;
}

} // namespace dlm::artifact
