#include "support/MappedFile.h"

#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dlm {
namespace {

// A guarded read running on this thread: the mapping it reads, where to return to, and the guarded
// read it runs inside, if any (a read over two mappings nests one guard in the other).
struct ReadGuard {
  const uint8_t *begin = nullptr;
  const uint8_t *end = nullptr;
  sigjmp_buf resume;
  const void *faultAddress = nullptr;
  ReadGuard *outer = nullptr;
};
thread_local ReadGuard *activeGuard = nullptr;
struct sigaction previousSigbus;

// SIGBUS in the mapping of one of this thread's guarded reads returns to that guardedRead (the
// innermost whose mapping it is); any other goes to the handler that was there before
// (AddressSanitizer's, or the default that ends the process).
void onSigbus(int signal, siginfo_t *info, void *context) {
  const auto *address = static_cast<const uint8_t *>(info->si_addr);
  for (ReadGuard *guard = activeGuard; guard; guard = guard->outer) {
    if (address >= guard->begin && address < guard->end) {
      guard->faultAddress = address;
      siglongjmp(guard->resume, 1);
    }
  }
  if (previousSigbus.sa_flags & SA_SIGINFO) {
    previousSigbus.sa_sigaction(signal, info, context);
    return;
  }
  ::sigaction(SIGBUS, &previousSigbus, nullptr);
  ::raise(SIGBUS);
}

void installSigbusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action = {};
    action.sa_sigaction = onSigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &previousSigbus);
  });
}

} // namespace

StatusOr<MappedFile> MappedFile::open(const std::string &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error(std::string("cannot open: ") + std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return Status::error(std::string("cannot stat: ") + std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return Status::error("not a regular file");
  }
  const auto size = static_cast<size_t>(info.st_size);
  const uint8_t *data = nullptr;
  if (size > 0) {
    void *mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      return Status::error("cannot map " + std::to_string(size) + " bytes: " + std::strerror(error));
    }
    data = static_cast<const uint8_t *>(mapping);
  }
  ::close(fd); // the mapping keeps the file alive
  return MappedFile(path, data, size);
}

MappedFile::MappedFile(MappedFile &&other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

Status MappedFile::guardedRead(const std::function<void()> &read) const {
  installSigbusHandler();
  ReadGuard guard;
  guard.begin = data_;
  guard.end = data_ + size_;
  ReadGuard *outer = activeGuard;
  guard.outer = outer;
  if (sigsetjmp(guard.resume, /*savemask=*/1) == 0) {
    activeGuard = &guard;
    try {
      read();
    } catch (...) {
      activeGuard = outer; // an exception leaves normally: the guard must not outlive this frame
      throw;
    }
    activeGuard = outer;
    return Status::ok();
  }
  activeGuard = outer;
  const auto byte = static_cast<const uint8_t *>(guard.faultAddress) - data_;
  return Status::error("the file shrank while in use (truncated or rewritten in place by another "
                       "program): byte " + std::to_string(byte) + " of the " +
                       std::to_string(size_) + " mapped can no longer be read");
}

void MappedFile::unmap() {
  if (data_)
    ::munmap(const_cast<uint8_t *>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

} // namespace dlm
