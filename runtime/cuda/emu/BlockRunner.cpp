#include "runtime/cuda/emu/BlockRunner.h"

#include <boost/context/stack_context.hpp>

// AddressSanitizer must be told whenever the stack changes under it, or it takes a fiber's frames
// for wild accesses to another stack (its fiber annotations; Boost.Context has them only for its
// ucontext variant, which makes a system call per switch).
#include "support/AddressSanitizer.h"
#ifdef DLM_ADDRESS_SANITIZER
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace dlm::emu {

thread_local const ThreadContext *currentThread = nullptr;
thread_local BlockRunner *currentRunner = nullptr;

// Stacks come from plain heap blocks kept for the runner's lifetime: a block of 256 threads
// would otherwise allocate and free 256 stacks per block.
struct BlockRunner::StackPool {
  explicit StackPool(size_t bytes) : bytes(bytes) {}
  ~StackPool() {
    for (void *stack : stacks)
      std::free(stack);
  }
  void *stack(size_t index) {
    while (stacks.size() <= index) {
      void *memory = std::aligned_alloc(64, bytes);
      if (!memory)
        throw std::bad_alloc();
      stacks.push_back(memory);
    }
    return stacks[index];
  }
  size_t bytes;
  std::vector<void *> stacks;
};

// Boost.Context stack allocator handing out the pool's stack `index`; nothing to free.
class BlockRunner::PooledStack {
public:
  PooledStack(StackPool &pool, size_t index) : pool_(&pool), index_(index) {}
  boost::context::stack_context allocate() {
    boost::context::stack_context context;
    context.size = pool_->bytes;
    context.sp = static_cast<char *>(pool_->stack(index_)) + pool_->bytes; // stacks grow down
    return context;
  }
  void deallocate(boost::context::stack_context &) noexcept {}

private:
  StackPool *pool_;
  size_t index_;
};

BlockRunner::BlockRunner(size_t stackBytes) : stacks_(std::make_unique<StackPool>(stackBytes)) {}

BlockRunner::~BlockRunner() = default;

bool BlockRunner::released(const Fiber &fiber) const {
  switch (fiber.wait) {
  case Wait::none:
    return true;
  case Wait::block:
    return generation_ != fiber.waitGeneration;
  case Wait::warp:
    return warps_[fiber.context.linearThread / 32].generation != fiber.waitGeneration;
  }
  return true;
}

void BlockRunner::enterFiber(Fiber &fiber) {
#ifdef DLM_ADDRESS_SANITIZER
  __sanitizer_start_switch_fiber(&schedulerFakeStack_, fiber.stackBottom, stacks_->bytes);
#else
  (void)fiber;
#endif
}

void BlockRunner::backInScheduler() {
#ifdef DLM_ADDRESS_SANITIZER
  __sanitizer_finish_switch_fiber(schedulerFakeStack_, nullptr, nullptr);
#endif
}

void BlockRunner::arrivedInFiber(Fiber &fiber) {
#ifdef DLM_ADDRESS_SANITIZER
  __sanitizer_finish_switch_fiber(fiber.fakeStack, &schedulerBottom_, &schedulerSize_);
#else
  (void)fiber;
#endif
}

void BlockRunner::leaveFiber(Fiber &fiber, bool dying) {
#ifdef DLM_ADDRESS_SANITIZER
  __sanitizer_start_switch_fiber(dying ? nullptr : &fiber.fakeStack, schedulerBottom_,
                                 schedulerSize_);
#else
  (void)fiber;
  (void)dying;
#endif
}

void BlockRunner::yield() {
  Fiber &fiber = *current_;
  leaveFiber(fiber, /*dying=*/false);
  fiber.scheduler = fiber.scheduler.resume();
  arrivedInFiber(fiber);
}

void BlockRunner::fail(const std::string &message) {
  if (error_.empty())
    error_ = message;
}

void BlockRunner::finish(Fiber &fiber) {
  fiber.done = true;
  --live_;
  Warp &warp = warps_[fiber.context.linearThread / 32];
  --warp.live;
  // A thread that returns no longer holds back a barrier the others wait at.
  if (arrived_ > 0 && arrived_ == live_) {
    arrived_ = 0;
    ++generation_;
  }
  if (warp.arrived > 0 && warp.arrived == warp.live) {
    warp.arrived = 0;
    ++warp.generation;
  }
}

// After a failure the checks go on (only the first is reported): the writes that follow must
// still count as written for the launches after this one.
void BlockRunner::checkAccess(const unsigned char *address, size_t bytes, AccessKind kind) {
  if (!current_)
    return;
  const unsigned thread = current_->context.linearThread;
  std::string failure;
  if (shared_.contains(address)) {
    const SyncPoint now{thread, generation_, warps_[thread / 32].generation};
    failure = shared_.check(address, bytes, kind, now);
  } else if (accessChecks().initcheck) {
    failure = checkDeviceAccess(address, bytes, kind, thread);
  }
  if (!failure.empty())
    fail(failure);
}

void BlockRunner::syncBlock() {
  const unsigned generation = generation_;
  if (++arrived_ == live_) {
    arrived_ = 0;
    ++generation_;
    return; // the last to arrive releases the others and goes on
  }
  current_->wait = Wait::block;
  current_->waitGeneration = generation;
  yield();
  current_->wait = Wait::none;
}

void BlockRunner::syncWarp() {
  Warp &warp = warps_[current_->context.linearThread / 32];
  const unsigned generation = warp.generation;
  if (++warp.arrived == warp.live) {
    warp.arrived = 0;
    ++warp.generation;
    return;
  }
  current_->wait = Wait::warp;
  current_->waitGeneration = generation;
  yield();
  current_->wait = Wait::none;
}

void BlockRunner::exchange(const void *value, void *out, size_t bytes, int sourceLane) {
  const unsigned linear = current_->context.linearThread;
  Warp &warp = warps_[linear / 32];
  const unsigned lane = linear % 32;
  std::memcpy(warp.slots[lane], value, bytes);
  syncWarp(); // every lane has published its value
  if (sourceLane < 0 || static_cast<unsigned>(sourceLane) >= warp.lanes) {
    fail("warp shuffle from lane " + std::to_string(sourceLane) + " of a warp of " +
         std::to_string(warp.lanes) + " threads");
    std::memcpy(out, value, bytes);
  } else if (fibers_[(linear & ~31u) + static_cast<unsigned>(sourceLane)].done) {
    fail("warp shuffle from lane " + std::to_string(sourceLane) + ", which has returned");
    std::memcpy(out, value, bytes);
  } else {
    std::memcpy(out, warp.slots[sourceLane], bytes);
  }
  syncWarp(); // nobody overwrites a slot before every lane has read
}

Status BlockRunner::run(KernelEntry kernel, void **parameters, uint3 blockIdx, dim3 blockDim,
                        dim3 gridDim) {
  namespace context = boost::context;
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  fibers_.clear();
  fibers_.resize(threads);
  warps_.assign((threads + 31) / 32, Warp{});
  for (unsigned w = 0; w < warps_.size(); ++w) {
    warps_[w].lanes = std::min(32u, threads - 32 * w);
    warps_[w].live = warps_[w].lanes;
  }
  live_ = threads;
  arrived_ = 0;
  generation_ = 0;
  error_.clear();
  if (accessChecks().any())
    shared_.beginBlock(kernel);
  currentRunner = this;

  for (unsigned t = 0; t < threads; ++t) {
    Fiber &fiber = fibers_[t];
    fiber.context.threadIdx = {t % blockDim.x, t / blockDim.x % blockDim.y,
                               t / (blockDim.x * blockDim.y)};
    fiber.context.blockIdx = blockIdx;
    fiber.context.blockDim = blockDim;
    fiber.context.gridDim = gridDim;
    fiber.context.linearThread = t;
  }
  // Each fiber starts right away and runs to its first barrier (or to its end).
  for (unsigned t = 0; t < threads; ++t) {
    Fiber *fiber = &fibers_[t];
    current_ = fiber;
    currentThread = &fiber->context;
    fiber->stackBottom = stacks_->stack(t);
    enterFiber(*fiber);
    fiber->self = context::callcc(std::allocator_arg, PooledStack(*stacks_, t),
                                  [this, fiber, kernel, parameters](context::continuation &&back) {
                                    arrivedInFiber(*fiber);
                                    fiber->scheduler = std::move(back);
                                    kernel(parameters);
                                    finish(*fiber);
                                    leaveFiber(*fiber, /*dying=*/true);
                                    return std::move(fiber->scheduler);
                                  });
    backInScheduler();
  }
  while (live_ > 0) {
    bool progressed = false;
    for (Fiber &fiber : fibers_) {
      if (fiber.done || !released(fiber))
        continue;
      current_ = &fiber;
      currentThread = &fiber.context;
      enterFiber(fiber);
      fiber.self = fiber.self.resume();
      backInScheduler();
      progressed = true;
    }
    if (!progressed) {
      unsigned atBlock = 0, atWarp = 0;
      for (const Fiber &fiber : fibers_) {
        atBlock += !fiber.done && fiber.wait == Wait::block;
        atWarp += !fiber.done && fiber.wait == Wait::warp;
      }
      fail("deadlock: " + std::to_string(atBlock) + " threads wait at __syncthreads and " +
           std::to_string(atWarp) + " at warp barriers that can never complete");
      break;
    }
  }
  // Unwinds the stacks of fibers left waiting by a deadlock.
  for (Fiber &fiber : fibers_)
    fiber.self = context::continuation();
  current_ = nullptr;
  currentThread = nullptr;
  currentRunner = nullptr;
  if (!error_.empty())
    return Status::error("block (" + std::to_string(blockIdx.x) + ", " +
                         std::to_string(blockIdx.y) + ", " + std::to_string(blockIdx.z) +
                         "): " + error_);
  return Status::ok();
}

void syncBlock() { currentRunner->syncBlock(); }
void syncWarp() { currentRunner->syncWarp(); }
void warpExchange(const void *value, void *out, size_t bytes, int sourceLane) {
  currentRunner->exchange(value, out, bytes, sourceLane);
}

} // namespace dlm::emu
