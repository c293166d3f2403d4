#include "tools/dlm-serve/HttpServer.h"

#include "tools/dlm-serve/ApiError.h"
#include "tools/dlm-run/OutputText.h"
#include "tools/dlm-serve/RequestParser.h"
#include "tools/dlm-serve/ResponseJson.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <system_error>
#include <random>
#include <thread>

namespace dlm::serve {

namespace {

using Clock = std::chrono::steady_clock;

// How long the writes of a request cancelled at the drain's end may take: its error event must
// not wait on a client that does not read.
constexpr std::chrono::milliseconds kAbortWrites{1000};
// Open connections past this are closed as soon as accepted (each holds a thread).
constexpr int64_t kMaxConnections = 4096;

// One request's generation on its own thread; its committed blocks wait here for the
// connection's thread.
struct Generation {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::vector<int32_t>> blocks;
  bool done = false;
  Status status = Status::ok();
  GenerationStats stats;
  std::atomic<bool> cancel{false};
  std::thread worker;

  void start(engine::Engine &engine, GenerateRequest request) {
    try {
      run(engine, std::move(request));
    } catch (const std::system_error &) {
      // No thread to run it on (the process's limit): refused like a full server.
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      status = Status::error(StatusCode::unavailable,
                             "the server cannot start a thread for the request");
    }
  }
  void run(engine::Engine &engine, GenerateRequest request) {
    worker = std::thread([this, &engine, request = std::move(request)] {
      StatusOr<GenerateResult> result = engine.generate(
          request,
          [this](const StreamedBlock &block) {
            std::lock_guard<std::mutex> lock(mutex);
            blocks.emplace_back(block.ids, block.ids + block.count);
            changed.notify_all();
          },
          &cancel);
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      if (result)
        stats = result->stats;
      else
        status = result.status();
      changed.notify_all();
    });
  }
  ~Generation() {
    cancel = true;
    if (worker.joinable())
      worker.join();
  }

  enum class Next { block, done };
  // Waits for the next block or the end, cancelling once `shouldCancel` says so (asked between
  // blocks too: they may come faster than the wait's period).
  Next next(std::vector<int32_t> &block, const std::function<bool()> &shouldCancel) {
    while (true) {
      const bool stop = !cancel && shouldCancel();
      std::unique_lock<std::mutex> lock(mutex);
      if (stop)
        cancel = true;
      if (!blocks.empty()) {
        block = std::move(blocks.front());
        blocks.pop_front();
        return Next::block;
      }
      if (done)
        return Next::done;
      changed.wait_for(lock, std::chrono::milliseconds(20));
    }
  }
};

Outcome outcomeOf(const Status &status) {
  switch (status.code()) {
  case StatusCode::contextLengthExceeded:
    return Outcome::invalidRequest;
  case StatusCode::queueFull:
    return Outcome::queueFull;
  case StatusCode::unavailable:
    return Outcome::unavailable;
  case StatusCode::cancelled:
    return Outcome::cancelled;
  case StatusCode::failed:
    return Outcome::invalidRequest;
  }
  return Outcome::failed;
}

void sendError(Responder &res, const ApiError &error) {
  HttpHeaders headers;
  if (error.retryAfterSeconds > 0)
    headers.emplace_back("Retry-After", std::to_string(error.retryAfterSeconds));
  res.send(error.httpStatus, dumpJson(error.toJson()), "application/json", headers);
}

void sendJson(Responder &res, const nlohmann::json &value) {
  res.send(200, dumpJson(value), "application/json");
}

ApiError shuttingDown(std::string message) {
  return fromStatus(Status::error(StatusCode::unavailable, std::move(message)));
}

std::string randomHex() {
  std::random_device device;
  char text[20];
  std::snprintf(text, sizeof text, "%08x%08x-", device(), device());
  return text;
}

int64_t unixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A listening socket on host:port, or -1 with `error` set.
int listenOn(const std::string &host, int port, int backlog, std::string &error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo *found = nullptr;
  const std::string service = std::to_string(port);
  if (int code = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found)) {
    error = "cannot resolve '" + host + "': " + ::gai_strerror(code);
    return -1;
  }
  int fd = -1;
  for (addrinfo *address = found; address && fd < 0; address = address->ai_next) {
    fd = ::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                  address->ai_protocol);
    if (fd < 0)
      continue;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, address->ai_addr, address->ai_addrlen) != 0 || ::listen(fd, backlog) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

int boundPort(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &size) != 0)
    return -1;
  if (address.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<sockaddr_in6 *>(&address)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in *>(&address)->sin_port);
}

} // namespace

