// The CPU backend: runs the compiled forward — the artifact's kernel records
// (runtime/program/KernelProgram.h: embedding, RMSNorm, norm + linear, linear with optional bias
// and residual accumulation, NeoX RoPE, KV store and paged attention with GQA under the record's
// mask, add, SiLU gating, final norm + LM head with Dream's logit shift) — over one sequence of a paged KV cache in host memory, every intermediate
// in one workspace laid out by the compiler's per-token-row memory plan. GEMMs go to oneDNN;
// everything else is plain loops the compiler vectorises. Every buffer is sized by reserve();
// forwards allocate nothing.
#pragma once

#include "runtime/cpu/HostKvPages.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/kv/PagedKvCache.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/program/KernelProgram.h"
#include "runtime/profile/Profiler.h"
#include "runtime/backend/Backend.h"
#include "runtime/backend/SequenceForwards.h"

#include <memory>
#include <vector>

namespace dlm::cpu {

class CpuBackend final : public Backend {
public:
  // `records` are the artifact's "cpu" kernel records (validated here, errors name the record);
  // `maxPositions` is the model's limit (0 = unknown).
  static StatusOr<std::unique_ptr<CpuBackend>>
  create(std::shared_ptr<const model::ModelWeights> weights,
         const std::vector<artifact::Kernel> &records, int64_t maxPositions,
         const BackendOptions &options);

  std::string_view name() const override { return "cpu"; }
  int64_t maxSequenceLength() const override { return maxSequenceLength_; }
  int64_t vocabSize() const override { return weights_->dims().vocabSize; }

  Status reserve(int64_t tokens, int64_t logitRows) override;
  StatusOr<sampling::LogitsView> forwardFull(const int32_t *tokens, int64_t count, int64_t keep,
                                             sampling::LogitRows rows) override;
  StatusOr<sampling::LogitsView> forwardCached(const int32_t *tokens, int64_t count, int64_t keep,
                                               sampling::LogitRows rows) override;
  StatusOr<sampling::LogitsView> forwardWindow(const int32_t *tokens, int64_t count,
                                               int64_t feedBegin, int64_t feedEnd,
                                               sampling::LogitRows rows) override;

  MemoryUsage memoryUsage() const override;

  // The KV cache, for inspection (tests, statistics).
  const kv::PagedKvCache &kvCache() const { return *kv_; }
  int threads() const { return pool_.threads(); }

private:
  CpuBackend(std::shared_ptr<const model::ModelWeights> weights, program::KernelProgram program,
             int64_t maxSequenceLength, int64_t kvPages, const BackendOptions &options);

  // Grows the sequence to span.keys slots, runs every layer over the span's tokens (their K/V
  // written to slots span.first.., attending to slots [0, span.keys)) and computes the requested
  // logit rows (SequenceForwards.h).
  StatusOr<sampling::LogitsView> run(const int32_t *tokens, const ForwardSpan &span,
                                     sampling::LogitRows rows);
  Status runKernel(const program::ProgramRecord &kernel, const int32_t *tokens,
                   const ForwardSpan &span, sampling::LogitRows rows);
  // The rows of `slot` for a forward of `count` tokens.
  float *slot(int64_t index, int64_t count) {
    return workspace_.data() + program_.slots[static_cast<size_t>(index)].offset * count;
  }

  // Runs body() inside a kernel timer on the calling thread (just body() without a profiler).
  template <typename Body>
  auto timed(profile::Category kind, const char *name, int64_t layer, int64_t tokens, Body &&body) {
    profile::Scope scope(profiler_, kind, name, profile::TrackKind::thread, 0, layer, tokens);
    return body();
  }

  std::shared_ptr<const model::ModelWeights> weights_;
  program::KernelProgram program_;
  int64_t maxSequenceLength_;
  ThreadPool pool_;
  HostKvPages pages_;
  std::unique_ptr<kv::PagedKvCache> kv_;
  kv::SequenceId sequence_;
  // The rope records' table (one theta and head_dim for all: see create()).
  RopeTable rope_;
  double ropeTheta_ = 0;
  int64_t ropeHeadDim_ = 0; // 0: no rope record
  profile::Profiler *profiler_;
  // The most KV pages the sequence has held at once.
  int64_t peakKvPages_ = 0;

  // Workspace, sized by reserve().
  int64_t reservedTokens_ = 0;
  int64_t reservedLogitRows_ = 0;
  std::vector<float> workspace_; // program_.rowElements per token
  std::vector<float> normed_;    // norm_linear's normalised rows
  AttentionScratch attentionScratch_;
  std::vector<float> headInput_, logits_;
};

} // namespace dlm::cpu
