#include "tools/dlm-serve/HttpServer.h"

#include "tools/dlm-serve/ApiError.h"
#include "tools/dlm-serve/OutputText.h"
#include "tools/dlm-serve/RequestParser.h"
#include "tools/dlm-serve/ResponseJson.h"

#include <httplib.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace dlm::serve {

namespace {

// The socket of the connection `req` came on, or -1: cpp-httplib 0.11 does not hand it to
// handlers, so it is the open socket whose local and peer addresses are the request's.
int connectionSocket(const httplib::Request &req) {
  DIR *dir = ::opendir("/proc/self/fd");
  if (!dir)
    return -1;
  int found = -1;
  auto portAndAddress = [](const sockaddr_storage &address, int &port, std::string &text) {
    char buffer[INET6_ADDRSTRLEN] = {0};
    if (address.ss_family == AF_INET) {
      const auto *in = reinterpret_cast<const sockaddr_in *>(&address);
      port = ntohs(in->sin_port);
      ::inet_ntop(AF_INET, &in->sin_addr, buffer, sizeof buffer);
    } else if (address.ss_family == AF_INET6) {
      const auto *in6 = reinterpret_cast<const sockaddr_in6 *>(&address);
      port = ntohs(in6->sin6_port);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, buffer, sizeof buffer);
    } else {
      return false;
    }
    text = buffer;
    return true;
  };
  while (dirent *entry = ::readdir(dir)) {
    char *end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (!end || *end || entry->d_name[0] == '.')
      continue;
    sockaddr_storage local{}, peer{};
    socklen_t localSize = sizeof local, peerSize = sizeof peer;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr *>(&local), &localSize) ||
        ::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr *>(&peer), &peerSize))
      continue;
    int localPort = -1, peerPort = -1;
    std::string localText, peerText;
    if (!portAndAddress(local, localPort, localText) || !portAndAddress(peer, peerPort, peerText))
      continue;
    if (localPort == req.local_port && peerPort == req.remote_port &&
        peerText == req.remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

using Server = httplib::Server;

// cpp-httplib's own pool has a fixed number of threads; a server holding many requests open
// needs one per connection.
class ThreadPerConnection : public httplib::TaskQueue {
public:
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++active_;
    }
    std::thread([this, fn = std::move(fn)] {
      fn();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_ == 0)
        idle_.notify_all();
    }).detach();
  }
  void shutdown() override {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return active_ == 0; });
  }

private:
  std::mutex mutex_;
  std::condition_variable idle_;
  int64_t active_ = 0;
};

