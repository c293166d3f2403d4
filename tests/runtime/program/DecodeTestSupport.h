// What the decode-program tests share: the program texts dlmc embeds, and a fake model whose
// logits are pseudo-random but depend on everything a forward is fed.
#pragma once

#include "tests/runtime/program/ShippedDecodeProgram.h"

#include "runtime/sampling/CounterRng.h"
#include "runtime/sampling/DecodeModel.h"
#include "tests/runtime/sampling/FullCachedModel.h"

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace dlm::program::testing {

using sampling::LogitRows;
using sampling::LogitsView;

// The program dlmc ships for <name> ("low-confidence.decode"), as text.
inline std::string readDecodeProgramText(const std::string &name) {
  return shippedDecodeProgramText(name);
}

inline constexpr int64_t kVocab = 12;
inline constexpr int32_t kMask = 11;
inline constexpr int64_t kEos = 3;

// Logits that depend on the position (a peak token and height, so that some rows are confident
// and others are not) and, through small noise, on every token fed, so that any difference in
// what a forward sees changes what it returns. Logs every call.
class RandomModel : public dlm::sampling::testing::FullCachedModel {
public:
  struct Call {
    bool cached;
    int64_t count;
    int64_t keep;
    int64_t rowBegin;
    int64_t rowEnd;
    std::vector<int32_t> tokens;
    bool operator==(const Call &o) const {
      return cached == o.cached && count == o.count && keep == o.keep && rowBegin == o.rowBegin &&
             rowEnd == o.rowEnd && tokens == o.tokens;
    }
  };

  explicit RandomModel(uint64_t seed) : seed_(seed) {}

  std::vector<Call> calls;
  std::vector<std::pair<int64_t, int64_t>> reserves;

  int64_t vocabSize() const override { return kVocab; }
  Status reserve(int64_t tokens, int64_t rows) override {
    reserves.emplace_back(tokens, rows);
    return Status::ok();
  }
  StatusOr<LogitsView> runFull(const int32_t *tokens, int64_t count, int64_t keep,
                               LogitRows rows) override {
    calls.push_back({false, count, keep, rows.begin, rows.end, {tokens, tokens + count}});
    cached_ = keep;
    return fill(tokens, count, rows, 0);
  }
  StatusOr<LogitsView> runCached(const int32_t *tokens, int64_t count, int64_t keep,
                                 LogitRows rows) override {
    if (keep != cached_)
      return Status::error("fake: cache mismatch");
    calls.push_back({true, count, keep, rows.begin, rows.end, {tokens, tokens + count}});
    return fill(tokens, count, rows, keep);
  }

private:
  LogitsView fill(const int32_t *tokens, int64_t count, LogitRows rows, int64_t first) {
    uint64_t context = sampling::rng::mix64(seed_ ^ 0x5eedull);
    for (int64_t i = 0; i < count; ++i)
      context = sampling::rng::mix64(context ^ static_cast<uint64_t>(tokens[i] + 1));
    constexpr float kHeights[] = {0.3f, 2.0f, 5.0f, 9.0f, 16.0f, 24.0f};
    buffer_.assign(static_cast<size_t>(rows.count() * kVocab), 0.0f);
    for (int64_t r = 0; r < rows.count(); ++r) {
      const int64_t position = first + rows.begin + r;
      const uint64_t here = sampling::rng::mix64(seed_ ^ static_cast<uint64_t>(position) * 7919);
      const int64_t peak = static_cast<int64_t>(here % kVocab);
      const float height = kHeights[(here >> 16) % std::size(kHeights)];
      for (int64_t v = 0; v < kVocab; ++v) {
        const double noise = sampling::rng::uniform(context ^ static_cast<uint64_t>(position),
                                                    static_cast<uint64_t>(v));
        buffer_[r * kVocab + v] = static_cast<float>(noise * 1.5) + (v == peak ? height : 0.0f);
      }
    }
    return LogitsView{buffer_.data(), rows.count(), kVocab};
  }

  uint64_t seed_;
  int64_t cached_ = -1;
  std::vector<float> buffer_;
};

} // namespace dlm::program::testing
