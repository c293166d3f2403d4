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

// The values AccessReportingPass.cpp passes.
enum class AccessKind : uint32_t { read = 0, write = 1, atomic = 2 };

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
  bool contains(const unsigned char *address) const {
    return begin_ && address >= begin_ && address < begin_ + layout_->blockBytes + kTailBytes;
  }
  static constexpr size_t kTailBytes = 8;

private:
  // What the block did last to one byte of shared memory.
  struct ByteState {
    uint32_t block = 0; // the block serial it belongs to; any other: nothing done yet
    bool written = false;
    bool atomicWrite = false; // the last write was an atomic one
    uint8_t readers = 0;      // since the last write: none, one, several (2)
    uint32_t writer = 0, writeBlockGeneration = 0, writeWarpGeneration = 0;
    uint32_t reader = 0, readBlockGeneration = 0, readWarpGeneration = 0;
  };

  std::string describe(size_t offset, size_t bytes) const;
  std::string checkBounds(size_t offset, size_t bytes, unsigned thread) const;

  std::shared_ptr<const SharedMemoryLayout> layout_;
  const unsigned char *begin_ = nullptr;
  std::vector<ByteState> shadow_;
  uint32_t block_ = 0; // serial of the running block: older states in the shadow are void
};

} // namespace dlm::emu

// What instrumented kernel code calls (AccessReportingPass.cpp): checkAccess.
extern "C" void dlm_emu_report_access(const void *address, uint64_t bytes, uint32_t kind);
