// How dlm-run, dlm-prof and dlm-serve open their artifact: the runtime's named error printed as
// "TOOL: why", else the model, with the random-weights notice when its weights are random.
#pragma once

#include "runtime/session/Session.h"

#include <memory>
#include <string>

namespace dlm::tools {

// Null when the artifact does not open (the reason is on stderr).
std::shared_ptr<LoadedModel> openModel(const char *tool, const std::string &artifact,
                                       const LoadedModel::OpenOptions &options);

} // namespace dlm::tools
