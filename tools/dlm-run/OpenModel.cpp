#include "tools/dlm-run/OpenModel.h"

#include "tools/dlm-run/RandomWeights.h"

#include <iostream>

namespace dlm::tools {

std::shared_ptr<LoadedModel> openModel(const char *tool, const std::string &artifact,
                                       const LoadedModel::OpenOptions &options) {
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(artifact, options);
  if (!model) {
    std::cerr << tool << ": " << model.status().message() << "\n";
    return nullptr;
  }
  warnIfRandomWeights(tool, **model);
  return *std::move(model);
}

} // namespace dlm::tools
