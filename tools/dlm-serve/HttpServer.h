// dlm-serve's HTTP server (a thread per connection, HttpConnection on Boost.Beast): the routes,
// a generation per request on its own thread, committed blocks passed to the connection's thread
// (the engine's block callbacks must not block: a slow client must not stall the packed runs),
// disconnects turned into cancellation, and a drain that loses nothing: stop() refuses new
// connections and closes those without a complete request, every admitted request (streaming or
// not) runs to its end; past the drain deadline, or on abort(), what is left is cancelled and ends
// with an error (a final SSE error event for a stream). Everything else is in DlmServe.
#pragma once

#include "runtime/engine/Engine.h"
#include "tools/dlm-serve/HttpConnection.h"
#include "tools/dlm-serve/ServeMetrics.h"
#include "tools/dlm-serve/ServedModel.h"

#include <chrono>
#include <memory>
#include <string>

namespace dlm::serve {

struct HttpServerOptions {
  HttpLimits limits;
  // Connections waiting to be accepted (listen(2)'s backlog): bursts beyond it wait for a
  // retransmission (about a second).
  int backlog = 1024;
  // How long stop() lets the admitted requests run before cancelling them.
  std::chrono::milliseconds drainTimeout{30000};
};

class HttpServer {
public:
  // `base` holds the server's default knobs, seed and cache.
  HttpServer(engine::Engine &engine, ServedModel model, GenerateRequest base,
             HttpServerOptions options = {});
  ~HttpServer();

  // Binds and listens (port 0: any free port); returns the port, or -1 with `error` set.
  int bind(const std::string &host, int port, std::string &error);
  // Serves until stop() and the drain are over; returns once every connection has ended.
  void serve();
  // Begins the drain; thread-safe, callable from a signal-handling thread.
  void stop();
  // Ends the drain now: running requests are cancelled and answered with an error.
  void abort();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace dlm::serve
