#include "support/MappedFile.h"

#include "support/SignalSafeSlots.h"
#include "support/TemporaryFiles.h"

#include <algorithm>
#include <atomic>
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

// The live mappings, so that a fault no guarded read catches can still name its file: written
// before the mapping is handed out, read by the signal handler.
struct LiveMapping {
  const uint8_t *begin;
  size_t size;
  char path[1024];
};
SignalSafeSlots<LiveMapping, 256> liveMappings;

void rememberMapping(const uint8_t *begin, size_t size, const std::string &path) {
  liveMappings.add([&](LiveMapping &mapping) {
    mapping.begin = begin;
    mapping.size = size;
    // A path too long for the slot keeps its end, which names the file.
    const size_t keep = std::min(path.size(), sizeof mapping.path - 1);
    std::memcpy(mapping.path, path.c_str() + path.size() - keep, keep + 1);
  });
}

void forgetMapping(const uint8_t *begin) {
  liveMappings.remove([&](const LiveMapping &mapping) { return mapping.begin == begin; });
}

// Set by exitOnUnguardedFault: the program name its error message starts with.
std::atomic<const char *> exitingProgram{nullptr};

// write(2) of a NUL-terminated string, and of a number: all the handler may use.
void writeText(const char *text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    const ssize_t written = ::write(STDERR_FILENO, text, length);
    if (written <= 0)
      return;
    text += written;
    length -= size_t(written);
  }
}

void writeNumber(uint64_t value) {
  char digits[24];
  char *p = digits + sizeof digits - 1;
  *p = '\0';
  do
    *--p = char('0' + value % 10);
  while (value /= 10);
  writeText(p);
}

// A fault in a live mapping outside any guarded read, in a program that asked: the message,
// the temporary files removed, exit 1. Returns when the address is in no mapping.
void exitOnMappingFault(const uint8_t *address) {
  const char *program = exitingProgram.load();
  if (!program)
    return;
  liveMappings.forEach([&](const LiveMapping &mapping) {
    if (address < mapping.begin || address >= mapping.begin + mapping.size)
      return;
    writeText(program);
    writeText(": error: '");
    writeText(mapping.path);
    writeText("' shrank while ");
    writeText(program);
    writeText(" read it (truncated or rewritten in place by another program): byte ");
    writeNumber(uint64_t(address - mapping.begin));
    writeText(" of the ");
    writeNumber(mapping.size);
    writeText(" mapped can no longer be read; nothing was written\n");
    removeTemporaryFiles();
    ::_exit(1);
  });
}

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
  exitOnMappingFault(address);
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
  if (data)
    rememberMapping(data, size, path);
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

void MappedFile::exitOnUnguardedFault(const char *program) {
  exitingProgram.store(program);
  installSigbusHandler();
}

void MappedFile::unmap() {
  if (data_) {
    forgetMapping(data_);
    ::munmap(const_cast<uint8_t *>(data_), size_);
  }
  data_ = nullptr;
  size_ = 0;
}

} // namespace dlm
