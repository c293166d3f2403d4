// dlm-prof: runs a workload through a compiled artifact with the runtime's profiler on and reports
// where the time goes.
//
//   dlm-prof MODEL.dlm (--prompt TEXT | --prompt-ids 1,2,3 | --prompts FILE |
//                       --synthetic-length N)...
//            [--repeat K] [--warmup K] [generation flags as dlm-run]
//            [--json] [--trace OUT.json] [--max-events N]
//
// Several --prompt / --prompt-ids / --prompts / --synthetic-length add up; the workload runs them
// in order, --repeat times, as requests --request, --request + 1, ... --warmup runs the first
// prompt that many times first, unrecorded. The report: time per kernel kind and its share of the
// forward time, time per denoise step and the host overhead of each (the step's time outside its
// forwards), steps per block, tokens per forward and tokens/s per request, peak memory (weights,
// KV pages, activations, process RSS). --json prints the same as one object. --trace writes a
// Chrome trace (open it in https://ui.perfetto.dev): a track per backend thread and per request.
// Generated weights (dlmc compile --random-parameters) are said so on stderr and in --json.
// Bad arguments: exit status 2; a failed generation: 1.
#include "runtime/model/ModelSpec.h"
#include "runtime/profile/ChromeTrace.h"
#include "runtime/profile/ProfileSummary.h"
#include "runtime/profile/Profiler.h"
#include "runtime/session/Session.h"
#include "tools/dlm-run/GenerationFlags.h"
#include "tools/dlm-run/OpenModel.h"
#include "tools/dlm-run/RandomWeights.h"
#include "tools/dlm-run/RequestLength.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Json = nlohmann::json;
namespace profile = dlm::profile;

using dlm::tools::kBadArguments;
using dlm::tools::kFailed;

const char *kUsageHead =
    "usage: dlm-prof MODEL.dlm (--prompt TEXT | --prompt-ids 1,2,3 | --prompts FILE |\n"
    "                           --synthetic-length N)... [--repeat K] [--warmup K]\n"
    "               [--json] [--trace OUT.json] [--max-events N]\n";

const std::string kUsage = std::string(kUsageHead) + dlm::tools::kGenerationFlagsUsage;

int badArguments(const std::string &message) {
  return dlm::tools::badArguments("dlm-prof", kUsage, message);
}

// One prompt of the workload: text, ids, or a synthetic length resolved once the model is open.
struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
  int64_t syntheticLength = 0;
};

struct Options {
  // The artifact, --json and --verify.
  dlm::tools::CommonArguments common;
  dlm::GenerateRequest request;
  dlm::SessionOptions session;
  std::vector<Prompt> prompts;
  int64_t repeat = 1;
  int64_t warmup = 0;
  std::string trace;
  int64_t maxEvents = static_cast<int64_t>(profile::Profiler::kDefaultCapacity);
};

bool readPromptFile(const std::string &path, std::vector<Prompt> &prompts) {
  std::ifstream in(path);
  if (!in)
    return false;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.empty())
      continue;
    Prompt prompt;
    prompt.text = line;
    prompts.push_back(std::move(prompt));
  }
  return true;
}

