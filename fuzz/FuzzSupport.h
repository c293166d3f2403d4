// What the fuzz targets share: files they read at start-up from the source tree, and scratch
// files for readers that only take a path. Scratch paths are per process (libFuzzer's -fork and
// -jobs run several) and reused for every input, so an input costs one write, not a mkdir.
#pragma once

#include "support/Status.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

// Compiled in by fuzz/CMakeLists.txt: the checkout the fixtures are read from.
#ifndef DLM_SOURCE_DIR
#error "DLM_SOURCE_DIR must name the source tree"
#endif

namespace dlm::fuzz {

inline std::string sourcePath(const std::string &relative) {
  return std::string(DLM_SOURCE_DIR) + "/" + relative;
}

// A file the target cannot run without: a missing one ends the process, since fuzzing without
// it would only report nonsense.
inline std::string readFixture(const std::string &relative) {
  const std::string path = sourcePath(relative);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "dlm fuzz: cannot read fixture %s\n", path.c_str());
    std::exit(1);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// With DLM_FUZZ_VERBOSE=1 in the environment, the targets say how far each input got: what
// failed, or that the last step ran. For checking that seeds reach the deep end; a fuzzing run
// leaves it unset (printing is slow).
inline bool verbose() {
  static const bool on = std::getenv("DLM_FUZZ_VERBOSE") != nullptr;
  return on;
}
inline void trace(const std::string &step, const std::string &outcome) {
  if (verbose())
    std::fprintf(stderr, "dlm fuzz: %s: %s\n", step.c_str(), outcome.c_str());
}
// Whether `result` is ok, traced under `step`.
inline bool succeeded(const std::string &step, const Status &status) {
  if (verbose())
    trace(step, status.isOk() ? std::string("ok") : status.message());
  return status.isOk();
}
template <typename T> bool succeeded(const std::string &step, const StatusOr<T> &result) {
  return succeeded(step, result.isOk() ? Status::ok() : result.status());
}

inline std::string_view asText(const uint8_t *data, size_t size) {
  return std::string_view(reinterpret_cast<const char *>(data), size);
}

// A directory of this process under /dev/shm (memory, so writing an input per run is cheap) or
// $TMPDIR, removed at exit. `name` tells the targets' directories apart.
inline const std::filesystem::path &scratchDirectory(const std::string &name) {
  static const std::filesystem::path directory = [&] {
    std::filesystem::path base = "/dev/shm";
    if (!std::filesystem::is_directory(base))
      base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
    std::filesystem::path path =
        base / ("dlm-fuzz-" + name + "-" + std::to_string(static_cast<long>(getpid())));
    std::filesystem::create_directories(path);
    return path;
  }();
  static const bool removedAtExit = [] {
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(directory, ignored);
    });
    return true;
  }();
  (void)removedAtExit;
  return directory;
}

// Replaces `path`'s contents with `bytes`; false when the write failed (the input is skipped).
inline bool writeFile(const std::filesystem::path &path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

} // namespace dlm::fuzz
