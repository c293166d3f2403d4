#include "runtime/profile/Profiler.h"

namespace dlm::profile {

const char *categoryName(Category category) {
  switch (category) {
  case Category::embedding:
    return "embedding";
  case Category::rmsnorm:
    return "rmsnorm";
  case Category::gemm:
    return "gemm";
  case Category::rope:
    return "rope";
  case Category::kvStore:
    return "kv_store";
  case Category::attention:
    return "attention";
  case Category::elementwise:
    return "elementwise";
  case Category::moe:
    return "moe";
  case Category::lmHead:
    return "lm_head";
  case Category::forward:
    return "forward";
  case Category::step:
    return "step";
  case Category::block:
    return "block";
  case Category::request:
    return "request";
  case Category::workerShare:
    return "worker_share";
  }
  return "unknown";
}

Profiler::Profiler(size_t capacity)
    : epoch_(Clock::now()), capacity_(capacity), events_(new Event[capacity]) {}

void Profiler::clear() {
  next_.store(0, std::memory_order_relaxed);
  dropped_.store(0, std::memory_order_relaxed);
}

} // namespace dlm::profile
