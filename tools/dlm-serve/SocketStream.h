// A connected socket as a Beast synchronous stream (SyncReadStream + SyncWriteStream) whose every
// read and write is bounded by a deadline: a client that sends or reads too slowly cannot hold a
// connection's thread, nor a drain, past it. Another thread may tighten the deadline (the drain's
// end) or shut the socket down (closing an idle connection); both wake a blocked read or write.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>

namespace dlm::serve {

class SocketStream {
public:
  using Clock = std::chrono::steady_clock;

  // Takes ownership of `fd` (closed by the destructor).
  explicit SocketStream(int fd);
  ~SocketStream();
  SocketStream(const SocketStream &) = delete;
  SocketStream &operator=(const SocketStream &) = delete;

  // The deadline of the reads and writes from now on (never past the ceiling).
  void setDeadline(Clock::time_point deadline);
  // Moves the deadline, and the ceiling of every later one, to `deadline` if that is earlier;
  // callable from any thread.
  void tightenDeadline(Clock::time_point deadline);
  // Ends every read and write, now and later; callable from any thread.
  void shutdown();
  // Ends this side's sending (the peer reads an end of stream); reads go on.
  void finishSending();

  // What the socket says of the peer, without consuming anything: still there (bytes of a next
  // request pending included), finished sending (an end of stream is pending: a half-close, or a
  // close that only a write can tell apart), or gone (reset, error).
  enum class Peer { present, finishedSending, gone };
  Peer peer() const;

  // Beast's stream concepts: each call moves the bytes of the sequence's first non-empty buffer.
  template <class MutableBuffers>
  std::size_t read_some(const MutableBuffers &buffers, boost::system::error_code &error) {
    const auto buffer = firstBuffer<boost::asio::mutable_buffer>(buffers);
    return readSome(buffer.data(), buffer.size(), error);
  }
  template <class MutableBuffers> std::size_t read_some(const MutableBuffers &buffers) {
    boost::system::error_code error;
    return orThrow(read_some(buffers, error), error);
  }
  template <class ConstBuffers>
  std::size_t write_some(const ConstBuffers &buffers, boost::system::error_code &error) {
    const auto buffer = firstBuffer<boost::asio::const_buffer>(buffers);
    return writeSome(buffer.data(), buffer.size(), error);
  }
  template <class ConstBuffers> std::size_t write_some(const ConstBuffers &buffers) {
    boost::system::error_code error;
    return orThrow(write_some(buffers, error), error);
  }

private:
  template <class Buffer, class Buffers> static Buffer firstBuffer(const Buffers &buffers) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it)
      if (Buffer buffer(*it); buffer.size() > 0)
        return buffer;
    return Buffer();
  }
  static std::size_t orThrow(std::size_t n, const boost::system::error_code &error) {
    if (error)
      throw boost::system::system_error(error);
    return n;
  }
  // A size of 0 moves nothing and succeeds.
  std::size_t readSome(void *data, std::size_t size, boost::system::error_code &error);
  std::size_t writeSome(const void *data, std::size_t size, boost::system::error_code &error);
  // Waits until the socket is ready for `events` (poll's), the deadline passes (timed_out) or it
  // is shut down.
  boost::system::error_code wait(short events);

  int fd_;
  std::atomic<int64_t> deadlineNs_;
  std::atomic<int64_t> ceilingNs_;
  std::atomic<bool> shutDown_{false};
};

} // namespace dlm::serve
