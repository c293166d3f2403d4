// dlm-serve: an OpenAI-compatible HTTP server for one compiled artifact (docs/design/serving.md
// §6), over the serving engine.
//
//   dlm-serve MODEL.dlm [--host 127.0.0.1] [--port 8000] [--device cpu|cuda|cuda-emu]
//             [--threads N] [--kv-pages N] [--max-batch N] [--max-queue N]
//             [--tokens-per-forward N] [dlm-run's knob flags, --seed, --cache: server defaults]
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,
// GET /metrics (RequestParser.h says which fields a request takes). SIGINT / SIGTERM stop
// accepting connections, let the running requests finish, and exit 0. Bad arguments: exit 2;
// a model or engine that cannot start: exit 1.
#include "runtime/engine/Engine.h"
#include "tools/dlm-run/GenerationFlags.h"
#include "tools/dlm-run/RandomWeights.h"
#include "tools/dlm-serve/HttpServer.h"
#include "tools/dlm-serve/ServedModel.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <pthread.h>
#include <thread>

namespace {

constexpr int kBadArguments = 2;
constexpr int kFailed = 1;

const char *kUsage =
    "usage: dlm-serve MODEL.dlm [--host 127.0.0.1] [--port 8000] [--device cpu|cuda|cuda-emu]\n"
    "                 [--threads N] [--kv-pages N] [--max-batch N] [--max-queue N]\n"
    "                 [--tokens-per-forward N] [--verify]\n"
    "                 [dlm-run's knob flags, --seed N, --cache MODE: defaults for requests]\n"
    "--kv-pages: the KV pool every request shares (default: eight of the longest sequence);\n"
    "--max-batch: the most requests running at once (default: as many as the pool admits);\n"
    "--max-queue: the most requests waiting for admission (default: no limit; past it 429);\n"
    "--port 0 picks a free port (printed on stderr);\n"
    "--verify: check the artifact's integrity hashes before serving it.\n";

int badArguments(const std::string &message) {
  std::cerr << "dlm-serve: " << message << "\n" << kUsage;
  return kBadArguments;
}

} // namespace

int main(int argc, char **argv) {
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  dlm::engine::EngineOptions options;
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
                     flag == "--max-queue" || flag == "--tokens-per-forward"
                 ? "bad value '" + value + "' for " + flag
                 : "unknown option " + flag;
    if (flag == "--port" && number <= 65535)
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
  std::string error;
  switch (dlm::tools::walkCommandLine(argc, argv, common, base, options.session, toolFlag,
                                      error)) {
  case dlm::tools::CommandLine::help:
    std::cout << kUsage;
    return 0;
  case dlm::tools::CommandLine::bad:
    return badArguments(error);
  case dlm::tools::CommandLine::ok:
    break;
  }
  if (common.json)
    return badArguments("unknown option --json");

  // Signals go to one thread, which stops the server; the others never see them. A client
  // that goes away must not kill the server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  dlm::StatusOr<std::shared_ptr<dlm::LoadedModel>> model =
      dlm::LoadedModel::open(common.artifact, {common.verify});
  if (!model) {
    std::cerr << "dlm-serve: " << model.status().message() << "\n";
    return kFailed;
  }
  dlm::tools::warnIfRandomWeights("dlm-serve", **model);
  dlm::StatusOr<std::unique_ptr<dlm::engine::Engine>> engine =
      dlm::engine::Engine::create(*model, options);
  if (!engine) {
    std::cerr << "dlm-serve: " << engine.status().message() << "\n";
    return kFailed;
  }
  const std::string id = dlm::serve::modelIdFromPath(common.artifact);
  dlm::serve::HttpServer server(**engine, dlm::serve::describeModel(**model, id), base);
  const int bound = server.bind(host, static_cast<int>(port));
  if (bound < 0) {
    std::cerr << "dlm-serve: cannot listen on " << host << ":" << port << "\n";
    return kFailed;
  }
  const dlm::engine::SchedulerStats stats = (*engine)->stats();
  std::fprintf(stderr, "dlm-serve: serving '%s' on http://%s:%d (%s, %lld KV pages)\n",
               id.c_str(), host.c_str(), bound, options.session.backend.c_str(),
               static_cast<long long>(stats.kvPages));

  // The signal thread only stops the server: new connections are refused, requests on open
  // ones get 503, the running ones finish and serve() returns once their connections end.
  std::atomic<bool> exiting{false};
  std::thread signalThread([&server, &exiting, signals] {
    int signal = 0;
    sigwait(&signals, &signal);
    if (exiting)
      return;
    std::fprintf(stderr, "dlm-serve: %s: draining the running requests\n",
                 signal == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
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