struct HttpServer::Impl {
  engine::Engine &engine;
  ServedModel model;
  GenerateRequest base;
  HttpServerOptions options;
  ServeMetrics metrics;
  const int64_t created = unixSeconds();
  std::atomic<int64_t> nextId{1};
  // Response ids are this server's random prefix and a count: unique across restarts too.
  const std::string idPrefix = randomHex();

  int listenFd = -1;
  int wakeRead = -1, wakeWrite = -1;
  std::atomic<bool> draining{false};
  std::atomic<bool> aborting{false};

  // The open connections; `busy`: handling a complete request (a drain lets it finish);
  // `finished`: its thread is done with everything but returning (reap() joins it).
  struct Connection {
    explicit Connection(int fd) : stream(fd) {}
    SocketStream stream;
    bool busy = false;
    bool closed = false;
    bool finished = false;
    std::thread thread;
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::list<Connection> connections;

  Impl(engine::Engine &engine, ServedModel model, GenerateRequest base,
       HttpServerOptions options)
      : engine(engine), model(std::move(model)), base(std::move(base)),
        options(std::move(options)) {
    int pipe[2];
    if (::pipe2(pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
      wakeRead = pipe[0];
      wakeWrite = pipe[1];
    }
  }
  ~Impl() {
    for (int fd : {listenFd, wakeRead, wakeWrite})
      if (fd >= 0)
        ::close(fd);
  }

  void wake() {
    const char byte = 0;
    [[maybe_unused]] ssize_t ignored = ::write(wakeWrite, &byte, 1);
    changed.notify_all();
  }

  void serve() {
    while (!draining) {
      pollfd entries[2] = {{listenFd, POLLIN, 0}, {wakeRead, POLLIN, 0}};
      if (::poll(entries, 2, 1000) < 0 && errno != EINTR)
        break;
      reap();
      if (draining)
        break;
      if (entries[0].revents & POLLIN)
        accept();
    }
    // No new connections from here on.
    ::close(listenFd);
    listenFd = -1;
    {
      std::unique_lock<std::mutex> lock(mutex);
      const Clock::time_point deadline = Clock::now() + options.drainTimeout;
      changed.wait_until(lock, deadline, [&] { return allFinished() || aborting; });
      if (!allFinished()) {
        aborting = true;
        for (Connection &connection : connections)
          connection.stream.tightenDeadline(Clock::now() + kAbortWrites);
      }
      changed.wait(lock, [&] { return allFinished(); });
    }
    reap();
  }

  bool allFinished() const {
    return std::all_of(connections.begin(), connections.end(),
                       [](const Connection &c) { return c.finished; });
  }

  // Joins the threads of finished connections and forgets them.
  void reap() {
    std::list<Connection> done;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto it = connections.begin(); it != connections.end();) {
        auto next = std::next(it);
        if (it->finished)
          done.splice(done.end(), connections, it);
        it = next;
      }
    }
    for (Connection &connection : done)
      if (connection.thread.joinable())
        connection.thread.join();
  }

  void accept() {
    const int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: the connection waits in the backlog; do not spin on it.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (static_cast<int64_t>(connections.size()) >= kMaxConnections) {
      ::close(fd);
      return;
    }
    Connection *connection = &connections.emplace_back(fd);
    try {
      connection->thread = std::thread([this, connection] { runConnection(connection); });
    } catch (const std::system_error &) {
      connection->finished = true; // no thread: reap() closes its socket
    }
  }

  void runConnection(Connection *connection) {
    {
      ConnectionHooks hooks;
      hooks.beginRequest = [&] {
        std::lock_guard<std::mutex> lock(mutex);
        connection->busy = !connection->closed;
        return connection->busy;
      };
      hooks.endRequest = [&] {
        std::lock_guard<std::mutex> lock(mutex);
        connection->busy = false;
        return !draining.load();
      };
      hooks.closing = [&] { return draining.load(); };
      hooks.handle = [this](const HttpRequest &request, Responder &res) { route(request, res); };
      serveConnection(connection->stream, options.limits, hooks);
    }
    std::lock_guard<std::mutex> lock(mutex);
    connection->finished = true;
    connection->stream.shutdown();
    changed.notify_all();
  }

