#include "tools/dlm-serve/SocketStream.h"

#include <boost/asio/error.hpp>

#include <algorithm>
#include <cerrno>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dlm::serve {

namespace {

int64_t nanoseconds(SocketStream::Clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}

// A deadline moved by another thread is seen within this long.
constexpr int kPollSliceMs = 50;

boost::system::error_code errnoCode() {
  return boost::system::error_code(errno, boost::system::system_category());
}

} // namespace

SocketStream::SocketStream(int fd)
    : fd_(fd), deadlineNs_(nanoseconds(Clock::time_point::max())),
      ceilingNs_(nanoseconds(Clock::time_point::max())) {}

SocketStream::~SocketStream() { ::close(fd_); }

void SocketStream::setDeadline(Clock::time_point deadline) {
  deadlineNs_ = std::min(nanoseconds(deadline), ceilingNs_.load());
}

namespace {
void lower(std::atomic<int64_t> &value, int64_t wanted) {
  int64_t current = value.load();
  while (wanted < current && !value.compare_exchange_weak(current, wanted)) {
  }
}
} // namespace

void SocketStream::tightenDeadline(Clock::time_point deadline) {
  lower(ceilingNs_, nanoseconds(deadline));
  lower(deadlineNs_, nanoseconds(deadline));
}

void SocketStream::shutdown() {
  shutDown_ = true;
  ::shutdown(fd_, SHUT_RDWR);
}

void SocketStream::finishSending() { ::shutdown(fd_, SHUT_WR); }

SocketStream::Peer SocketStream::peer() const {
  pollfd entry{fd_, POLLIN, 0};
  if (::poll(&entry, 1, 0) <= 0)
    return Peer::present;
  if (entry.revents & (POLLERR | POLLHUP | POLLNVAL))
    return Peer::gone;
  char byte;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0)
    return Peer::finishedSending;
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    return Peer::gone;
  return Peer::present;
}

boost::system::error_code SocketStream::wait(short events) {
  while (true) {
    if (shutDown_)
      return boost::asio::error::shut_down;
    const int64_t left = deadlineNs_.load() - nanoseconds(Clock::now());
    if (left <= 0)
      return boost::asio::error::timed_out;
    pollfd entry{fd_, events, 0};
    const int ms = static_cast<int>(std::min<int64_t>(kPollSliceMs, left / 1000000 + 1));
    const int ready = ::poll(&entry, 1, ms);
    if (ready > 0)
      return {};
    if (ready < 0 && errno != EINTR)
      return errnoCode();
  }
}

std::size_t SocketStream::readSome(void *data, std::size_t size,
                                   boost::system::error_code &error) {
  error = {};
  if (size == 0)
    return 0;
  while (true) {
    if ((error = wait(POLLIN)))
      return 0;
    const ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
    if (n > 0) {
      error = {};
      return static_cast<std::size_t>(n);
    }
    if (n == 0) {
      error = boost::asio::error::eof;
      return 0;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      error = errnoCode();
      return 0;
    }
  }
}

std::size_t SocketStream::writeSome(const void *data, std::size_t size,
                                    boost::system::error_code &error) {
  error = {};
  if (size == 0)
    return 0;
  while (true) {
    if ((error = wait(POLLOUT)))
      return 0;
    const ssize_t n = ::send(fd_, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      error = {};
      return static_cast<std::size_t>(n);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      error = errnoCode();
      return 0;
    }
  }
}

} // namespace dlm::serve
