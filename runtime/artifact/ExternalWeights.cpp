#include "runtime/artifact/ExternalWeights.h"

namespace dlm::artifact {
namespace {

std::string inQuotes(std::string_view text) { return "'" + std::string(text) + "'"; }

std::string describe(DType dtype, ShapeView shape) {
  return std::string(dtypeName(dtype)) + " " + shape.toString();
}

// Whether `held`, the parameter file's weight of that name, is the weight `needed` describes.
Status checkSameWeight(const WeightView &needed, const WeightView &held,
                       const ParameterFileReader &file) {
  const std::string where = "parameter file " + inQuotes(file.path()) + ": weight " +
                            inQuotes(needed.name);
  if (held.dtype != needed.dtype || held.shape.toVector() != needed.shape.toVector())
    return Status::error(where + " is " + describe(held.dtype, held.shape) + " there but " +
                         describe(needed.dtype, needed.shape) + " in the artifact");
  if (held.contentHash != needed.contentHash)
    return Status::error(where + " has content hash " + hexHash(held.contentHash) +
                         " there but " + hexHash(needed.contentHash) +
                         " in the artifact: the parameter file was written for another "
                         "checkpoint or conversion");
  return Status::ok();
}

} // namespace

Status bindExternalWeights(
    const flatbuffers::Vector<flatbuffers::Offset<fb::Weight>> *descriptors,
    const ParameterFileReader &file, std::vector<WeightView> &views,
    std::unordered_map<std::string_view, size_t> &index) {
  if (!descriptors)
    return Status::ok();
  views.reserve(descriptors->size());
  for (size_t i = 0; i < descriptors->size(); ++i) {
    WeightView needed;
    DLM_RETURN_IF_ERROR(
        readWeightDescriptor(*descriptors->Get(static_cast<flatbuffers::uoffset_t>(i)), i, needed));
    if (!index.emplace(needed.name, views.size()).second)
      return Status::error("weight " + inQuotes(needed.name) + " appears twice");
    const WeightView *held = file.findWeight(needed.name);
    if (!held)
      return Status::error("parameter file " + inQuotes(file.path()) + " has no weight " +
                           inQuotes(needed.name) + ", which the artifact needs");
    DLM_RETURN_IF_ERROR(checkSameWeight(needed, *held, file));
    views.push_back(*held);
  }
  return Status::ok();
}

} // namespace dlm::artifact
