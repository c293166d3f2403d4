// The generation flags dlm-run and dlm-prof share: decoding knobs (--policy, --gen-length, ...),
// --seed, --request, --cache, --backend, --threads, and the number parsers behind them.
#pragma once

#include "runtime/session/Session.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dlm::tools {

// Usage lines of the shared flags, indented to follow "usage: TOOL MODEL.dlm ...".
extern const char *const kGenerationFlagsUsage;

bool parseInteger(const std::string &text, int64_t &out);
bool parseUnsigned(const std::string &text, uint64_t &out);
bool parseReal(const std::string &text, double &out);
// Comma-separated integers ("1,2,3"; empty items are skipped).
bool parseIdList(const std::string &text, std::vector<int32_t> &ids);

enum class FlagParse {
  // Not a shared flag: the tool handles it.
  notShared,
  parsed,
  // `error` says why.
  bad,
};

// Applies `flag value` to the request or the session options when it is a shared flag.
FlagParse parseGenerationFlag(const std::string &flag, const std::string &value,
                              GenerateRequest &request, SessionOptions &session,
                              std::string &error);

} // namespace dlm::tools
