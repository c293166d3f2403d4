// Host memory behind a PagedKvCache: page p holds, for every layer, the keys (after RoPE) and the
// values of pageTokens consecutive token slots, laid out [layer][K|V][slot][kvHeads * headDim] so
// that one token's K (or V) row is contiguous, exactly as the K/V projection produces it.
#pragma once

#include "runtime/kv/PagedKvCache.h"

#include <cstdint>
#include <cstring>
#include <memory>

namespace dlm::cpu {

class HostKvPages {
public:
  HostKvPages(int32_t pageCount, int32_t pageTokens, int64_t layers, int64_t kvWidth)
      : pageTokens_(pageTokens), kvWidth_(kvWidth),
        layerFloats_(2 * static_cast<int64_t>(pageTokens) * kvWidth),
        pageFloats_(layers * layerFloats_),
        // Left uninitialised on purpose: the OS commits pool memory only when a page is first
        // written, so a pool sized for the model's longest sequence costs nothing until used.
        storage_(new float[static_cast<size_t>(pageCount) * static_cast<size_t>(pageFloats_)]) {}

  int32_t pageTokens() const { return pageTokens_; }
  int64_t kvWidth() const { return kvWidth_; }
  size_t pageBytes() const { return static_cast<size_t>(pageFloats_) * sizeof(float); }

  float *keys(kv::PageIndex page, int64_t layer) {
    return storage_.get() + page * pageFloats_ + layer * layerFloats_;
  }
  float *values(kv::PageIndex page, int64_t layer) {
    return keys(page, layer) + static_cast<int64_t>(pageTokens_) * kvWidth_;
  }
  const float *keys(kv::PageIndex page, int64_t layer) const {
    return storage_.get() + page * pageFloats_ + layer * layerFloats_;
  }
  const float *values(kv::PageIndex page, int64_t layer) const {
    return keys(page, layer) + static_cast<int64_t>(pageTokens_) * kvWidth_;
  }

  void copyPage(kv::PageIndex from, kv::PageIndex to) {
    std::memcpy(storage_.get() + to * pageFloats_, storage_.get() + from * pageFloats_,
                pageBytes());
  }

private:
  int32_t pageTokens_;
  int64_t kvWidth_;
  int64_t layerFloats_;
  int64_t pageFloats_;
  std::unique_ptr<float[]> storage_;
};

} // namespace dlm::cpu
