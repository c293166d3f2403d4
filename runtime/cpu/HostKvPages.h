// Host memory behind a PagedKvCache: page p holds, for every layer, the keys (after RoPE) and the
// values of pageTokens consecutive token slots, laid out [layer][K|V][slot][that layer's width]
// so that one token's K (or V) row is contiguous, exactly as the K/V projection produces it.
// Layers may differ in width (their kv_store records say; runtime/program/KernelProgram.h); a
// layer of width 0 has no cache and takes no room.
#pragma once

#include "runtime/kv/PagedKvCache.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace dlm::cpu {

class HostKvPages {
public:
  HostKvPages(int32_t pageCount, int32_t pageTokens, std::vector<int64_t> layerWidths)
      : pageTokens_(pageTokens), widths_(std::move(layerWidths)) {
    for (int64_t width : widths_) {
      layerOffsets_.push_back(pageFloats_);
      pageFloats_ += 2 * static_cast<int64_t>(pageTokens) * width;
    }
    // Left uninitialised on purpose: the OS commits pool memory only when a page is first
    // written, so a pool sized for the model's longest sequence costs nothing until used.
    storage_.reset(new float[static_cast<size_t>(pageCount) * static_cast<size_t>(pageFloats_)]);
  }

  // Every one of `layers` layers of width kvWidth.
  HostKvPages(int32_t pageCount, int32_t pageTokens, int64_t layers, int64_t kvWidth)
      : HostKvPages(pageCount, pageTokens,
                    std::vector<int64_t>(static_cast<size_t>(layers), kvWidth)) {}

  int32_t pageTokens() const { return pageTokens_; }
  // Floats per token of layer's K (and of its V).
  int64_t kvWidth(int64_t layer) const { return widths_[static_cast<size_t>(layer)]; }
  const std::vector<int64_t> &kvWidths() const { return widths_; }
  size_t pageBytes() const { return static_cast<size_t>(pageFloats_) * sizeof(float); }

  float *keys(kv::PageIndex page, int64_t layer) {
    return storage_.get() + page * pageFloats_ + layerOffsets_[static_cast<size_t>(layer)];
  }
  float *values(kv::PageIndex page, int64_t layer) {
    return keys(page, layer) + static_cast<int64_t>(pageTokens_) * kvWidth(layer);
  }
  const float *keys(kv::PageIndex page, int64_t layer) const {
    return storage_.get() + page * pageFloats_ + layerOffsets_[static_cast<size_t>(layer)];
  }
  const float *values(kv::PageIndex page, int64_t layer) const {
    return keys(page, layer) + static_cast<int64_t>(pageTokens_) * kvWidth(layer);
  }

  void copyPage(kv::PageIndex from, kv::PageIndex to) {
    std::memcpy(storage_.get() + to * pageFloats_, storage_.get() + from * pageFloats_,
                pageBytes());
  }

private:
  int32_t pageTokens_;
  std::vector<int64_t> widths_;
  std::vector<int64_t> layerOffsets_;
  int64_t pageFloats_ = 0;
  std::unique_ptr<float[]> storage_;
};

} // namespace dlm::cpu