// Returns 0 when the arguments are good, -1 after --help, else the exit status.
int parseArguments(int argc, char **argv, Options &options) {
  auto toolFlag = [&](const std::string &flag, const std::string &value) -> std::string {
    auto count = [&](int64_t &out, int64_t least) {
      int64_t parsed;
      if (!dlm::tools::parseInteger(value, parsed) || parsed < least)
        return false;
      out = parsed;
      return true;
    };
    const std::string badValue = "bad value '" + value + "' for " + flag;
    if (flag == "--prompt") {
      Prompt prompt;
      prompt.text = value;
      options.prompts.push_back(std::move(prompt));
    } else if (flag == "--prompt-ids") {
      Prompt prompt;
      if (!dlm::tools::parseIdList(value, prompt.ids) || prompt.ids.empty())
        return "--prompt-ids must be comma-separated integers, got '" + value + "'";
      options.prompts.push_back(std::move(prompt));
    } else if (flag == "--prompts") {
      const size_t before = options.prompts.size();
      if (!readPromptFile(value, options.prompts))
        return "cannot read prompts file '" + value + "'";
      if (options.prompts.size() == before)
        return "prompts file '" + value + "' has no prompts";
    } else if (flag == "--synthetic-length") {
      Prompt prompt;
      if (!count(prompt.syntheticLength, 1))
        return badValue;
      options.prompts.push_back(std::move(prompt));
    } else if (flag == "--repeat") {
      if (!count(options.repeat, 1))
        return badValue;
    } else if (flag == "--warmup") {
      if (!count(options.warmup, 0))
        return badValue;
    } else if (flag == "--trace") {
      options.trace = value;
    } else if (flag == "--max-events") {
      if (!count(options.maxEvents, 1))
        return badValue;
    } else {
      return "unknown option " + flag;
    }
    return "";
  };
  dlm::tools::CommonArguments &common = options.common;
  if (int status = dlm::tools::readCommandLine("dlm-prof", kUsage, argc, argv, common,
                                               options.request, options.session, toolFlag))
    return status;
  if (options.prompts.empty())
    return badArguments("give a workload: --prompt TEXT, --prompt-ids 1,2,3, --prompts FILE or "
                        "--synthetic-length N");
  return 0;
}

// N ids that are neither the mask token nor an EOS, spread over the vocabulary, fixed for N.
std::vector<int32_t> syntheticPrompt(int64_t length, const dlm::LoadedModel &model) {
  const dlm::sampling::TokenFacts &facts = model.tokenFacts();
  std::vector<int32_t> ordinary;
  for (int64_t id = 0; id < model.config().vocabSize; ++id)
    if (id != facts.maskTokenId && !facts.isEos(id))
      ordinary.push_back(static_cast<int32_t>(id));
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < length && !ordinary.empty(); ++i)
    ids.push_back(ordinary[static_cast<size_t>((i * 7919 + 17) % ordinary.size())]);
  return ids;
}

struct RequestResult {
  uint64_t id = 0;
  int64_t promptTokens = 0;
  dlm::GenerationStats stats;
};

// An integer knob of a result (0 when the program has no such knob).
int64_t integerKnob(const dlm::artifact::Attributes &knobs, std::string_view name) {
  auto found = knobs.find(std::string(name));
  if (found == knobs.end())
    return 0;
  const int64_t *value = std::get_if<int64_t>(&found->second);
  return value ? *value : 0;
}

size_t peakRssBytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return static_cast<size_t>(usage.ru_maxrss) * 1024; // Linux reports KiB
}

Json distributionJson(const profile::Distribution &d) {
  return Json{{"count", d.count}, {"total", d.total}, {"mean", d.mean}, {"median", d.median},
              {"p90", d.p90},     {"min", d.min},     {"max", d.max}};
}

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

struct Report {
  std::string artifact;
  std::string backend;
  int threads = 0;
  std::string policy;
  std::string cache;
  int64_t genLength = 0;
  int64_t blockLength = 0;
  int64_t repeat = 1;
  int64_t warmup = 0;
  std::vector<RequestResult> requests;
  // The measured requests' statistics, summed.
  dlm::GenerationStats totals;
  profile::Summary summary;
  dlm::MemoryUsage memory;
  // The backend's kernelPaths(): which GEMM each weight took on this CPU or device.
  std::vector<std::string> kernelPaths;
  size_t peakRss = 0;
  std::string trace;
};

