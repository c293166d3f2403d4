// Runs one thread block of an emulated kernel: one fiber per thread on the calling worker
// thread, resumed round-robin. A fiber gives up the worker only at a barrier or a warp exchange;
// the scheduler resumes a waiting fiber only once its barrier has been released, and reports a
// deadlock when no live fiber can make progress.
#pragma once

#include "runtime/cuda/emu/EmuAccessChecks.h"
#include "runtime/cuda/emu/EmuDevice.h"
#include "runtime/cuda/emu/EmuThread.h"

#include <boost/context/continuation.hpp>

#include <memory>
#include <string>
#include <vector>

namespace dlm::emu {

class BlockRunner {
public:
  explicit BlockRunner(size_t stackBytes);
  ~BlockRunner();
  BlockRunner(const BlockRunner &) = delete;
  BlockRunner &operator=(const BlockRunner &) = delete;

  Status run(KernelEntry kernel, void **parameters, uint3 blockIdx, dim3 blockDim, dim3 gridDim);

  // Called by the running fiber (through EmuThread.h's functions).
  void syncBlock();
  void syncWarp();
  void exchange(const void *value, void *out, size_t bytes, int sourceLane);
  // An access of the running fiber's kernel code (EmuAccessChecks.h; checked runs only): the
  // first failed check fails the block.
  void checkAccess(const unsigned char *address, size_t bytes, AccessKind kind);

private:
  enum class Wait { none, block, warp };

  struct Fiber {
    ThreadContext context{};
    boost::context::continuation self;      // resumes the fiber
    boost::context::continuation scheduler; // resumes the scheduler (held by the fiber)
    Wait wait = Wait::none;
    unsigned waitGeneration = 0;
    bool done = false;
    // Under AddressSanitizer: the fiber's stack, and its fake stack while it is switched out.
    const void *stackBottom = nullptr;
    void *fakeStack = nullptr;
  };

  struct Warp {
    unsigned lanes = 0;   // threads of the block in this warp
    unsigned live = 0;    // of which not yet returned
    unsigned arrived = 0; // at the current warp barrier
    unsigned generation = 0;
    alignas(16) unsigned char slots[32][16];
  };

  // A pool of fiber stacks reused from block to block.
  struct StackPool;
  class PooledStack;

  bool released(const Fiber &fiber) const;
  // AddressSanitizer's fiber annotations around every switch of stacks (nothing without ASan):
  // the scheduler enters `fiber` and is back; the fiber arrives and leaves (for good if `dying`).
  void enterFiber(Fiber &fiber);
  void backInScheduler();
  void arrivedInFiber(Fiber &fiber);
  void leaveFiber(Fiber &fiber, bool dying);
  void yield();
  void finish(Fiber &fiber);
  void fail(const std::string &message);

  std::unique_ptr<StackPool> stacks_;
  std::vector<Fiber> fibers_;
  std::vector<Warp> warps_;
  unsigned live_ = 0;
  unsigned arrived_ = 0;
  unsigned generation_ = 0;
  Fiber *current_ = nullptr;
  std::string error_;
  SharedMemoryChecker shared_;
  // The worker thread's stack (the scheduler's) as ASan last reported it, and its fake stack.
  [[maybe_unused]] const void *schedulerBottom_ = nullptr;
  [[maybe_unused]] size_t schedulerSize_ = 0;
  [[maybe_unused]] void *schedulerFakeStack_ = nullptr;
};

// The runner of the calling worker thread (null outside a launch).
extern thread_local BlockRunner *currentRunner;

} // namespace dlm::emu
