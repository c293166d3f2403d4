#include "support/MappedFile.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dlm {

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

void MappedFile::unmap() {
  if (data_)
    ::munmap(const_cast<uint8_t *>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

} // namespace dlm
