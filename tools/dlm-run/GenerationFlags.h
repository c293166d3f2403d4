// The generation flags dlm-run and dlm-prof share: decoding knobs (--policy, --gen-length, ...),
// --knob NAME=VALUE (any knob a program declares), --seed, --request, --cache, --backend,
// --threads, and the number parsers behind them.
#pragma once

#include "runtime/session/Session.h"

#include <cstdint>
#include <functional>
#include <set>
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

// What readCommandLine reads besides the generation flags.
struct CommonArguments {
  std::string artifact;
  bool json = false;
  // --verify: check the artifact's integrity hashes before using it.
  bool verify = false;
  // Flags without a value the tool takes besides --json (for example "--score"), and those given.
  std::set<std::string> toolSwitches;
  std::set<std::string> switches;
};

// The command line the tools share: one positional model path, --help, --json and the shared
// generation flags. Every other `--flag value` goes to `toolFlag`, which applies it or returns
// why not ("unknown option --x" included); an empty string means it was applied. Returns 0 when
// the command line is good; after --help, -1 with `usage` on stdout; else kBadArguments with
// "TOOL: why" and `usage` on stderr.
int readCommandLine(
    const char *tool, const std::string &usage, int argc, char **argv, CommonArguments &common,
    GenerateRequest &request, SessionOptions &session,
    const std::function<std::string(const std::string &flag, const std::string &value)> &toolFlag);

// "TOOL: why" and `usage` on stderr; returns kBadArguments.
int badArguments(const char *tool, const std::string &usage, const std::string &message);

// --max-new-tokens as the one request length of every program (tools/dlm-run/RequestLength.h): kept
// as the knob for a program that declares max_new_tokens, made gen_length (rounded up to whole
// blocks, steps scaled unless --steps was given) for one that denoises gen_length tokens. And
// --gen-length on a program without gen_length is refused with what to give instead. `model`'s
// program is the one the request's policy selects. Errors are the user's (bad arguments).
Status applyRequestLength(const LoadedModel &model, GenerateRequest &request);

} // namespace dlm::tools
