#include "tools/dlm-serve/HttpConnection.h"

#include "tools/dlm-serve/ApiError.h"

#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <optional>

namespace dlm::serve {

namespace http = boost::beast::http;
using boost::system::error_code;

namespace {

using Clock = SocketStream::Clock;
using Parser = http::request_parser<http::string_body>;

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
// How long a refused request's remaining bytes are read and dropped before the close, so that
// the refusal is not lost to a reset (the lingering close of nginx).
constexpr std::chrono::milliseconds kLinger{2000};
constexpr std::size_t kLingerBytes = 1 << 20;

std::string_view statusReason(int status) {
  const auto reason = http::obsolete_reason(static_cast<http::status>(status));
  return {reason.data(), reason.size()};
}

std::string headerBlock(int status, unsigned version, std::string_view contentType, bool close,
                        const HttpHeaders &headers, std::optional<std::size_t> length) {
  std::string out = version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += statusReason(status);
  out += "\r\nContent-Type: ";
  out += contentType;
  out += "\r\n";
  for (const auto &[name, value] : headers)
    out += name + ": " + value + "\r\n";
  if (length)
    out += "Content-Length: " + std::to_string(*length) + "\r\n";
  else if (version == 11)
    out += "Transfer-Encoding: chunked\r\n";
  out += close ? "Connection: close\r\n" : (version == 10 ? "Connection: keep-alive\r\n" : "");
  out += "\r\n";
  return out;
}

void lingeringClose(SocketStream &stream) {
  stream.finishSending();
  stream.setDeadline(Clock::now() + kLinger);
  char sink[4096];
  std::size_t dropped = 0;
  error_code error;
  while (dropped < kLingerBytes) {
    const std::size_t n = stream.read_some(boost::asio::buffer(sink), error);
    if (error)
      break;
    dropped += n;
  }
}

// A refusal of a request that was not (wholly) read: its status and an OpenAI error body, then
// the connection ends.
void refuse(SocketStream &stream, const HttpLimits &limits, unsigned version, int status,
            std::string message, std::string code) {
  ApiError error;
  error.httpStatus = status;
  error.message = std::move(message);
  error.code = std::move(code);
  const std::string body = error.toJson().dump();
  HttpRequest request;
  request.version = version;
  Responder responder(stream, request, [] { return true; }, limits.writeTimeout);
  responder.send(status, body, "application/json");
  lingeringClose(stream);
}

// The status and message a failed read is refused with; nullopt: the peer went away or the
// connection was shut (nothing to answer).
std::optional<std::pair<int, std::string>> readFailure(const error_code &error,
                                                       const HttpLimits &limits) {
  if (error == http::error::header_limit)
    return std::pair{431, "the request's headers exceed " + std::to_string(limits.maxHeaderBytes) +
                              " bytes"};
  if (error == http::error::body_limit)
    return std::pair{413, "the request body exceeds " + std::to_string(limits.maxBodyBytes) +
                              " bytes (dlm-serve --max-body-bytes)"};
  if (error == boost::asio::error::timed_out)
    return std::pair{408, "the request was not received within " +
                              std::to_string(limits.readTimeout.count() / 1000) + " s"};
  if (error == http::error::end_of_stream || error == http::error::partial_message ||
      error == boost::asio::error::eof || error == boost::asio::error::shut_down ||
      error.category() == boost::system::system_category())
    return std::nullopt;
  return std::pair{400, "malformed HTTP request: " + error.message()};
}

// Waits for the first byte of a next request (unless the buffer holds one already). False: the
// connection idled out, closed or was shut.
bool awaitRequest(SocketStream &stream, boost::beast::flat_buffer &buffer,
                  const HttpLimits &limits) {
  if (buffer.size() > 0)
    return true;
  stream.setDeadline(Clock::now() + limits.idleTimeout);
  error_code error;
  const std::size_t n = stream.read_some(buffer.prepare(4096), error);
  buffer.commit(n);
  return !error && n > 0;
}

// Reads one request within the limits. Returns it, or nullopt once the connection is over (the
// refusal, if any, written).
std::optional<HttpRequest> readRequest(SocketStream &stream, boost::beast::flat_buffer &buffer,
                                       const HttpLimits &limits) {
  Parser parser;
  parser.header_limit(static_cast<std::uint32_t>(limits.maxHeaderBytes));
  parser.body_limit(static_cast<std::uint64_t>(limits.maxBodyBytes));
  stream.setDeadline(Clock::now() + limits.readTimeout);
  error_code error;
  http::read_header(stream, buffer, parser, error);
  const unsigned version = parser.is_header_done() ? parser.get().version() : 11;
  auto failed = [&](const error_code &e) {
    if (auto refusal = readFailure(e, limits))
      refuse(stream, limits, version, refusal->first, refusal->second,
             refusal->first == 413 ? "body_too_large" : "");
    return std::nullopt;
  };
  if (error)
    return failed(error);
  const auto &header = parser.get();
  if (std::distance(header.begin(), header.end()) > limits.maxHeaderFields) {
    refuse(stream, limits, version, 431,
           "the request has more than " + std::to_string(limits.maxHeaderFields) +
               " header fields",
           "");
    return std::nullopt;
  }
  const auto encoding = header[http::field::content_encoding];
  if (!encoding.empty() && !boost::beast::iequals(encoding, "identity")) {
    refuse(stream, limits, version, 415,
           "Content-Encoding '" + std::string(encoding) +
               "' is not accepted: send the body uncompressed (application/json)",
           "unsupported_content_encoding");
    return std::nullopt;
  }
  // HTTP/1.0 has no interim responses.
  if (version == 11 && boost::beast::iequals(header[http::field::expect], "100-continue") &&
      !parser.is_done()) {
    boost::asio::write(stream, boost::asio::buffer(kContinue.data(), kContinue.size()), error);
    if (error)
      return std::nullopt;
  }
  http::read(stream, buffer, parser, error);
  if (error)
    return failed(error);
  HttpRequest request;
  const http::request<http::string_body> &message = parser.get();
  request.method = std::string(message.method_string());
  const std::string_view target(message.target().data(), message.target().size());
  request.path = std::string(target.substr(0, target.find('?')));
  request.keepAlive = message.keep_alive();
  request.version = message.version() == 10 ? 10 : 11;
  request.body = parser.release().body();
  return request;
}

} // namespace

Responder::Responder(SocketStream &stream, const HttpRequest &request,
                     std::function<bool()> closing, std::chrono::milliseconds writeTimeout)
    : stream_(stream), request_(request), closing_(std::move(closing)),
      close_(!request.keepAlive), writeTimeout_(writeTimeout) {}

std::string Responder::headers(int status, std::string_view contentType,
                               const HttpHeaders &extra, std::optional<std::size_t> length) {
  close_ = close_ || closing_();
  return headerBlock(status, request_.version, contentType, close_, extra, length);
}

bool Responder::write(std::string_view data) {
  if (broken_)
    return false;
  stream_.setDeadline(Clock::now() + writeTimeout_);
  error_code error;
  boost::asio::write(stream_, boost::asio::buffer(data.data(), data.size()), error);
  broken_ = static_cast<bool>(error);
  return !broken_;
}

bool Responder::send(int status, std::string body, std::string_view contentType,
                     const HttpHeaders &headers) {
  responded_ = true;
  std::string out = this->headers(status, contentType, headers, body.size());
  if (request_.method != "HEAD")
    out += body;
  return write(out);
}

bool Responder::beginStream(std::string_view contentType, const HttpHeaders &headers) {
  responded_ = true;
  // HTTP/1.0 has no chunks: the stream's end is the connection's.
  chunked_ = request_.version == 11;
  if (!chunked_)
    close_ = true;
  return write(this->headers(200, contentType, headers, std::nullopt));
}

bool Responder::writeStream(std::string_view data) {
  if (data.empty())
    return !broken_;
  if (!chunked_)
    return write(data);
  char size[32];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string chunk(size, static_cast<std::size_t>(n));
  chunk += data;
  chunk += "\r\n";
  return write(chunk);
}

bool Responder::endStream() { return chunked_ ? write("0\r\n\r\n") : !broken_; }

bool Responder::peerGone() {
  if (broken_)
    return true;
  switch (stream_.peer()) {
  case SocketStream::Peer::present:
    return false;
  case SocketStream::Peer::gone:
    return true;
  case SocketStream::Peer::finishedSending:
    // A stream's writes tell a closed peer by themselves; before a response, ask once.
    if (!probed_ && !responded_ && request_.version == 11) {
      probed_ = true;
      return !write(kContinue);
    }
    return false;
  }
  return false;
}

void serveConnection(SocketStream &stream, const HttpLimits &limits,
                     const ConnectionHooks &hooks) {
  boost::beast::flat_buffer buffer;
  while (awaitRequest(stream, buffer, limits)) {
    std::optional<HttpRequest> request = readRequest(stream, buffer, limits);
    if (!request || !hooks.beginRequest())
      return;
    Responder responder(stream, *request, hooks.closing, limits.writeTimeout);
    hooks.handle(*request, responder);
    const bool more = hooks.endRequest();
    if (responder.broken() || !responder.responded())
      return;
    if (!more || responder.closes()) {
      // Bytes of a next request left unread would make the close a reset, which can destroy
      // the answer before the client reads it.
      lingeringClose(stream);
      return;
    }
  }
}

} // namespace dlm::serve