  // The drain's start: connections without a complete request are closed.
  void beginDrain() {
    if (draining.exchange(true))
      return;
    std::lock_guard<std::mutex> lock(mutex);
    for (Connection &connection : connections) {
      if (!connection.busy) {
        connection.closed = true;
        connection.stream.shutdown();
      }
    }
    wake();
  }

  void route(const HttpRequest &req, Responder &res) {
    const bool get = req.method == "GET" || req.method == "HEAD", post = req.method == "POST";
    if (req.path == "/v1/completions" || req.path == "/v1/chat/completions") {
      if (!post)
        return methodNotAllowed(req, res, "POST");
      return generate(req.path == "/v1/completions" ? Endpoint::completions
                                                    : Endpoint::chatCompletions,
                      req, res);
    }
    const std::string modelsPrefix = "/v1/models/";
    const bool known = req.path == "/v1/models" || req.path == "/health" ||
                       req.path == "/metrics" || req.path.rfind(modelsPrefix, 0) == 0;
    if (known && !get)
      return methodNotAllowed(req, res, "GET, HEAD");
    if (req.path == "/v1/models")
      return sendJson(res, modelListJson(model.id, created));
    if (req.path.rfind(modelsPrefix, 0) == 0 && req.path.size() > modelsPrefix.size()) {
      const std::string requested = req.path.substr(modelsPrefix.size());
      if (requested != model.id)
        return sendError(res, modelNotFound(requested));
      return sendJson(res, modelListJson(model.id, created)["data"][0]);
    }
    if (req.path == "/health") {
      res.send(draining ? 503 : 200,
               draining ? "{\"status\":\"shutting down\"}" : "{\"status\":\"ok\"}",
               "application/json");
      return;
    }
    if (req.path == "/metrics") {
      res.send(200, metrics.prometheus(engine.stats()), "text/plain; version=0.0.4; charset=utf-8");
      return;
    }
    ApiError error;
    error.httpStatus = 404;
    error.message = "no route " + req.method + " " + req.path;
    error.code = "not_found";
    sendError(res, error);
  }

  void methodNotAllowed(const HttpRequest &req, Responder &res, const std::string &allowed) {
    ApiError error;
    error.httpStatus = 405;
    error.message = req.path + " takes " + allowed + ", not " + req.method;
    error.code = "method_not_allowed";
    res.send(405, dumpJson(error.toJson()), "application/json", {{"Allow", allowed}});
  }

  void generate(Endpoint endpoint, const HttpRequest &req, Responder &res);
};

