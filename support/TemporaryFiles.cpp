#include "support/TemporaryFiles.h"

#include <atomic>
#include <cstring>
#include <unistd.h>

namespace dlm {
namespace {

// A slot is free (0), being written or cleared by a thread (1), or holds a path (2).
struct Slot {
  std::atomic<int> state{0};
  char path[4096];
};
Slot slots[32];

} // namespace

bool registerTemporaryFile(const std::string &path) {
  if (path.size() >= sizeof Slot::path)
    return false;
  for (Slot &slot : slots) {
    int expected = 0;
    if (!slot.state.compare_exchange_strong(expected, 1))
      continue;
    std::memcpy(slot.path, path.c_str(), path.size() + 1);
    slot.state.store(2, std::memory_order_release);
    return true;
  }
  return false;
}

void unregisterTemporaryFile(const std::string &path) {
  for (Slot &slot : slots) {
    int expected = 2;
    if (slot.state.load(std::memory_order_acquire) != 2 || path != slot.path)
      continue;
    if (slot.state.compare_exchange_strong(expected, 1))
      slot.state.store(0, std::memory_order_release);
    return;
  }
}

void removeTemporaryFiles() {
  for (Slot &slot : slots)
    if (slot.state.load(std::memory_order_acquire) == 2)
      ::unlink(slot.path);
}

} // namespace dlm