// Whether the peer closed the connection (or it broke). Pending bytes of a next request are not
// a close.
bool clientGone(int socket) {
  if (socket < 0)
    return false;
  pollfd entry{socket, POLLIN | POLLRDHUP, 0};
  if (::poll(&entry, 1, 0) <= 0)
    return false;
  if (entry.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
    return true;
  if (entry.revents & POLLIN) {
    char byte;
    return ::recv(socket, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

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
  // Waits for the next block or the end, cancelling when the client on `socket` goes away.
  Next next(std::vector<int32_t> &block, int socket, bool &gone) {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      // Checked between blocks too: blocks may come faster than the wait's period.
      if (!gone && clientGone(socket)) {
        gone = true;
        cancel = true;
      }
      if (!blocks.empty() || done)
        break;
      changed.wait_for(lock, std::chrono::milliseconds(20));
    }
    if (!blocks.empty()) {
      block = std::move(blocks.front());
      blocks.pop_front();
      return Next::block;
    }
    return Next::done;
  }
  bool hasBlock() {
    std::lock_guard<std::mutex> lock(mutex);
    return !blocks.empty();
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

void sendError(httplib::Response &res, const ApiError &error) {
  res.status = error.httpStatus;
  if (error.retryAfterSeconds > 0)
    res.set_header("Retry-After", std::to_string(error.retryAfterSeconds));
  res.set_content(dumpJson(error.toJson()), "application/json");
}

int64_t unixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace

struct HttpServer::Impl {
  engine::Engine &engine;
  ServedModel model;
  GenerateRequest base;
  ServeMetrics metrics;
  Server server;
  const int64_t created = unixSeconds();
  std::atomic<int64_t> nextId{1};
  std::atomic<bool> stopping{false};

  Impl(engine::Engine &engine, ServedModel model, GenerateRequest base)
      : engine(engine), model(std::move(model)), base(std::move(base)) {
    server.new_task_queue = [] { return new ThreadPerConnection; };
    // An idle keep-alive connection holds shutdown up until it times out (cpp-httplib waits
    // for it): keep that short.
    server.set_keep_alive_timeout(2);
    server.Post("/v1/completions", [this](const httplib::Request &req, httplib::Response &res) {
      generate(Endpoint::completions, req, res);
    });
    server.Post("/v1/chat/completions",
                [this](const httplib::Request &req, httplib::Response &res) {
                  generate(Endpoint::chatCompletions, req, res);
                });
    server.Get("/v1/models", [this](const httplib::Request &, httplib::Response &res) {
      res.set_content(dumpJson(modelListJson(this->model.id, created)), "application/json");
    });
    server.Get("/v1/models/(.+)", [this](const httplib::Request &req, httplib::Response &res) {
      if (req.matches[1] != this->model.id)
        return sendError(res, modelNotFound(req.matches[1]));
      res.set_content(dumpJson(modelListJson(this->model.id, created)["data"][0]),
                      "application/json");
    });
    server.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
      if (stopping) {
        res.status = 503;
        res.set_content("{\"status\":\"shutting down\"}", "application/json");
        return;
      }
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
      res.set_content(metrics.prometheus(this->engine.stats()),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
    // Unknown routes (and anything else that failed without a body) as OpenAI errors.
    server.set_error_handler([](const httplib::Request &req, httplib::Response &res) {
      if (!res.body.empty())
        return;
      ApiError error;
      error.httpStatus = res.status;
      error.message = res.status == 404 ? "no route " + req.method + " " + req.path
                                        : "HTTP " + std::to_string(res.status);
      error.code = res.status == 404 ? "not_found" : "";
      res.set_content(dumpJson(error.toJson()), "application/json");
    });
  }

  void generate(Endpoint endpoint, const httplib::Request &req, httplib::Response &res) {
    if (stopping) {
      metrics.requestEnded(Outcome::unavailable);
      return sendError(res, fromStatus(Status::error(StatusCode::unavailable,
                                                     "the server is shutting down")));
    }
    std::variant<ParsedRequest, ApiError> parsedOrError =
        parseRequest(endpoint, req.body, model, base);
    if (ApiError *error = std::get_if<ApiError>(&parsedOrError)) {
      metrics.requestEnded(Outcome::invalidRequest);
      return sendError(res, *error);
    }
    auto parsed = std::make_shared<ParsedRequest>(std::move(std::get<ParsedRequest>(parsedOrError)));
    const int socket = connectionSocket(req);
    auto generation = std::make_shared<Generation>();
    generation->start(engine, parsed->request);

    ResponseIdentity identity;
    identity.endpoint = endpoint;
    identity.id = std::string(endpoint == Endpoint::chatCompletions ? "chatcmpl-" : "cmpl-") +
                  std::to_string(nextId++);
    identity.created = unixSeconds();
    identity.model = model.id;
    const LoadedModel &loaded = engine.model();
    auto output = std::make_shared<OutputText>(
        loaded.tokenizer(), [&loaded](int32_t id) { return loaded.tokenFacts().isEos(id); },
        parsed->maxTokens, parsed->stop);
    Usage usage;
    usage.promptTokens = static_cast<int64_t>(parsed->request.promptIds.size());

    // Until the first block (or the end) the response can still be an error with its status.
    bool gone = false;
    std::vector<int32_t> first;
    Generation::Next next = generation->next(first, socket, gone);
    if (next == Generation::Next::done && !generation->status.isOk()) {
      if (gone) {
        metrics.requestEnded(Outcome::cancelled);
        res.status = 499;
        return;
      }
      metrics.requestEnded(outcomeOf(generation->status));
      return sendError(res, fromStatus(generation->status));
    }

    // Ends the request: its outcome (an error after the first block included) and counts.
    auto conclude = [this, generation, output](bool gone) -> std::optional<ApiError> {
      const Status &status = generation->status;
      // Our own cancel after a stop string or max_tokens is a success.
      if (gone) {
        metrics.requestEnded(Outcome::cancelled);
        return std::nullopt;
      }
      if (!status.isOk() && !(status.code() == StatusCode::cancelled && output->finished())) {
        metrics.requestEnded(outcomeOf(status));
        return fromStatus(status);
      }
      metrics.generated(output->completionTokens(), generation->stats.forwards);
      metrics.requestEnded(Outcome::success);
      return std::nullopt;
    };

    if (!parsed->stream) {
      std::string text;
      std::vector<int32_t> block = std::move(first);
      bool have = next == Generation::Next::block;
      while (have) {
        text += output->push(block.data(), static_cast<int64_t>(block.size()));
        if (output->finished())
          generation->cancel = true; // a stop string, EOS or max_tokens: nothing more is needed
        have = generation->next(block, socket, gone) == Generation::Next::block;
      }
      text += output->finish();
      if (std::optional<ApiError> error = conclude(gone))
        return sendError(res, *error);
      if (gone) {
        res.status = 499;
        return;
      }
      usage.completionTokens = output->completionTokens();
      res.set_content(dumpJson(completionJson(identity, text, output->reason(), usage)),
                      "application/json");
      return;
    }

    res.set_header("Cache-Control", "no-cache");
    auto pending = std::make_shared<std::vector<int32_t>>(std::move(first));
    auto havePending = std::make_shared<bool>(next == Generation::Next::block);
    res.set_chunked_content_provider(
        "text/event-stream",
        [generation, output, parsed, identity, usage, pending, havePending, socket, conclude](
            size_t, httplib::DataSink &sink) mutable {
          bool gone = false;
          auto write = [&](const std::string &event) {
            if (!gone && !sink.write(event.data(), event.size())) {
              gone = true;
              generation->cancel = true;
            }
            return !gone;
          };
          bool firstChunk = true;
          // Chat streams open with the role.
          if (identity.endpoint == Endpoint::chatCompletions) {
            write(sseEvent(chunkJson(identity, "", true, FinishReason::none, parsed->includeUsage)));
            firstChunk = false;
          }
          std::vector<int32_t> block = std::move(*pending);
          bool have = *havePending;
          while (have && !gone) {
            std::string delta = output->push(block.data(), static_cast<int64_t>(block.size()));
            if (output->finished())
              generation->cancel = true;
            if (!delta.empty()) {
              write(sseEvent(chunkJson(identity, delta, firstChunk, FinishReason::none,
                                       parsed->includeUsage)));
              firstChunk = false;
            }
            have = generation->next(block, socket, gone) == Generation::Next::block;
          }
          // Drain to the end (the generation stops at its next forward once cancelled).
          std::vector<int32_t> rest;
          while (generation->next(rest, socket, gone) == Generation::Next::block) {
          }
          std::string tail = output->finish();
          std::optional<ApiError> error = conclude(gone);
          if (gone)
            return false;
          if (error) {
            write(sseEvent(error->toJson()));
          } else {
            write(sseEvent(chunkJson(identity, tail, firstChunk, output->reason(),
                                     parsed->includeUsage)));
            if (parsed->includeUsage) {
              usage.completionTokens = output->completionTokens();
              write(sseEvent(usageChunkJson(identity, usage)));
            }
          }
          write(kSseDone);
          if (gone)
            return false;
          sink.done();
          return true;
        },
        [generation](bool) { generation->cancel = true; });
  }
};

HttpServer::HttpServer(engine::Engine &engine, ServedModel model, GenerateRequest base)
    : impl_(std::make_unique<Impl>(engine, std::move(model), std::move(base))) {}
HttpServer::~HttpServer() = default;

int HttpServer::bind(const std::string &host, int port) {
  if (port == 0)
    return impl_->server.bind_to_any_port(host.c_str());
  return impl_->server.bind_to_port(host.c_str(), port) ? port : -1;
}

bool HttpServer::serve() { return impl_->server.listen_after_bind(); }

void HttpServer::stop() {
  impl_->stopping = true;
  impl_->server.stop();
}

} // namespace dlm::serve
