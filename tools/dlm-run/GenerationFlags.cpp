#include "tools/dlm-run/GenerationFlags.h"

#include "runtime/model/ModelSpec.h"
#include "runtime/program/DecodeProgramSet.h"
#include "runtime/program/ProgramKnobs.h"
#include "support/SplitText.h"
#include "tools/dlm-run/OpenModel.h"
#include "tools/dlm-run/RequestLength.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string_view>

namespace dlm::tools {

const char *const kGenerationFlagsUsage =
    "               [--policy P] [--gen-length N] [--block-length N] [--steps N]\n"
    "               [--threshold X|none] [--step-cap N|none] [--low-threshold X|none]\n"
    "               [--depth N] [--credit on|off] [--credit-alpha X] [--credit-beta X]\n"
    "               [--credit-gamma X] [--temperature X] [--seed N]\n"
    "               [--request N]\n"
    "               [--cache none|prefix|dual] [--max-steps N] [--t-min X] [--t-max X]\n"
    "               [--entropy-bound X] [--stability-threshold N] [--confidence-threshold X]\n"
    "               [--noise mask|uniform] [--max-new-tokens N] [--canvas-length N]\n"
    "               [--top-k N] [--top-p X] [--knob NAME=VALUE]...\n"
    "               [--device cpu|cuda|cuda-emu] [--threads N] [--verify]\n";

bool parseInteger(const std::string &text, int64_t &out) {
  if (text.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno || *end)
    return false;
  out = value;
  return true;
}

bool parseUnsigned(const std::string &text, uint64_t &out) {
  if (text.empty() || text[0] == '-')
    return false;
  errno = 0;
  char *end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno || *end)
    return false;
  out = value;
  return true;
}

bool parseReal(const std::string &text, double &out) {
  if (text.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (errno || *end)
    return false;
  out = value;
  return true;
}

bool parseIdList(const std::string &text, std::vector<int32_t> &ids) {
  for (std::string_view item : splitText(text, ',')) {
    int64_t id;
    if (!item.empty()) {
      if (!parseInteger(std::string(item), id) || id < INT32_MIN || id > INT32_MAX)
        return false;
      ids.push_back(static_cast<int32_t>(id));
    }
  }
  return true;
}

namespace {

// The knob flags: flag -> (knob name, kind).
enum class KnobKind { integer, integerOrNone, real, text, threshold, boolean };
const std::map<std::string, std::pair<std::string_view, KnobKind>> &knobFlags() {
  namespace s = dlm::spec;
  static const std::map<std::string, std::pair<std::string_view, KnobKind>> flags = {
      {"--policy", {s::kKnobPolicy, KnobKind::text}},
      {"--gen-length", {s::kKnobGenLength, KnobKind::integer}},
      {"--block-length", {s::kKnobBlockLength, KnobKind::integer}},
      {"--steps", {s::kKnobSteps, KnobKind::integer}},
      {"--threshold", {s::kKnobThreshold, KnobKind::threshold}},
      {"--step-cap", {s::kKnobStepCap, KnobKind::integerOrNone}},
      {"--low-threshold", {s::kKnobLowThreshold, KnobKind::threshold}},
      {"--depth", {s::kKnobDepth, KnobKind::integer}},
      {"--credit", {s::kKnobCredit, KnobKind::boolean}},
      {"--credit-alpha", {s::kKnobCreditAlpha, KnobKind::real}},
      {"--credit-beta", {s::kKnobCreditBeta, KnobKind::real}},
      {"--credit-gamma", {s::kKnobCreditGamma, KnobKind::real}},
      {"--temperature", {s::kKnobTemperature, KnobKind::real}},
      {"--max-steps", {s::kKnobMaxSteps, KnobKind::integer}},
      {"--t-min", {s::kKnobTMin, KnobKind::real}},
      {"--t-max", {s::kKnobTMax, KnobKind::real}},
      {"--entropy-bound", {s::kKnobEntropyBound, KnobKind::real}},
      {"--stability-threshold", {s::kKnobStabilityThreshold, KnobKind::integer}},
      {"--confidence-threshold", {s::kKnobConfidenceThreshold, KnobKind::real}},
      {"--noise", {s::kKnobNoise, KnobKind::text}},
      {"--cache", {s::kKnobCache, KnobKind::text}},
      {"--max-new-tokens", {s::kKnobMaxNewTokens, KnobKind::integer}},
      {"--canvas-length", {s::kKnobCanvasLength, KnobKind::integer}},
      {"--top-k", {s::kKnobTopK, KnobKind::integer}},
      {"--top-p", {s::kKnobTopP, KnobKind::real}},
      {"--stride", {s::kKnobStride, KnobKind::integer}},
      {"--verify-alpha", {s::kKnobVerifyAlpha, KnobKind::real}},
  };
  return flags;
}

} // namespace

FlagParse parseGenerationFlag(const std::string &flag, const std::string &value,
                              GenerateRequest &request, SessionOptions &session,
                              std::string &error) {
  auto bad = [&] {
    error = "bad value '" + value + "' for " + flag;
    return FlagParse::bad;
  };
  if (auto knob = knobFlags().find(flag); knob != knobFlags().end()) {
    const std::string name(knob->second.first);
    int64_t integer;
    double real;
    switch (knob->second.second) {
    case KnobKind::integer:
      if (!parseInteger(value, integer))
        return bad();
      request.knobs[name] = integer;
      break;
    case KnobKind::integerOrNone:
      if (value == dlm::spec::kThresholdNone) {
        request.knobs[name] = std::string(value);
        break;
      }
      if (!parseInteger(value, integer))
        return bad();
      request.knobs[name] = integer;
      break;
    case KnobKind::real:
      if (!parseReal(value, real))
        return bad();
      request.knobs[name] = real;
      break;
    case KnobKind::threshold:
      if (value == dlm::spec::kThresholdNone) {
        request.knobs[name] = std::string(value);
        break;
      }
      if (!parseReal(value, real))
        return bad();
      request.knobs[name] = real;
      break;
    case KnobKind::text:
      request.knobs[name] = value;
      break;
    case KnobKind::boolean:
      if (value != "on" && value != "off")
        return bad();
      request.knobs[name] = value == "on";
      break;
    }
    return FlagParse::parsed;
  }
  if (flag == "--knob") {
    // Any knob the chosen program declares, by its name; the declaration types the value.
    const size_t equals = value.find('=');
    if (equals == 0 || equals == std::string::npos) {
      error = "--knob takes NAME=VALUE, got '" + value + "'";
      return FlagParse::bad;
    }
    request.knobs[value.substr(0, equals)] = program::knobValueFromText(value.substr(equals + 1));
  } else if (flag == "--seed") {
    if (!parseUnsigned(value, request.seed))
      return bad();
  } else if (flag == "--request") {
    if (!parseUnsigned(value, request.requestId))
      return bad();
  } else if (flag == "--backend" || flag == "--device") {
    session.backend = value;
  } else if (flag == "--threads") {
    int64_t threads;
    if (!parseInteger(value, threads) || threads < 0 || threads > 1024)
      return bad();
    session.threads = static_cast<int>(threads);
  } else {
    return FlagParse::notShared;
  }
  return FlagParse::parsed;
}

namespace {

enum class CommandLine { ok, help, bad };
CommandLine walkCommandLine(
    int argc, char **argv, CommonArguments &common, GenerateRequest &request,
    SessionOptions &session,
    const std::function<std::string(const std::string &flag, const std::string &value)> &toolFlag,
    std::string &error) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &flag = args[i];
    if (flag == "--help" || flag == "-h")
      return CommandLine::help;
    if (flag == "--json") {
      common.json = true;
      continue;
    }
    if (flag == "--verify") {
      common.verify = true;
      continue;
    }
    if (common.toolSwitches.count(flag)) {
      common.switches.insert(flag);
      continue;
    }
    if (flag.rfind("--", 0) != 0) {
      if (!common.artifact.empty()) {
        error = "more than one model given: '" + common.artifact + "' and '" + flag + "'";
        return CommandLine::bad;
      }
      common.artifact = flag;
      continue;
    }
    if (i + 1 >= args.size()) {
      error = flag + " needs a value";
      return CommandLine::bad;
    }
    const std::string &value = args[++i];
    switch (parseGenerationFlag(flag, value, request, session, error)) {
    case FlagParse::parsed:
      continue;
    case FlagParse::bad:
      return CommandLine::bad;
    case FlagParse::notShared:
      break;
    }
    error = toolFlag(flag, value);
    if (!error.empty())
      return CommandLine::bad;
  }
  if (common.artifact.empty()) {
    error = "no model given";
    return CommandLine::bad;
  }
  return CommandLine::ok;
}

} // namespace

