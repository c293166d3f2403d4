// dlm-run: generates text with a compiled artifact, streaming committed blocks to stdout.
//
//   dlm-run MODEL.dlm (--prompt TEXT | --prompt-ids 1,2,3)
//           [--policy low-confidence|entropy-bound] [--gen-length N] [--block-length N]
//           [--steps N] [--threshold X|none] [--temperature X] [--seed N] [--request N]
//           [--cache none|prefix] [--backend cpu] [--threads N]
//           entropy-bound: [--max-steps N] [--t-min X] [--t-max X] [--entropy-bound X]
//                          [--stability-threshold N] [--confidence-threshold X] [--noise
//                          mask|uniform]
//           [--json] [--dump-logits PATH.npy]
//
// Knobs not given come from the artifact's decoding program. --json prints one object instead of
// streaming: prompt_ids, output_ids (prompt excluded, up to and including the first EOS), text,
// forwards, seconds and more. --dump-logits writes the first decoded forward's logits as float32
// .npy [tokens fed, vocab_size]. Bad arguments: a message and exit status 2; a failed generation:
// exit status 1.
#include "runtime/model/ModelSpec.h"
#include "runtime/session/Session.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace {

using Json = nlohmann::json;

constexpr int kBadArguments = 2;
constexpr int kFailed = 1;

const char *kUsage =
    "usage: dlm-run MODEL.dlm (--prompt TEXT | --prompt-ids 1,2,3) [--policy P]\n"
    "               [--gen-length N] [--block-length N] [--steps N] [--threshold X|none]\n"
    "               [--temperature X] [--seed N] [--request N] [--cache none|prefix]\n"
    "               [--max-steps N] [--t-min X] [--t-max X] [--entropy-bound X]\n"
    "               [--stability-threshold N] [--confidence-threshold X] [--noise mask|uniform]\n"
    "               [--backend cpu] [--threads N] [--json] [--dump-logits PATH.npy]\n";

int badArguments(const std::string &message) {
  std::cerr << "dlm-run: " << message << "\n" << kUsage;
  return kBadArguments;
}

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
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int64_t id;
    if (!item.empty()) {
      if (!parseInteger(item, id) || id < INT32_MIN || id > INT32_MAX)
        return false;
      ids.push_back(static_cast<int32_t>(id));
    }
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return true;
}

// float32 .npy, version 1.0, C order.
bool writeNpy(const std::string &path, const std::vector<float> &data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to a multiple of 64 and
  // ended by a newline.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const char magic[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(magic, sizeof magic);
  const uint16_t length = static_cast<uint16_t>(header.size());
  const char lengthBytes[] = {static_cast<char>(length & 0xff), static_cast<char>(length >> 8)};
  out.write(lengthBytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char *>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(float)));
  return out.good();
}

struct Options {
  std::string artifact;
  dlm::GenerateRequest request;
  dlm::SessionOptions session;
  bool havePrompt = false;
  bool json = false;
  std::string dumpLogits;
};

// The knob flags: flag -> (knob name, kind).
enum class KnobKind { integer, real, text, threshold };
const std::map<std::string, std::pair<std::string_view, KnobKind>> &knobFlags() {
  namespace s = dlm::spec;
  static const std::map<std::string, std::pair<std::string_view, KnobKind>> flags = {
      {"--policy", {s::kKnobPolicy, KnobKind::text}},
      {"--gen-length", {s::kKnobGenLength, KnobKind::integer}},
      {"--block-length", {s::kKnobBlockLength, KnobKind::integer}},
      {"--steps", {s::kKnobSteps, KnobKind::integer}},
      {"--threshold", {s::kKnobThreshold, KnobKind::threshold}},
      {"--temperature", {s::kKnobTemperature, KnobKind::real}},
      {"--max-steps", {s::kKnobMaxSteps, KnobKind::integer}},
      {"--t-min", {s::kKnobTMin, KnobKind::real}},
      {"--t-max", {s::kKnobTMax, KnobKind::real}},
      {"--entropy-bound", {s::kKnobEntropyBound, KnobKind::real}},
      {"--stability-threshold", {s::kKnobStabilityThreshold, KnobKind::integer}},
      {"--confidence-threshold", {s::kKnobConfidenceThreshold, KnobKind::real}},
      {"--noise", {s::kKnobNoise, KnobKind::text}},
  };
  return flags;
}

