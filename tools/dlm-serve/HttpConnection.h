// One HTTP/1.1 connection of dlm-serve, on Boost.Beast: requests read one after another from the
// same buffer (pipelined ones answered in order), each within limits that are refused with their
// status before anything large is read (413 body, 431 headers, 415 content encoding, 408 too
// slow, 400 malformed), and answered through a Responder, whole or as a chunked stream. Nothing
// here knows dlm's routes: HttpServer gives the handler.
#pragma once

#include "tools/dlm-serve/SocketStream.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlm::serve {

struct HttpLimits {
  int64_t maxBodyBytes = 8 << 20;
  int64_t maxHeaderBytes = 32 << 10;
  int64_t maxHeaderFields = 128;
  // A request's headers and body, from its first byte.
  std::chrono::milliseconds readTimeout{30000};
  // An open connection waiting for its next request.
  std::chrono::milliseconds idleTimeout{5000};
  // Each write of a response (a client that does not read).
  std::chrono::milliseconds writeTimeout{30000};
};

struct HttpRequest {
  std::string method; // HEAD is answered as GET, without the body
  std::string path;  // the target without its query
  std::string body;
  bool keepAlive = true;
  unsigned version = 11; // 10 or 11
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// The answer to one request. At most one response; a stream is begun, written, ended.
class Responder {
public:
  // `closing` is asked as the response's headers are written: whether they say Connection: close
  // (the server began draining while the request ran).
  Responder(SocketStream &stream, const HttpRequest &request, std::function<bool()> closing,
            std::chrono::milliseconds writeTimeout);

  bool send(int status, std::string body, std::string_view contentType,
            const HttpHeaders &headers = {});
  bool beginStream(std::string_view contentType, const HttpHeaders &headers = {});
  bool writeStream(std::string_view data);
  bool endStream();

  // Whether the peer is still there. An HTTP/1.1 peer that has finished sending is asked, once,
  // with an interim `100 Continue` (which every HTTP/1.1 client skips): a half-closed client
  // reads it and stays; a closed one answers with a reset, which the next call sees as gone. An
  // HTTP/1.0 peer may not be sent a 1xx: its end of stream is taken as a half-close.
  bool peerGone();

  bool responded() const { return responded_; }
  // Whether a write failed: the connection cannot carry another response.
  bool broken() const { return broken_; }
  bool closes() const { return close_; }

private:
  bool write(std::string_view data);
  // The header block of a response; decides close_.
  std::string headers(int status, std::string_view contentType, const HttpHeaders &extra,
                      std::optional<std::size_t> length);

  SocketStream &stream_;
  const HttpRequest &request_;
  std::function<bool()> closing_;
  bool close_;
  std::chrono::milliseconds writeTimeout_;
  bool responded_ = false;
  bool chunked_ = false;
  bool broken_ = false;
  bool probed_ = false;
};

// What the connection asks of the server around each request.
struct ConnectionHooks {
  // A complete request was read: whether it may be handled (false: the server is closing this
  // connection).
  std::function<bool()> beginRequest;
  // The request was answered: whether the connection may take another.
  std::function<bool()> endRequest;
  // Whether responses should close the connection (the server is draining).
  std::function<bool()> closing;
  std::function<void(const HttpRequest &, Responder &)> handle;
};

// Serves `stream` until the peer closes it, a limit or an error ends it, or a hook says so.
void serveConnection(SocketStream &stream, const HttpLimits &limits, const ConnectionHooks &hooks);

} // namespace dlm::serve
