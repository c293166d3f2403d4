// The serving engine's throughput against the same requests served one at a time
// (docs/design/serving.md; issues 14 and 34). The baseline is the best single request: a
// one-request Session on the default (fast, not batch-invariant) backend options, as dlm-run
// runs. Against it, the Engine one request at a time and from N client threads, batch-invariant
// with --batch-invariant. All run the same requests (prompts of the artifact's tokenizer, the
// artifact's default program and knobs, greedy), interleaved per repeat; the figures are medians.
// Also says how many concurrent outputs differ from the engine's one-at-a-time ones (none may
// when batch-invariant: exit 1), and the float32 ceiling no scheduler on float32 GEMMs can pass
// on this machine (stored-precision GEMMs may beat it): the time the passes' GEMMs alone take at
// the best rate a float32 GEMM reaches on the model's projections at a packed run's rows
// (InvariantGemm or oneDNN's sgemm, measured in the same run), against the one-at-a-time time.
//
//   dlm-bench-engine MODEL.dlm [--concurrency 16] [--requests 32] [--repeats 3] [--threads 2]
//                    [--cache none|prefix] [--knob name=value ...] [--batch-invariant]
#include "runtime/cpu/InvariantGemm.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/engine/Engine.h"
#include "runtime/model/KernelProgram.h"
#include "runtime/model/ModelSpec.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace dlm;

struct Args {
  std::string artifact;
  int concurrency = 16, requests = 32, repeats = 3, threads = 2;
  std::string cache = "prefix"; // the cache knob (none, prefix, dual)
  bool batchInvariant = false;  // the engine's mode (the session baseline is always fast)
  artifact::Attributes knobs;
};

const char *const kPrompts[] = {
    "The licenses for most software", "When we speak of free software", "To protect your rights",
    "For example, if you distribute copies", "Developers that use the GNU GPL",
    "For the developers' and authors' protection", "Some devices are designed to deny users",
    "Finally, every program is threatened", "The precise terms and conditions",
    "This License refers to version 3", "To modify a work means to copy",
    "A covered work means either", "To propagate a work means to do anything",
    "An interactive user interface displays", "The source code for a work means",
    "The System Libraries of an executable"};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

GenerateRequest request(const Args &args, int i) {
  GenerateRequest r;
  r.promptText = kPrompts[i % std::size(kPrompts)];
  r.knobs = args.knobs;
  r.knobs[std::string(spec::kKnobCache)] = args.cache;
  r.seed = static_cast<uint64_t>(i);
  return r;
}

// The GEMMs of the default forward function: their flops per fed row and per logit row, and the
// best rates InvariantGemm and oneDNN's sgemm reach on them at a packed run's rows (warm, best of
// several).
struct GemmCeiling {
  double rowFlops = 0, logitRowFlops = 0, invariantRate = 0, libraryRate = 0;
};

StatusOr<GemmCeiling> measureGemms(const LoadedModel &model, int64_t rows, int64_t logitRows,
                                   int threads) {
  const artifact::KernelTarget *records = model.artifact().findKernelTarget(spec::kernels::kTarget);
  if (!records)
    return Status::error("the artifact has no cpu kernel records");
  std::shared_ptr<const model::ModelWeights> weights;
  DLM_ASSIGN_OR_RETURN(weights, model.hostWeights());
  std::map<std::string, program::KernelProgram> functions;
  DLM_ASSIGN_OR_RETURN(functions, program::KernelProgram::buildFunctions(records->kernels, *weights));
  struct Product {
    const model::HostTensor *weight;
    int64_t outputs, rows;
  };
  std::vector<Product> products;
  GemmCeiling ceiling;
  int64_t widest = 0;
  using program::KernelKind;
  const auto forward = functions.find(std::string(spec::kernels::kDefaultFunction));
  if (forward == functions.end())
    return Status::error("the GEMM ceiling needs the default forward function ('" +
                         std::string(spec::kernels::kDefaultFunction) + "')");
  for (const program::ProgramRecord &k : forward->second.kernels) {
    const bool head = k.kind() == KernelKind::lmHead;
    if (!k.projects())
      continue;
    const model::HostTensor *weight = k.weight();
    const int64_t outputs = head ? std::min(weight->rows, model.dims().vocabSize) : weight->rows;
    products.push_back({weight, outputs, head ? logitRows : rows});
    (head ? ceiling.logitRowFlops : ceiling.rowFlops) += 2.0 * outputs * weight->cols;
    widest = std::max({widest, outputs, weight->cols});
  }
  cpu::ThreadPool pool(threads);
  std::vector<cpu::InvariantGemm> invariant;
  for (const Product &p : products)
    invariant.emplace_back(*p.weight, p.outputs);
  const int64_t most = std::max(rows, logitRows);
  std::vector<float> x(static_cast<size_t>(most * widest), 0.01f), y(x.size());
  auto seconds = [&](bool library) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < products.size(); ++i) {
      const Product &p = products[i];
      if (library)
        (void)cpu::linear(x.data(), p.rows, *p.weight, p.outputs, nullptr, y.data(), threads,
                          false);
      else
        invariant[i].run(x.data(), p.rows, y.data(), false, pool);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double best[2] = {1e30, 1e30};
  for (int repeat = 0; repeat < 20; ++repeat)
    for (int library = 0; library < 2; ++library)
      best[library] = std::min(best[library], seconds(library == 1));
  const double flops = ceiling.rowFlops * rows + ceiling.logitRowFlops * logitRows;
  ceiling.invariantRate = flops / best[0];
  ceiling.libraryRate = flops / best[1];
  return ceiling;
}