int badArguments(const char *tool, const std::string &usage, const std::string &message) {
  std::cerr << tool << ": " << message << "\n" << usage;
  return kBadArguments;
}

int readCommandLine(
    const char *tool, const std::string &usage, int argc, char **argv, CommonArguments &common,
    GenerateRequest &request, SessionOptions &session,
    const std::function<std::string(const std::string &flag, const std::string &value)> &toolFlag) {
  std::string error;
  switch (walkCommandLine(argc, argv, common, request, session, toolFlag, error)) {
  case CommandLine::help:
    std::cout << usage;
    return -1;
  case CommandLine::bad:
    return badArguments(tool, usage, error);
  case CommandLine::ok:
    break;
  }
  return 0;
}

Status applyRequestLength(const LoadedModel &model, GenerateRequest &request) {
  const program::DecodeProgramSet &programs = model.decodePrograms();
  std::string policy;
  if (auto found = request.knobs.find(spec::kKnobPolicy); found != request.knobs.end())
    if (const auto *text = std::get_if<std::string>(&found->second))
      policy = *text;
  StatusOr<size_t> selected = programs.select(policy);
  if (!selected)
    return selected.status();
  const std::string &name = programs.names()[*selected];
  const tools::DeclaredKnobs declared = tools::declaredKnobs(programs.program(*selected));
  DLM_RETURN_IF_ERROR(tools::checkGenLengthKnob(name, declared, request.knobs));
  const std::string maxNew(spec::kKnobMaxNewTokens);
  auto found = request.knobs.find(maxNew);
  if (found == request.knobs.end() || declared.names.count(maxNew))
    return Status::ok();
  const std::optional<int64_t> given = tools::integerKnob(request.knobs, maxNew);
  request.knobs.erase(found);
  if (!given)
    return Status::error("--max-new-tokens takes a whole number");
  const int64_t maxNewTokens = *given;
  if (maxNewTokens < 1)
    return Status::error("--max-new-tokens must be at least 1, got " +
                         std::to_string(maxNewTokens));
  const bool stepsGiven = request.knobs.count(spec::kKnobSteps) > 0;
  return tools::setRequestLength(name, declared, maxNewTokens, stepsGiven, request.knobs)
      .withContext("--max-new-tokens");
}

} // namespace dlm::tools
