// A whole file mapped read-only into memory: checkpoints, ONNX files and artifacts are read in
// place from the page cache rather than copied; the mapping lives as long as this object.
// Errors do not name the file ("cannot open: No such file or directory"): callers add it as
// context in their own wording.
#pragma once

#include "support/Status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace dlm {

class MappedFile {
public:
  static StatusOr<MappedFile> open(const std::string &path);

  // Maps nothing (data() null, size() 0).
  MappedFile() = default;

  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&other) noexcept;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  ~MappedFile();

  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  const std::string &path() const { return path_; }

  // Runs `read`, which reads the mapping, on this thread; if the file shrank meanwhile (another
  // program truncated or rewrote it in place), the read of a page past its new end raises SIGBUS,
  // which is turned into an error naming the byte instead of killing the process. `read` must
  // own nothing it would leak when cut short: it is left by siglongjmp, destructors not run.
  // Guarded reads nest: a read inside another file's guardedRead may touch both mappings.
  Status guardedRead(const std::function<void()> &read) const;

  // For a program that reads its mappings all through its run and cannot recover when one
  // shrinks (dlmc reads the checkpoint in the importer, the passes and the writer): from now on,
  // a SIGBUS in a mapping outside any guardedRead, on any thread, prints
  // "<program>: error: '<path>' shrank while <program> read it ..." to stderr, removes the
  // temporary files registered in support/TemporaryFiles.h, and exits with status 1 instead of
  // dying of the signal.
  static void exitOnUnguardedFault(const char *program);

private:
  MappedFile(std::string path, const uint8_t *data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  void unmap();

  std::string path_;
  const uint8_t *data_ = nullptr; // null for an empty file, which cannot be mapped
  size_t size_ = 0;
};

} // namespace dlm