int usage() {
  std::fprintf(stderr, "usage: dlm-bench-engine MODEL.dlm [--concurrency N] [--requests N] "
                       "[--repeats N] [--threads N] [--cache none|prefix] [--knob name=value] "
                       "[--batch-invariant]\n");
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (flag == "--concurrency") args.concurrency = std::atoi(value().c_str());
    else if (flag == "--requests") args.requests = std::atoi(value().c_str());
    else if (flag == "--repeats") args.repeats = std::atoi(value().c_str());
    else if (flag == "--threads") args.threads = std::atoi(value().c_str());
    else if (flag == "--cache")
      args.cache = value();
    else if (flag == "--batch-invariant")
      args.batchInvariant = true;
    else if (flag == "--knob") {
      const std::string kv = value();
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) return usage();
      args.knobs[kv.substr(0, eq)] = std::atoll(kv.substr(eq + 1).c_str());
    } else if (flag.rfind("--", 0) != 0 && args.artifact.empty()) args.artifact = flag;
    else return usage();
  }
  if (args.artifact.empty() || args.concurrency < 1 || args.requests < 1 || args.repeats < 1)
    return usage();
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(args.artifact);
  if (!model) {
    std::fprintf(stderr, "dlm-bench-engine: %s\n", model.status().message().c_str());
    return 1;
  }
  SessionOptions options;
  options.threads = args.threads;
  options.kvPages = 4096;
  StatusOr<std::unique_ptr<Session>> session = Session::create(*model, options);
  engine::EngineOptions engineOptions;
  engineOptions.session = options;
  engineOptions.session.batchInvariant = args.batchInvariant;
  StatusOr<std::unique_ptr<engine::Engine>> served = engine::Engine::create(*model, engineOptions);
  if (!session || !served) {
    std::fprintf(stderr, "dlm-bench-engine: %s\n",
                 (!session ? session.status() : served.status()).message().c_str());
    return 1;
  }
  // One pass over the requests from `clients` threads (0: the session, one at a time): seconds.
  std::vector<std::vector<int32_t>> outputs(args.requests);
  int64_t tokens = 0;
  auto pass = [&](int clients) -> StatusOr<double> {
    std::vector<std::string> errors(args.requests);
    auto serve = [&](int first, int step) {
      for (int i = first; i < args.requests; i += step) {
        StatusOr<GenerateResult> out = clients == 0 ? (*session)->generate(request(args, i))
                                                    : (*served)->generate(request(args, i));
        if (out)
          outputs[i] = out->outputIds;
        else
          errors[i] = out.status().message();
      }
    };
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < std::max(clients, 1); ++c)
      threads.emplace_back(serve, c, std::max(clients, 1));
    for (std::thread &t : threads)
      t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tokens = 0;
    for (int i = 0; i < args.requests; ++i) {
      if (!errors[i].empty())
        return Status::error("request " + std::to_string(i) + ": " + errors[i]);
      tokens += static_cast<int64_t>(outputs[i].size());
    }
    return seconds;
  };
  // Seconds and tokens/s of each pass: the session, the engine one at a time, N clients (outputs
  // may differ in length between them when the engine is not batch-invariant).
  std::vector<double> alone, engineAlone, together, aloneRate, engineAloneRate, togetherRate;
  int differing = 0;
  // The engine's statistics over its concurrent passes alone.
  engine::SchedulerStats stats;
  auto add = [&](const engine::SchedulerStats &before, const engine::SchedulerStats &after) {
    stats.runs += after.runs - before.runs;
    stats.forwards += after.forwards - before.forwards;
    stats.fedTokens += after.fedTokens - before.fedTokens;
    stats.logitRows += after.logitRows - before.logitRows;
    stats.mostPerRun = after.mostPerRun;
  };
  // Keeps a pass's seconds and its tokens/s; false when it failed.
  auto record = [&](const StatusOr<double> &s, std::vector<double> &times,
                    std::vector<double> &rates) {
    if (s) {
      times.push_back(*s);
      rates.push_back(static_cast<double>(tokens) / *s);
    }
    return static_cast<bool>(s);
  };
  for (int repeat = 0; repeat < args.repeats; ++repeat) {
    StatusOr<double> seconds = pass(0);
    if (record(seconds, alone, aloneRate))
      record(seconds = pass(1), engineAlone, engineAloneRate);
    const std::vector<std::vector<int32_t>> one = outputs;
    const engine::SchedulerStats before = (*served)->stats();
    if (seconds)
      record(seconds = pass(args.concurrency), together, togetherRate);
    add(before, (*served)->stats());
    if (!seconds) {
      std::fprintf(stderr, "dlm-bench-engine: %s\n", seconds.status().message().c_str());
      return 1;
    }
    for (int i = 0; i < args.requests; ++i)
      differing += one[i] != outputs[i];
  }
  const double a = median(alone), e = median(engineAlone), t = median(together);
  const double aRate = median(aloneRate), eRate = median(engineAloneRate),
               tRate = median(togetherRate);
  const int64_t runs = std::max<int64_t>(stats.runs, 1);
  StatusOr<GemmCeiling> gemms = measureGemms(**model, (stats.fedTokens + runs - 1) / runs,
                                             (stats.logitRows + runs - 1) / runs, args.threads);
  if (!gemms) {
    std::fprintf(stderr, "dlm-bench-engine: %s\n", gemms.status().message().c_str());
    return 1;
  }
  const char *mode = args.batchInvariant ? "batch-invariant" : "fast path";
  std::printf("%d requests, %lld generated tokens in the last pass, %d threads, medians of %d "
              "repeats\n",
              args.requests, static_cast<long long>(tokens), args.threads, args.repeats);
  std::printf("| | seconds | tokens/s | vs the session |\n|---|---|---|---|\n");
  std::printf("| one at a time (Session, fast path: the baseline) | %.3f | %.1f | 1.00x |\n", a,
              aRate);
  std::printf("| one at a time (Engine, %s) | %.3f | %.1f | %.2fx |\n", mode, e, eRate,
              eRate / aRate);
  std::printf("| %d concurrent (Engine, %s) | %.3f | %.1f | %.2fx |\n", args.concurrency, mode, t,
              tRate, tRate / aRate);
  std::printf("%.2f request forwards per packed run (most %lld); concurrent outputs that differ "
              "from the engine's one-at-a-time ones: %d of %d\n",
              static_cast<double>(stats.forwards) / std::max<int64_t>(stats.runs, 1),
              static_cast<long long>(stats.mostPerRun), differing, args.requests * args.repeats);
  // Every repeat ran the same requests, so a pass is the concurrent passes' totals over the
  // repeats.
  const double passFlops = (gemms->rowFlops * static_cast<double>(stats.fedTokens) +
                            gemms->logitRowFlops * static_cast<double>(stats.logitRows)) /
                           args.repeats;
  const double best = std::max(gemms->invariantRate, gemms->libraryRate);
  std::printf("GEMMs: %.2f GFLOP per pass; one at a time %.1f GFLOP/s, concurrent %.1f GFLOP/s "
              "(over the whole time); at a packed run's %lld rows InvariantGemm %.1f, oneDNN "
              "sgemm %.1f GFLOP/s\n",
              passFlops / 1e9, passFlops / a / 1e9, passFlops / t / 1e9,
              static_cast<long long>((stats.fedTokens + runs - 1) / runs),
              gemms->invariantRate / 1e9, gemms->libraryRate / 1e9);
  std::printf("float32 ceiling: the GEMMs alone at the better float32 rate take %.3f s, so no "
              "scheduler on float32 GEMMs can exceed %.2fx the session on this machine\n",
              passFlops / best, a / (passFlops / best));
  return args.batchInvariant && differing > 0 ? 1 : 0;
}
