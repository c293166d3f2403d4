// dlm-serve's HTTP glue on cpp-httplib (a thread per connection): the routes, a generation per
// request on its own thread, committed blocks passed to the connection's thread (the engine's
// block callbacks must not block: a slow client must not stall the packed runs), disconnects
// turned into cancellation. Everything else is in DlmServe.
#pragma once

#include "runtime/engine/Engine.h"
#include "tools/dlm-serve/ServeMetrics.h"
#include "tools/dlm-serve/ServedModel.h"

#include <memory>
#include <string>

namespace dlm::serve {

class HttpServer {
public:
  // `base` holds the server's default knobs, seed and cache.
  HttpServer(engine::Engine &engine, ServedModel model, GenerateRequest base);
  ~HttpServer();

  // Binds (port 0: any free port); returns the port, or -1.
  int bind(const std::string &host, int port);
  // Serves until stop(); returns once every connection has ended.
  bool serve();
  // Stops accepting connections; thread-safe, callable from a signal-handling thread.
  void stop();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace dlm::serve