void HttpServer::Impl::generate(Endpoint endpoint, const HttpRequest &req, Responder &res) {
  if (draining) {
    metrics.requestEnded(Outcome::unavailable);
    return sendError(res, shuttingDown("the server is shutting down"));
  }
  std::variant<ParsedRequest, ApiError> parsedOrError =
      parseRequest(endpoint, req.body, model, base);
  if (ApiError *error = std::get_if<ApiError>(&parsedOrError)) {
    metrics.requestEnded(Outcome::invalidRequest);
    return sendError(res, *error);
  }
  ParsedRequest parsed = std::move(std::get<ParsedRequest>(parsedOrError));
  auto generation = std::make_shared<Generation>();
  generation->start(engine, parsed.request);

  ResponseIdentity identity;
  identity.endpoint = endpoint;
  identity.id = std::string(endpoint == Endpoint::chatCompletions ? "chatcmpl-" : "cmpl-") +
                idPrefix + std::to_string(nextId++);
  identity.created = unixSeconds();
  identity.model = model.id;
  const LoadedModel &loaded = engine.model();
  tools::OutputText output(
      loaded.tokenizer(), [&loaded](int32_t id) { return loaded.tokenFacts().isEos(id); },
      parsed.maxTokens, parsed.stop);
  Usage usage;
  usage.promptTokens = static_cast<int64_t>(parsed.request.promptIds.size());

  // The client's leaving (a reset, a failed write) and the drain's end cancel the generation.
  bool gone = false;
  auto shouldCancel = [&] {
    if (!gone && res.peerGone())
      gone = true;
    return gone || aborting.load();
  };
  // Whether an EOS, a stop string or max_tokens ended the output (then our own cancel is a
  // success); read before output.finish(), which ends every output.
  bool outputEnded = false;
  // A cancellation that is neither the client's nor ours is the drain's end.
  auto abortedError = [&]() -> std::optional<ApiError> {
    if (generation->status.code() == StatusCode::cancelled && !outputEnded && aborting)
      return shuttingDown("the server is shutting down: the request was cancelled at the end "
                          "of the drain (dlm-serve --drain-timeout)");
    return std::nullopt;
  };
  // Ends the request: its outcome (an error after the first block included) and counts.
  auto conclude = [&]() -> std::optional<ApiError> {
    const Status &status = generation->status;
    if (gone) {
      metrics.requestEnded(Outcome::cancelled);
      return std::nullopt;
    }
    if (std::optional<ApiError> error = abortedError()) {
      metrics.requestEnded(Outcome::unavailable);
      return error;
    }
    // Our own cancel after a stop string or max_tokens is a success.
    if (!status.isOk() && !(status.code() == StatusCode::cancelled && outputEnded)) {
      metrics.requestEnded(outcomeOf(status));
      return fromStatus(status);
    }
    metrics.generated(output.completionTokens(), generation->stats.forwards);
    metrics.requestEnded(Outcome::success);
    return std::nullopt;
  };

  // Until the first block (or the end) the response can still be an error with its status.
  std::vector<int32_t> block;
  bool have = generation->next(block, shouldCancel) == Generation::Next::block;
  if (!have && !generation->status.isOk()) {
    std::optional<ApiError> error = conclude();
    if (error)
      sendError(res, *error);
    return;
  }

  if (!parsed.stream) {
    std::string text;
    while (have) {
      text += output.push(block.data(), static_cast<int64_t>(block.size()));
      if (output.finished())
        generation->cancel = true; // a stop string, EOS or max_tokens: nothing more is needed
      have = generation->next(block, shouldCancel) == Generation::Next::block;
    }
    outputEnded = output.finished();
    text += output.finish();
    if (std::optional<ApiError> error = conclude())
      return sendError(res, *error);
    if (gone)
      return;
    usage.completionTokens = output.completionTokens();
    sendJson(res, completionJson(identity, text, output.reason(), usage));
    return;
  }

  auto write = [&](const std::string &event) {
    if (!gone && !res.writeStream(event)) {
      gone = true;
      generation->cancel = true;
    }
  };
  res.beginStream("text/event-stream", {{"Cache-Control", "no-cache"}});
  bool firstChunk = true;
  // Chat streams open with the role.
  if (endpoint == Endpoint::chatCompletions) {
    write(sseEvent(chunkJson(identity, "", true, tools::FinishReason::none, parsed.includeUsage)));
    firstChunk = false;
  }
  while (have && !gone) {
    const std::string delta = output.push(block.data(), static_cast<int64_t>(block.size()));
    if (output.finished())
      generation->cancel = true;
    if (!delta.empty()) {
      write(sseEvent(chunkJson(identity, delta, firstChunk, tools::FinishReason::none,
                               parsed.includeUsage)));
      firstChunk = false;
    }
    have = generation->next(block, shouldCancel) == Generation::Next::block;
  }
  // Drain to the end (the generation stops at its next forward once cancelled).
  while (generation->next(block, shouldCancel) == Generation::Next::block) {
  }
  outputEnded = output.finished();
  const std::string tail = output.finish();
  if (std::optional<ApiError> error = conclude()) {
    write(sseEvent(error->toJson()));
  } else if (!gone) {
    write(sseEvent(chunkJson(identity, tail, firstChunk, output.reason(), parsed.includeUsage)));
    if (parsed.includeUsage) {
      usage.completionTokens = output.completionTokens();
      write(sseEvent(usageChunkJson(identity, usage)));
    }
  }
  write(kSseDone);
  if (!gone)
    res.endStream();
}

HttpServer::HttpServer(engine::Engine &engine, ServedModel model, GenerateRequest base,
                       HttpServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(model), std::move(base),
                                   std::move(options))) {}
HttpServer::~HttpServer() = default;

int HttpServer::bind(const std::string &host, int port, std::string &error) {
  if (impl_->wakeRead < 0) {
    error = "cannot make the server's wake-up pipe";
    return -1;
  }
  impl_->listenFd = listenOn(host, port, impl_->options.backlog, error);
  return impl_->listenFd < 0 ? -1 : boundPort(impl_->listenFd);
}

void HttpServer::serve() { impl_->serve(); }

void HttpServer::stop() { impl_->beginDrain(); }

void HttpServer::abort() {
  impl_->beginDrain();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->aborting = true;
  impl_->changed.notify_all();
}

} // namespace dlm::serve
