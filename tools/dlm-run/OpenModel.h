// How dlm-run, dlm-prof and dlm-serve open their artifact (and dlm-run and dlm-prof a session;
// dlm-serve runs an engine): the runtime's named error printed as "TOOL: why", else the model,
// with the random-weights notice when its weights are random.
#pragma once

#include "runtime/session/Session.h"
#include "tools/dlm-run/GenerationFlags.h"

#include <memory>
#include <string>

namespace dlm::tools {

// The tools' exit statuses.
inline constexpr int kFailed = 1;
inline constexpr int kBadArguments = 2;

// The command line's artifact, its integrity checked first under --verify; null when it does not
// open (the reason is on stderr).
std::shared_ptr<LoadedModel> openModel(const char *tool, const CommonArguments &common);

// A session over `model` for `request`, whose length flags are first fitted to the program it
// selects (applyRequestLength). Null on failure, the reason on stderr and `exitStatus`
// kBadArguments for the request, kFailed for the session.
std::unique_ptr<Session> openSession(const char *tool, std::shared_ptr<LoadedModel> model,
                                     GenerateRequest &request, const SessionOptions &options,
                                     int &exitStatus);

} // namespace dlm::tools
