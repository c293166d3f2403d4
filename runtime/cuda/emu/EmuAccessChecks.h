// What compute-sanitizer checks on a GPU, checked on the emulated device. With DLM_EMU_CHECK set
// ("all", or a comma list of memcheck, racecheck, initcheck), kernels the emulated driver compiles
// are instrumented by an LLVM pass (AccessReportingPass.cpp) that reports every load, store,
// atomic and memory copy or set to dlm_emu_report_access, and each access is checked against
//   - memcheck: shared memory accessed outside every __shared__ variable (global memory is
//     checked by AddressSanitizer in the checked build: EmuModules.cpp, EmuMemory.cpp);
//   - racecheck: shared memory read or written by one thread of the block and written (or, for a
//     write, read) by another with no __syncthreads in between, nor a __syncwarp within a warp:
//     the read-after-write, write-after-write and write-after-read hazards;
//   - initcheck: device memory (cuMemAlloc) read by a kernel where nothing has written it (a
//     copy, a memset, a kernel, cuBLASLt), and shared memory read before the block wrote it (a
//     GPU leaves it holding whatever the last block there left).
// The first failed check of a block fails the launch with a message naming the check, the
// threads, the bytes and the __shared__ variable; the launch returns CUDA_ERROR_LAUNCH_FAILED.
//
// __shared__ variables are the thread_local variables of the kernel's module (EmuPrelude.h):
// their offsets and sizes come from the module's ELF symbol table, the block's copy from the
// module's TLS block on the worker thread.
#pragma once

#include "runtime/cuda/emu/EmuDevice.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dlm::emu {

struct AccessChecks {
  bool memcheck = false;
  bool racecheck = false;
  bool initcheck = false;
  bool any() const { return memcheck || racecheck || initcheck; }
};

// The checks DLM_EMU_CHECK asks for, read once per process. An unknown name is a fatal error
// that lists the names: a mistyped check must not silently check nothing.
const AccessChecks &accessChecks();
// What the checks are while tests run (for tests of the checks themselves).
void setAccessChecks(const AccessChecks &checks);

// The values AccessReportingPass.cpp passes: plain accesses, and atomic ones, which do not race
// with other atomics (an atomic read-modify-write reads and writes).
enum class AccessKind : uint32_t {
  read = 0,
  write = 1,
  atomic = 2,
  atomicRead = 3,
  atomicWrite = 4,
};
inline bool reads(AccessKind kind) {
  return kind == AccessKind::read || kind == AccessKind::atomic || kind == AccessKind::atomicRead;
}
inline bool writes(AccessKind kind) {
  return kind == AccessKind::write || kind == AccessKind::atomic || kind == AccessKind::atomicWrite;
}
inline bool isAtomic(AccessKind kind) {
  return kind == AccessKind::atomic || kind == AccessKind::atomicRead ||
         kind == AccessKind::atomicWrite;
}

// Checks an access of `bytes` bytes at `address` by the running kernel thread.
void checkAccess(const void *address, size_t bytes, AccessKind kind);

// Checks a kernel's access to device memory (initcheck): a read of bytes nothing has written is
// a failure message, a write marks them; "" for memory that is not a tracked allocation.
std::string checkDeviceAccess(const unsigned char *address, size_t bytes, AccessKind kind,
                              unsigned thread);

// Device memory for initcheck: which bytes of each cuMemAlloc allocation have been written.
void trackDeviceAllocation(const void *base, size_t bytes);
void untrackDeviceAllocation(const void *base);
void markDeviceWritten(const void *address, size_t bytes);
// A device-to-device copy carries the source's state; from anything else, the bytes count as
// written.
void copyDeviceWrittenState(const void *destination, const void *source, size_t bytes);

// One __shared__ variable of a module: its offset in the module's TLS block.
struct SharedVariable {
  size_t offset = 0;
  size_t bytes = 0;
  std::string name;
};

// The shared memory of the module holding `kernel`: its TLS module id (0: none) and variables.
struct SharedMemoryLayout {
  size_t tlsModule = 0;
  size_t blockBytes = 0;
  std::vector<SharedVariable> variables; // by offset
};
std::shared_ptr<const SharedMemoryLayout> sharedMemoryLayoutOf(KernelEntry kernel);

// Where the running thread is in the block's barriers, from the block scheduler (BlockRunner).
struct SyncPoint {
  unsigned thread = 0;          // linear thread index in the block
  unsigned blockGeneration = 0; // __syncthreads completed so far
  unsigned warpGeneration = 0;  // barriers of the thread's warp completed so far
};

// The checks of one block's shared memory, kept by the block scheduler of a worker thread.
class SharedMemoryChecker {
public:
  // Starts a block of `kernel`: the block's shared memory holds nothing written yet.
  void beginBlock(KernelEntry kernel);
  // Checks an access if it is to the block's shared memory; returns a failure message or "".
  std::string check(const unsigned char *address, size_t bytes, AccessKind kind,
                    const SyncPoint &now);
  // Whether `address` lies in the block's shared memory, or in the few bytes past its end that
  // no other memory can start in (glibc's heap puts a chunk header there; under AddressSanitizer
  // a redzone; after a program's own block, its thread control block), so that an access just
  // past the last variable is reported too.
  // A program's own block (module 1, static TLS) has its thread control block right after it,
  // where a reported write would still land: no tail there.
  bool contains(const unsigned char *address) const {
    return begin_ && address >= begin_ &&
           address < begin_ + layout_->blockBytes + (layout_->tlsModule == 1 ? 0 : kTailBytes);
  }
  static constexpr size_t kTailBytes = 8;

private:
  // What the block did last to one byte of shared memory.
  struct ByteState {
    uint32_t block = 0; // the block serial it belongs to; any other: nothing done yet
    bool written = false;
    bool atomicWrite = false; // the last write was an atomic one
    bool atomicReads = false; // every read since the last write was atomic
    uint8_t readers = 0;      // unordered reads since the last write: none, one, several (2)
    int32_t readersWarp = 0;  // several: the warp they all belong to, or -1
    uint32_t writer = 0, writeBlockGeneration = 0, writeWarpGeneration = 0;
    // One reader: its thread and generations; several: the latest read's generations.
    uint32_t reader = 0, readBlockGeneration = 0, readWarpGeneration = 0;
  };

  // The variable at or before `offset`, or null.
  const SharedVariable *variableFrom(size_t offset) const;
  std::string describe(size_t offset, size_t bytes) const;
  static void recordRead(ByteState &state, AccessKind kind, const SyncPoint &now);
  static bool readUnordered(const ByteState &state, AccessKind kind, const SyncPoint &now);
  std::string checkBounds(size_t offset, size_t bytes, unsigned thread) const;

  std::shared_ptr<const SharedMemoryLayout> layout_;
  KernelEntry kernel_ = nullptr; // whose layout layout_ is
  const unsigned char *begin_ = nullptr;
  std::vector<ByteState> shadow_;
  uint32_t block_ = 0; // serial of the running block: older states in the shadow are void
};

} // namespace dlm::emu

// What instrumented kernel code calls (AccessReportingPass.cpp): checkAccess.
extern "C" void dlm_emu_report_access(const void *address, uint64_t bytes, uint32_t kind);