Json reportJson(const Report &r) {
  Json out;
  out["model"] = r.artifact;
  out["backend"] = r.backend;
  out["threads"] = r.threads;
  out["policy"] = r.policy;
  out["cache"] = r.cache;
  out["gen_length"] = r.genLength;
  out["block_length"] = r.blockLength;
  out["repeat"] = r.repeat;
  out["warmup"] = r.warmup;
  out["kernel_paths"] = r.kernelPaths;
  Json kernels = Json::array();
  for (const profile::KernelRow &k : r.summary.kernels) {
    Json row{{"kind", profile::categoryName(k.category)},
             {"ms", k.ms},
             {"share", k.share},
             {"calls", k.calls}};
    if (k.flops > 0)
      row["gflops"] = k.gflops();
    kernels.push_back(row);
  }
  out["kernels"] = kernels;
  Json shapes = Json::array();
  for (const profile::GemmShapeRow &g : r.summary.gemmShapes)
    shapes.push_back({{"kind", profile::categoryName(g.category)},
                      {"m", g.m},
                      {"n", g.n},
                      {"k", g.k},
                      {"calls", g.calls},
                      {"ms", g.ms},
                      {"gflops", g.gflops()}});
  out["gemm_shapes"] = shapes;
  out["untracked_ms"] = r.summary.untrackedMs;
  out["untracked_share"] = r.summary.untrackedShare;
  out["forward_ms"] = distributionJson(r.summary.forwardMs);
  out["step_ms"] = distributionJson(r.summary.stepMs);
  out["host_overhead_ms"] = distributionJson(r.summary.hostOverheadMs);
  out["steps_per_block"] = distributionJson(r.summary.stepsPerBlock);
  Json requests = Json::array();
  for (size_t i = 0; i < r.requests.size(); ++i) {
    const RequestResult &q = r.requests[i];
    Json row{{"id", q.id},
             {"prompt_tokens", q.promptTokens},
             {"generated_tokens", q.stats.generatedTokens},
             {"forwards", q.stats.forwards},
             {"decode_steps", q.stats.decodeSteps},
             {"blocks", q.stats.blocks},
             {"seconds", q.stats.seconds},
             {"tokens_per_second", q.stats.tokensPerSecond()},
             {"tokens_per_forward", q.stats.tokensPerForward()}};
    requests.push_back(row);
  }
  out["requests"] = requests;
  out["totals"] = {{"requests", r.requests.size()},
                   {"generated_tokens", r.totals.generatedTokens},
                   {"forwards", r.totals.forwards},
                   {"seconds", r.totals.seconds},
                   {"tokens_per_second", r.totals.tokensPerSecond()},
                   {"tokens_per_forward", r.totals.tokensPerForward()}};
  out["memory"] = {{"weight_bytes", r.memory.weightBytes},
                   {"converted_weight_bytes", r.memory.convertedWeightBytes},
                   {"kv_pool_bytes", r.memory.kvPoolBytes},
                   {"kv_peak_bytes", r.memory.kvPeakBytes},
                   {"kv_in_use_bytes", r.memory.kvInUseBytes},
                   {"activation_bytes", r.memory.activationBytes},
                   {"peak_rss_bytes", r.peakRss}};
  out["threads_seen"] = r.summary.threads;
  out["events"] = r.summary.events;
  out["dropped_events"] = r.summary.dropped;
  out["trace"] = r.trace.empty() ? Json(nullptr) : Json(r.trace);
  return out;
}

void printDistribution(const char *label, const profile::Distribution &d, const char *unit) {
  std::printf("%-22s mean %.3f %s, median %.3f, p90 %.3f, min %.3f, max %.3f  (n=%lld)\n", label,
              d.mean, unit, d.median, d.p90, d.min, d.max, static_cast<long long>(d.count));
}

