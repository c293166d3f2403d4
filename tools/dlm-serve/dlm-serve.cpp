// dlm-serve: an OpenAI-compatible HTTP server for one compiled artifact (docs/design/serving.md
// §6), over the serving engine.
//
//   dlm-serve MODEL.dlm [--host 127.0.0.1] [--port 8000] [--device cpu|cuda|cuda-emu]
//             [--threads N] [--kv-pages N] [--max-batch N] [--max-queue N]
//             [--tokens-per-forward N] [--backlog N] [--max-body-bytes N] [--read-timeout S]
//             [--drain-timeout S] [--batch-invariant]
//             [dlm-run's knob flags, --seed, --cache: server defaults]
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,
// GET /metrics (RequestParser.h says which fields a request takes). SIGINT / SIGTERM drain: no
// new connections, those without a complete request closed, every admitted request (streams
// included) finished; past --drain-timeout, or at a second signal, what is left is cancelled and
// answered with an error; then exit 0. Bad arguments: exit 2; a model or engine that cannot
// start: exit 1.
#include "runtime/engine/Engine.h"
#include "tools/dlm-run/GenerationFlags.h"
#include "tools/dlm-run/OpenModel.h"
#include "tools/dlm-serve/HttpServer.h"
#include "tools/dlm-serve/ServedModel.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <pthread.h>
#include <thread>

namespace {

using dlm::tools::kFailed;

const char *kUsage =
    "usage: dlm-serve MODEL.dlm [--host 127.0.0.1] [--port 8000] [--device cpu|cuda|cuda-emu]\n"
    "                 [--threads N] [--kv-pages N] [--max-batch N] [--max-queue N]\n"
    "                 [--tokens-per-forward N] [--verify] [--backlog N] [--max-body-bytes N]\n"
    "                 [--read-timeout S] [--drain-timeout S] [--batch-invariant]\n"
    "                 [dlm-run's knob flags, --seed N, --cache MODE: defaults for requests]\n"
    "--kv-pages: the KV pool every request shares (default: eight of the longest sequence);\n"
    "--max-batch: the most requests running at once (default: as many as the pool admits);\n"
    "--max-queue: the most requests waiting for admission (default: no limit; past it 429);\n"
    "--port 0 picks a free port (printed on stderr);\n"
    "--verify: check the artifact's integrity hashes before serving it;\n"
    "--backlog: connections waiting to be accepted (default 1024);\n"
    "--max-body-bytes: larger request bodies are refused with 413 unread (default 8 MiB);\n"
    "--read-timeout: seconds a request's headers and body may take (default 30; past it 408);\n"
    "--drain-timeout: seconds SIGTERM/SIGINT let admitted requests run before cancelling them\n"
    "  (default 30; a second signal cancels them at once);\n"
    "--batch-invariant: a request's temperature-0 output is the same alone or under load, at a\n"
    "  cost on the CPU (weights read as float32; see the README).\n";

int badArguments(const std::string &message) {
  return dlm::tools::badArguments("dlm-serve", kUsage, message);
}

} // namespace

