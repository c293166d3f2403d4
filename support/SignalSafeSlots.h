// Fixed slots of entries that a signal handler reads without allocating or locking (the live
// mappings MappedFile names in its SIGBUS message, the temporary files removed before exiting).
// A slot is free, being written or cleared by one thread, or in use: an entry is written before
// its slot is marked in use and cleared only after the slot is taken back, so a handler that
// reads the slots in use never sees half an entry.
#pragma once

#include <atomic>
#include <cstddef>

namespace dlm {

template <typename Entry, size_t Count>
class SignalSafeSlots {
public:
  // Writes an entry with `fill(entry)` into a free slot; false when every slot is taken.
  template <typename Fill>
  bool add(Fill &&fill) {
    for (Slot &slot : slots_) {
      int expected = kFree;
      if (!slot.state.compare_exchange_strong(expected, kBusy))
        continue;
      fill(slot.entry);
      slot.state.store(kInUse, std::memory_order_release);
      return true;
    }
    return false;
  }

  // Frees the first slot in use whose entry `matches`.
  template <typename Match>
  void remove(Match &&matches) {
    for (Slot &slot : slots_) {
      int expected = kInUse;
      if (slot.state.load(std::memory_order_acquire) == kInUse && matches(slot.entry) &&
          slot.state.compare_exchange_strong(expected, kBusy)) {
        slot.state.store(kFree, std::memory_order_release);
        return;
      }
    }
  }

  // Calls `visit(entry)` for every slot in use; async-signal-safe when `visit` is.
  template <typename Visit>
  void forEach(Visit &&visit) const {
    for (const Slot &slot : slots_)
      if (slot.state.load(std::memory_order_acquire) == kInUse)
        visit(slot.entry);
  }

private:
  enum : int { kFree, kBusy, kInUse };
  struct Slot {
    std::atomic<int> state{kFree};
    Entry entry{};
  };
  Slot slots_[Count];
};

} // namespace dlm
