#include "support/TemporaryFiles.h"

#include "support/SignalSafeSlots.h"

#include <cstring>
#include <unistd.h>

namespace dlm {
namespace {

struct TemporaryPath {
  char path[4096];
};
SignalSafeSlots<TemporaryPath, 32> temporaryPaths;

} // namespace

bool registerTemporaryFile(const std::string &path) {
  if (path.size() >= sizeof TemporaryPath::path)
    return false;
  return temporaryPaths.add([&](TemporaryPath &entry) {
    std::memcpy(entry.path, path.c_str(), path.size() + 1);
  });
}

void unregisterTemporaryFile(const std::string &path) {
  temporaryPaths.remove([&](const TemporaryPath &entry) { return path == entry.path; });
}

void removeTemporaryFiles() {
  temporaryPaths.forEach([](const TemporaryPath &entry) { ::unlink(entry.path); });
}

} // namespace dlm