int main(int argc, char **argv) {
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  dlm::engine::EngineOptions options;
  dlm::serve::HttpServerOptions serverOptions;
  dlm::GenerateRequest base;
  auto toolFlag = [&](const std::string &flag, const std::string &value) -> std::string {
    int64_t number = 0;
    const bool isNumber = dlm::tools::parseInteger(value, number) && number >= 0;
    if (flag == "--host") {
      host = value;
      return "";
    }
    if (!isNumber)
      return flag == "--port" || flag == "--kv-pages" || flag == "--max-batch" ||
                     flag == "--max-queue" || flag == "--tokens-per-forward" ||
                     flag == "--backlog" || flag == "--max-body-bytes" ||
                     flag == "--read-timeout" || flag == "--drain-timeout"
                 ? "bad value '" + value + "' for " + flag
                 : "unknown option " + flag;
    constexpr int64_t kLongestSeconds = 24 * 3600;
    if (flag == "--backlog" && number > 0 && number <= 65535)
      serverOptions.backlog = static_cast<int>(number);
    else if (flag == "--max-body-bytes" && number > 0)
      serverOptions.limits.maxBodyBytes = number;
    else if (flag == "--read-timeout" && number > 0 && number <= kLongestSeconds)
      serverOptions.limits.readTimeout = std::chrono::seconds(number);
    else if (flag == "--drain-timeout" && number <= kLongestSeconds)
      serverOptions.drainTimeout = std::chrono::seconds(number);
    else if (flag == "--backlog" || flag == "--max-body-bytes" || flag == "--read-timeout" ||
             flag == "--drain-timeout")
      return "bad value '" + value + "' for " + flag;
    else if (flag == "--port" && number <= 65535)
      port = number;
    else if (flag == "--kv-pages")
      options.session.kvPages = number;
    else if (flag == "--max-batch")
      options.maxRunning = number;
    else if (flag == "--max-queue")
      options.maxWaiting = number;
    else if (flag == "--tokens-per-forward" && number > 0)
      options.tokensPerForward = number;
    else if (flag == "--port" || flag == "--tokens-per-forward")
      return "bad value '" + value + "' for " + flag;
    else
      return "unknown option " + flag;
    return "";
  };
  dlm::tools::CommonArguments common;
  common.toolSwitches = {"--batch-invariant"};
  if (int status = dlm::tools::readCommandLine("dlm-serve", kUsage, argc, argv, common, base,
                                               options.session, toolFlag))
    return status < 0 ? 0 : status;
  if (common.json)
    return badArguments("unknown option --json");
  options.session.batchInvariant = common.switches.count("--batch-invariant") > 0;

  // Signals go to one thread, which stops the server; the others never see them. A client
  // that goes away must not kill the server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::shared_ptr<dlm::LoadedModel> model = dlm::tools::openModel("dlm-serve", common);
  if (!model)
    return kFailed;
  dlm::StatusOr<std::unique_ptr<dlm::engine::Engine>> engine =
      dlm::engine::Engine::create(model, options);
  if (!engine) {
    std::cerr << "dlm-serve: " << engine.status().message() << "\n";
    return kFailed;
  }
  const std::string id = dlm::serve::modelIdFromPath(common.artifact);
  dlm::serve::HttpServer server(**engine, dlm::serve::describeModel(*model, id), base,
                                serverOptions);
  std::string listenError;
  const int bound = server.bind(host, static_cast<int>(port), listenError);
  if (bound < 0) {
    std::cerr << "dlm-serve: cannot listen on " << host << ":" << port << ": " << listenError
              << "\n";
    return kFailed;
  }
  const dlm::engine::SchedulerStats stats = (*engine)->stats();
  std::fprintf(stderr, "dlm-serve: serving '%s' on http://%s:%d (%s, %lld KV pages%s)\n",
               id.c_str(), host.c_str(), bound, options.session.backend.c_str(),
               static_cast<long long>(stats.kvPages),
               (*engine)->sessionOptions().batchInvariant ? ", batch-invariant" : "");

  // The first signal begins the drain, a second ends it: what still runs is cancelled.
  std::atomic<bool> exiting{false};
  std::thread signalThread([&server, &exiting, signals] {
    for (int received = 0; received < 2; ++received) {
      int signal = 0;
      sigwait(&signals, &signal);
      if (exiting)
        return;
      const char *name = signal == SIGINT ? "SIGINT" : "SIGTERM";
      if (received == 0) {
        std::fprintf(stderr, "dlm-serve: %s: draining the admitted requests\n", name);
        server.stop();
      } else {
        std::fprintf(stderr, "dlm-serve: %s again: cancelling the running requests\n", name);
        server.abort();
      }
    }
  });

  server.serve();
  (*engine)->shutdown();
  // serve() may also end without a signal (the socket failed): wake the signal thread.
  exiting = true;
  pthread_kill(signalThread.native_handle(), SIGTERM);
  signalThread.join();
  std::fprintf(stderr, "dlm-serve: stopped\n");
  return 0;
}
