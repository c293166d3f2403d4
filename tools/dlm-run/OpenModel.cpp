#include "tools/dlm-run/OpenModel.h"

#include "tools/dlm-run/RandomWeights.h"

#include <iostream>

namespace dlm::tools {

std::shared_ptr<LoadedModel> openModel(const char *tool, const CommonArguments &common) {
  LoadedModel::OpenOptions options;
  options.verifyIntegrity = common.verify;
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(common.artifact, options);
  if (!model) {
    std::cerr << tool << ": " << model.status().message() << "\n";
    return nullptr;
  }
  warnIfRandomWeights(tool, **model);
  return *std::move(model);
}

std::unique_ptr<Session> openSession(const char *tool, std::shared_ptr<LoadedModel> model,
                                     GenerateRequest &request, const SessionOptions &options,
                                     int &exitStatus) {
  if (Status length = applyRequestLength(*model, request); !length.isOk()) {
    std::cerr << tool << ": " << length.message() << "\n";
    exitStatus = kBadArguments;
    return nullptr;
  }
  StatusOr<std::unique_ptr<Session>> session = Session::create(std::move(model), options);
  if (!session) {
    std::cerr << tool << ": " << session.status().message() << "\n";
    exitStatus = kFailed;
    return nullptr;
  }
  return std::move(*session);
}

} // namespace dlm::tools
