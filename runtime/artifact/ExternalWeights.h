// The weights of an artifact whose bytes live in a parameter file (schema 1.5): each descriptor
// the artifact records, matched by name against the parameter file's own index. The parameter
// file's offsets decide where the bytes are, so a file rewritten with the same tensors in
// another order still serves; anything else that differs refuses the file by name.
#pragma once

#include "runtime/artifact/ContainerReader.h"
#include "runtime/artifact/ParameterFileReader.h"

#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlm::artifact {

// Checks every descriptor in `descriptors` (the artifact's weights: a non-empty unique name,
// byte size == shape x dtype) and finds it in `file`, which must hold it with the same dtype,
// shape and content hash. Fills `views` (pointing into `file`'s mapping, in the artifact's order)
// and `index` (name -> position in `views`). Errors about the parameter file start with
// "parameter file '<path>': "; a content hash that differs says why when the artifact's
// `randomSeed` (schema 1.6) and the file's differ.
Status bindExternalWeights(
    const flatbuffers::Vector<flatbuffers::Offset<fb::Weight>> *descriptors, int64_t randomSeed,
    const ParameterFileReader &file, std::vector<WeightView> &views,
    std::unordered_map<std::string_view, size_t> &index);

} // namespace dlm::artifact