void printReport(const Report &r) {
  const profile::Summary &s = r.summary;
  std::printf("dlm-prof: %s\n", r.artifact.c_str());
  std::printf("backend %s, %d threads; policy %s, cache %s, gen_length %lld, block_length %lld\n",
              r.backend.c_str(), r.threads, r.policy.c_str(), r.cache.c_str(),
              static_cast<long long>(r.genLength), static_cast<long long>(r.blockLength));
  std::printf("workload: %zu requests (repeat %lld, warmup %lld)\n", r.requests.size(),
              static_cast<long long>(r.repeat), static_cast<long long>(r.warmup));
  for (const std::string &path : r.kernelPaths)
    std::printf("path: %s\n", path.c_str());

  std::printf("\n== Kernels (calling thread) ==\n");
  std::printf("%-14s %12s %8s %9s %11s %9s\n", "kind", "total ms", "share", "calls", "mean us",
              "GFLOP/s");
  for (const profile::KernelRow &k : s.kernels) {
    std::printf("%-14s %12.3f %7.1f%% %9lld %11.2f", profile::categoryName(k.category), k.ms,
                100 * k.share, static_cast<long long>(k.calls),
                k.calls ? 1000 * k.ms / static_cast<double>(k.calls) : 0.0);
    if (k.flops > 0)
      std::printf(" %9.1f", k.gflops());
    std::printf("\n");
  }
  std::printf("%-14s %12.3f %7.1f%%\n", "(untracked)", s.untrackedMs, 100 * s.untrackedShare);
  std::printf("%-14s %12.3f %7.1f%% %9lld %11.2f\n", "forward", s.forwardMs.total,
              s.forwardMs.total > 0 ? 100.0 : 0.0, static_cast<long long>(s.forwardMs.count),
              1000 * s.forwardMs.mean);

  if (!s.gemmShapes.empty()) {
    std::printf("\n== GEMM shapes (y[M, N] = x[M, K] W^T) ==\n");
    std::printf("%-8s %7s %7s %7s %9s %12s %9s\n", "kind", "M", "N", "K", "calls", "total ms",
                "GFLOP/s");
    for (const profile::GemmShapeRow &g : s.gemmShapes)
      std::printf("%-8s %7lld %7lld %7lld %9lld %12.3f %9.1f\n", profile::categoryName(g.category),
                  static_cast<long long>(g.m), static_cast<long long>(g.n),
                  static_cast<long long>(g.k), static_cast<long long>(g.calls), g.ms, g.gflops());
  }

  std::printf("\n== Denoise steps ==\n");
  printDistribution("step time", s.stepMs, "ms");
  printDistribution("host overhead/step", s.hostOverheadMs, "ms");
  std::printf("%-22s %.1f%% of step time\n", "host overhead share",
              s.stepMs.total > 0 ? 100 * s.hostOverheadMs.total / s.stepMs.total : 0.0);
  printDistribution("steps per block", s.stepsPerBlock, "steps");

  std::printf("\n== Requests ==\n");
  std::printf("%8s %7s %9s %8s %6s %6s %10s %10s %7s\n", "id", "prompt", "generated", "forwards",
              "steps", "blocks", "ms", "tokens/s", "TPF");
  for (const RequestResult &q : r.requests)
    std::printf("%8llu %7lld %9lld %8lld %6lld %6lld %10.3f %10.1f %7.3f\n",
                static_cast<unsigned long long>(q.id), static_cast<long long>(q.promptTokens),
                static_cast<long long>(q.stats.generatedTokens),
                static_cast<long long>(q.stats.forwards),
                static_cast<long long>(q.stats.decodeSteps),
                static_cast<long long>(q.stats.blocks), 1000 * q.stats.seconds,
                q.stats.tokensPerSecond(), q.stats.tokensPerForward());
  std::printf("%8s %7s %9lld %8lld %6s %6s %10.3f %10.1f %7.3f\n", "all", "",
              static_cast<long long>(r.totals.generatedTokens),
              static_cast<long long>(r.totals.forwards), "", "", 1000 * r.totals.seconds,
              r.totals.tokensPerSecond(), r.totals.tokensPerForward());

  std::printf("\n== Memory (peak) ==\n");
  std::printf("%-14s %10.3f MiB (%.3f MiB copied, converted or packed at load)\n", "weights",
              mib(r.memory.weightBytes), mib(r.memory.convertedWeightBytes));
  std::printf("%-14s %10.3f MiB peak in use, %.3f MiB at the end, pool %.3f MiB\n", "KV pages",
              mib(r.memory.kvPeakBytes), mib(r.memory.kvInUseBytes), mib(r.memory.kvPoolBytes));
  std::printf("%-14s %10.3f MiB\n", "activations", mib(r.memory.activationBytes));
  std::printf("%-14s %10.3f MiB\n", "process RSS", mib(r.peakRss));

  std::printf("\n%zu events recorded, %zu dropped", s.events, s.dropped);
  if (!r.trace.empty())
    std::printf("; trace: %s (open in https://ui.perfetto.dev)", r.trace.c_str());
  std::printf("\n");
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  if (int status = parseArguments(argc, argv, options))
    return status < 0 ? 0 : status;

  std::shared_ptr<dlm::LoadedModel> model = dlm::tools::openModel("dlm-prof", options.common);
  if (!model)
    return kFailed;
  profile::Profiler profiler(static_cast<size_t>(options.maxEvents));
  options.session.profiler = &profiler;
  int failed = 0;
  std::unique_ptr<dlm::Session> opened =
      dlm::tools::openSession("dlm-prof", model, options.request, options.session, failed);
  if (!opened)
    return failed;
  dlm::Session &session = *opened;

  std::vector<dlm::GenerateRequest> workload;
  for (const Prompt &prompt : options.prompts) {
    dlm::GenerateRequest request = options.request;
    request.promptText = prompt.text;
    request.promptIds =
        prompt.syntheticLength > 0 ? syntheticPrompt(prompt.syntheticLength, *model) : prompt.ids;
    workload.push_back(std::move(request));
  }

  for (int64_t w = 0; w < options.warmup; ++w) {
    dlm::StatusOr<dlm::GenerateResult> result = session.generate(workload.front());
    if (!result) {
      std::cerr << "dlm-prof: " << result.status().message() << "\n";
      return kBadArguments;
    }
  }
  profiler.clear();

  Report report;
  uint64_t nextId = options.request.requestId;
  for (int64_t k = 0; k < options.repeat; ++k) {
    for (dlm::GenerateRequest &request : workload) {
      request.requestId = nextId++;
      dlm::StatusOr<dlm::GenerateResult> result = session.generate(request);
      if (!result) {
        std::cerr << "dlm-prof: " << result.status().message() << "\n";
        // Request errors (bad knobs, prompt too long) are argument errors to the user.
        return kBadArguments;
      }
      RequestResult row;
      row.id = request.requestId;
      row.promptTokens = static_cast<int64_t>(result->promptIds.size());
      row.stats = result->stats;
      report.totals.generatedTokens += row.stats.generatedTokens;
      report.totals.forwards += row.stats.forwards;
      report.totals.decodeSteps += row.stats.decodeSteps;
      report.totals.blocks += row.stats.blocks;
      report.totals.seconds += row.stats.seconds;
      report.requests.push_back(row);
      report.policy = result->policy;
      report.genLength = integerKnob(result->knobs, dlm::spec::kKnobGenLength);
      report.cache = dlm::tools::textKnob(result->knobs, dlm::spec::kKnobCache);
      report.blockLength = integerKnob(result->knobs, dlm::spec::kKnobBlockLength);
    }
  }

  report.artifact = options.common.artifact;
  report.backend = std::string(session.backend().name());
  report.repeat = options.repeat;
  report.warmup = options.warmup;
  report.summary = profile::summarize(profiler);
  report.memory = session.backend().memoryUsage();
  report.kernelPaths = session.backend().kernelPaths();
  report.peakRss = peakRssBytes();
  report.trace = options.trace;
  report.threads = options.session.threads > 0
                       ? options.session.threads
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  if (!options.trace.empty()) {
    profile::TraceLabels labels;
    labels.backend = "dlm " + report.backend + " backend";
    dlm::Status written = profile::writeChromeTrace(profiler, labels, options.trace);
    if (!written.isOk()) {
      std::cerr << "dlm-prof: " << written.message() << "\n";
      return kFailed;
    }
  }

  if (options.common.json) {
    Json out = reportJson(report);
    dlm::tools::addRandomWeights(out, *model);
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  } else {
    printReport(report);
  }
  return 0;
}