// Returns 0 when the arguments are good, else the exit status (after printing why).
int parseArguments(int argc, char **argv, Options &options) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &flag = args[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      return -1;
    }
    if (flag == "--json") {
      options.json = true;
      continue;
    }
    if (flag.rfind("--", 0) != 0) {
      if (!options.artifact.empty())
        return badArguments("more than one model given: '" + options.artifact + "' and '" + flag +
                            "'");
      options.artifact = flag;
      continue;
    }
    if (i + 1 >= args.size())
      return badArguments(flag + " needs a value");
    const std::string &value = args[++i];
    auto bad = [&] { return badArguments("bad value '" + value + "' for " + flag); };

    if (auto knob = knobFlags().find(flag); knob != knobFlags().end()) {
      const std::string name(knob->second.first);
      int64_t integer;
      double real;
      switch (knob->second.second) {
      case KnobKind::integer:
        if (!parseInteger(value, integer))
          return bad();
        options.request.knobs[name] = integer;
        break;
      case KnobKind::real:
        if (!parseReal(value, real))
          return bad();
        options.request.knobs[name] = real;
        break;
      case KnobKind::threshold:
        if (value == dlm::spec::kThresholdNone) {
          options.request.knobs[name] = std::string(value);
          break;
        }
        if (!parseReal(value, real))
          return bad();
        options.request.knobs[name] = real;
        break;
      case KnobKind::text:
        options.request.knobs[name] = value;
        break;
      }
    } else if (flag == "--prompt") {
      if (options.havePrompt)
        return badArguments("give one of --prompt and --prompt-ids");
      options.request.promptText = value;
      options.havePrompt = true;
    } else if (flag == "--prompt-ids") {
      if (options.havePrompt)
        return badArguments("give one of --prompt and --prompt-ids");
      if (!parseIdList(value, options.request.promptIds))
        return badArguments("--prompt-ids must be comma-separated integers, got '" + value + "'");
      options.havePrompt = true;
    } else if (flag == "--seed") {
      if (!parseUnsigned(value, options.request.seed))
        return bad();
    } else if (flag == "--request") {
      if (!parseUnsigned(value, options.request.requestId))
        return bad();
    } else if (flag == "--cache") {
      dlm::StatusOr<dlm::sampling::CacheMode> mode = dlm::sampling::parseCacheMode(value);
      if (!mode)
        return badArguments(mode.status().message());
      options.request.cache = *mode;
    } else if (flag == "--backend") {
      options.session.backend = value;
    } else if (flag == "--threads") {
      int64_t threads;
      if (!parseInteger(value, threads) || threads < 0 || threads > 1024)
        return bad();
      options.session.threads = static_cast<int>(threads);
    } else if (flag == "--dump-logits") {
      options.dumpLogits = value;
      options.request.captureFirstLogits = true;
    } else {
      return badArguments("unknown option " + flag);
    }
  }
  if (options.artifact.empty())
    return badArguments("no model given");
  if (!options.havePrompt)
    return badArguments("give --prompt TEXT or --prompt-ids 1,2,3");
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  if (int status = parseArguments(argc, argv, options))
    return status < 0 ? 0 : status;

  dlm::StatusOr<std::shared_ptr<dlm::LoadedModel>> model = dlm::LoadedModel::open(options.artifact);
  if (!model) {
    std::cerr << "dlm-run: " << model.status().message() << "\n";
    return kFailed;
  }
  dlm::StatusOr<std::unique_ptr<dlm::Session>> session =
      dlm::Session::create(*model, options.session);
  if (!session) {
    std::cerr << "dlm-run: " << session.status().message() << "\n";
    return kFailed;
  }

  dlm::StreamCallback stream;
  if (!options.json) {
    // Without a tokenizer there is no text: stream the ids instead.
    const bool haveTokenizer = (*model)->tokenizer() != nullptr;
    stream = [haveTokenizer](const dlm::StreamedBlock &block) {
      if (haveTokenizer) {
        std::fwrite(block.text.data(), 1, block.text.size(), stdout);
      } else {
        for (int64_t i = 0; i < block.count; ++i)
          std::printf("%s%d", block.index == 0 && i == 0 ? "" : " ", block.ids[i]);
      }
      std::fflush(stdout);
    };
  }
  dlm::StatusOr<dlm::GenerateResult> result = (*session)->generate(options.request, stream);
  if (!result) {
    if (!options.json)
      std::fputc('\n', stdout);
    std::cerr << "dlm-run: " << result.status().message() << "\n";
    // Request errors (bad knobs, prompt too long) are argument errors to the user.
    return kBadArguments;
  }

  if (!options.dumpLogits.empty() && !writeNpy(options.dumpLogits, result->firstLogits,
                                               result->firstLogitRows, result->vocabSize)) {
    std::cerr << "dlm-run: cannot write " << options.dumpLogits << "\n";
    return kFailed;
  }

  const dlm::GenerationStats &stats = result->stats;
  if (options.json) {
    Json out;
    out["prompt_ids"] = result->promptIds;
    out["output_ids"] = result->outputIds;
    out["text"] = result->text;
    out["forwards"] = stats.forwards;
    out["seconds"] = stats.seconds;
    out["decode_steps"] = stats.decodeSteps;
    out["blocks"] = stats.blocks;
    out["tokens_per_second"] = stats.tokensPerSecond();
    out["tokens_per_forward"] = stats.tokensPerForward();
    out["policy"] = dlm::sampling::policyName(result->knobs.policy);
    out["cache"] = dlm::sampling::cacheModeName(options.request.cache);
    out["backend"] = std::string((*session)->backend().name());
    // Invalid UTF-8 in generated text must not abort the dump.
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  } else {
    std::fputc('\n', stdout);
    std::fprintf(stderr,
                 "[dlm-run] %lld tokens in %.3f s (%.1f tokens/s), %lld forwards "
                 "(%.2f tokens/forward), %s, cache %s\n",
                 static_cast<long long>(stats.generatedTokens), stats.seconds,
                 stats.tokensPerSecond(), static_cast<long long>(stats.forwards),
                 stats.tokensPerForward(), dlm::sampling::policyName(result->knobs.policy),
                 dlm::sampling::cacheModeName(options.request.cache));
  }
  return 0;
}
