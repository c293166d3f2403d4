#include "runtime/cpu/CpuBackend.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

namespace dlm::cpu {

namespace {

constexpr int64_t kDefaultMaxSequence = 4096;

std::string str(int64_t value) { return std::to_string(value); }

template <typename T> size_t bytesOf(const std::vector<T> &buffer) {
  return buffer.size() * sizeof(T);
}

} // namespace

StatusOr<std::unique_ptr<CpuBackend>>
CpuBackend::create(std::shared_ptr<const model::ModelWeights> weights, int64_t maxPositions,
                   const BackendOptions &options) {
  if (!weights)
    return Status::error("cpu backend: no weights");
  if (options.kvPageTokens <= 0)
    return Status::error("cpu backend: kv page size must be positive, got " +
                         str(options.kvPageTokens));
  int64_t maxSequence = options.maxSequenceLength;
  if (maxSequence <= 0)
    maxSequence = maxPositions > 0 ? maxPositions : kDefaultMaxSequence;
  if (maxPositions > 0 && maxSequence > maxPositions)
    return Status::error("cpu backend: max sequence length " + str(maxSequence) +
                         " exceeds the model's " + str(maxPositions) + " positions");
  int64_t pages = options.kvPages;
  if (pages <= 0)
    pages = (maxSequence + options.kvPageTokens - 1) / options.kvPageTokens;
  if (pages > INT32_MAX)
    return Status::error("cpu backend: " + str(pages) + " KV pages is too many");
  return std::unique_ptr<CpuBackend>(
      new CpuBackend(std::move(weights), maxSequence, pages, options));
}

CpuBackend::CpuBackend(std::shared_ptr<const model::ModelWeights> weights,
                       int64_t maxSequenceLength, int64_t kvPages, const BackendOptions &options)
    : weights_(std::move(weights)), maxSequenceLength_(maxSequenceLength), pool_(options.threads),
      pages_(static_cast<int32_t>(kvPages), options.kvPageTokens, weights_->dims().layers,
             weights_->dims().kvWidth()),
      profiler_(options.profiler) {
  pool_.setProfiler(profiler_);
  kv_ = std::make_unique<kv::PagedKvCache>(
      static_cast<int32_t>(kvPages), options.kvPageTokens,
      [this](kv::PageIndex from, kv::PageIndex to) { pages_.copyPage(from, to); });
  sequence_ = kv_->create();
}

Status CpuBackend::reserve(int64_t tokens, int64_t logitRows) {
  if (tokens > maxSequenceLength_)
    return Status::error("a sequence of " + str(tokens) +
                         " tokens exceeds the session's maximum of " + str(maxSequenceLength_));
  const model::ModelDims &d = weights_->dims();
  if (tokens > reservedTokens_) {
    auto size = [tokens](int64_t width) { return static_cast<size_t>(tokens * width); };
    hidden_.resize(size(d.hidden));
    normed_.resize(size(d.hidden));
    q_.resize(size(d.qWidth()));
    k_.resize(size(d.kvWidth()));
    v_.resize(size(d.kvWidth()));
    attention_.resize(size(d.qWidth()));
    gate_.resize(size(d.intermediate));
    up_.resize(size(d.intermediate));
    attentionScratch_.reserve(tokens, d.kvWidth(), pool_.threads());
    rope_.build(tokens, d.headDim, d.ropeTheta);
    reservedTokens_ = tokens;
  }
  logitRows = std::min(logitRows, tokens);
  if (logitRows > reservedLogitRows_) {
    headInput_.resize(static_cast<size_t>(logitRows * d.hidden));
    logits_.resize(static_cast<size_t>(logitRows * d.vocabSize));
    reservedLogitRows_ = logitRows;
  }
  return Status::ok();
}

StatusOr<sampling::LogitsView> CpuBackend::forwardFull(const int32_t *tokens, int64_t count,
                                                       int64_t keep, sampling::LogitRows rows) {
  if (keep < 0 || keep > count)
    return Status::error("forward: keep " + str(keep) + " is outside [0, " + str(count) + "]");
  DLM_RETURN_IF_ERROR(kv_->trim(sequence_, 0));
  StatusOr<sampling::LogitsView> logits = run(tokens, count, 0, rows);
  if (!logits) {
    (void)kv_->trim(sequence_, 0);
    return logits.status();
  }
  DLM_RETURN_IF_ERROR(kv_->trim(sequence_, keep));
  DLM_RETURN_IF_ERROR(kv_->commit(sequence_));
  return logits;
}

StatusOr<sampling::LogitsView> CpuBackend::forwardCached(const int32_t *tokens, int64_t count,
                                                         int64_t keep, sampling::LogitRows rows) {
  if (kv_->length(sequence_) != keep || keep > count)
    return Status::error("cached forward: the KV cache holds " + str(kv_->length(sequence_)) +
                         " tokens, the caller expected " + str(keep) + " of " + str(count));
  StatusOr<sampling::LogitsView> logits = run(tokens + keep, count - keep, keep, rows);
  DLM_RETURN_IF_ERROR(kv_->trim(sequence_, keep));
  return logits;
}

StatusOr<sampling::LogitsView> CpuBackend::run(const int32_t *tokens, int64_t count, int64_t first,
                                               sampling::LogitRows rows) {
  const model::ModelDims &d = weights_->dims();
  if (rows.begin < 0 || rows.begin > rows.end || rows.end > count)
    return Status::error("forward: logit rows [" + str(rows.begin) + ", " + str(rows.end) +
                         ") are outside the " + str(count) + " tokens fed");
  if (first + count > reservedTokens_)
    return Status::error("forward: positions up to " + str(first + count) +
                         " exceed the reserved " + str(reservedTokens_));
  if (rows.count() > reservedLogitRows_)
    return Status::error("forward: " + str(rows.count()) + " logit rows exceed the reserved " +
                         str(reservedLogitRows_));
  if (count == 0)
    return sampling::LogitsView{logits_.data(), 0, d.vocabSize};
  for (int64_t i = 0; i < count; ++i)
    if (tokens[i] < 0 || tokens[i] >= d.embeddingSize)
      return Status::error("forward: token id " + str(tokens[i]) + " is outside [0, " +
                           str(d.embeddingSize) + ")");
  profile::Scope forward(profiler_, profile::Category::forward, "forward",
                         profile::TrackKind::thread, 0, -1, count);
  DLM_RETURN_IF_ERROR(kv_->append(sequence_, count));
  peakKvPages_ = std::max<int64_t>(peakKvPages_, kv_->pageCount() - kv_->freePages());

  timed(profile::Category::embedding, "embedding", -1, count, [&] {
    const float *embed = weights_->embed().data;
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(&hidden_[i * d.hidden], embed + tokens[i] * d.hidden, d.hidden * sizeof(float));
  });
  for (int64_t l = 0; l < d.layers; ++l)
    DLM_RETURN_IF_ERROR(runLayer(weights_->layers()[l], l, count, first));
  DLM_RETURN_IF_ERROR(computeLogits(rows));
  return sampling::LogitsView{logits_.data(), rows.count(), d.vocabSize};
}

Status CpuBackend::runLayer(const model::LayerWeights &w, int64_t index, int64_t count,
                            int64_t first) {
  using profile::Category;
  const model::ModelDims &d = weights_->dims();
  const int64_t H = d.hidden;
  const int threads = pool_.threads();
  auto project = [&](const char *name, const float *x, const model::HostTensor &weight,
                     const float *bias, float *y) {
    return timed(Category::gemm, name, index, count,
                 [&] { return linear(x, count, weight, bias, y, threads); });
  };
  timed(Category::rmsnorm, "attn_norm", index, count, [&] {
    rmsNorm(hidden_.data(), count, H, H, w.attnNorm.data, d.rmsNormEps, normed_.data());
  });
  DLM_RETURN_IF_ERROR(project("q_proj", normed_.data(), w.q, w.qBias.data, q_.data()));
  DLM_RETURN_IF_ERROR(project("k_proj", normed_.data(), w.k, w.kBias.data, k_.data()));
  DLM_RETURN_IF_ERROR(project("v_proj", normed_.data(), w.v, w.vBias.data, v_.data()));
  if (w.qNorm) {
    // Per-head norm: the [count, heads * headDim] buffer is count * heads rows of headDim.
    timed(Category::rmsnorm, "qk_norm", index, count, [&] {
      rmsNorm(q_.data(), count * d.heads, d.headDim, d.headDim, w.qNorm.data, d.rmsNormEps,
              q_.data());
      rmsNorm(k_.data(), count * d.kvHeads, d.headDim, d.headDim, w.kNorm.data, d.rmsNormEps,
              k_.data());
    });
  }
  timed(Category::rope, "rope", index, count, [&] {
    applyRope(q_.data(), count, d.qWidth(), d.heads, d.headDim, rope_, first);
    applyRope(k_.data(), count, d.kvWidth(), d.kvHeads, d.headDim, rope_, first);
  });

  const kv::PageIndex *table = kv_->blockTable(sequence_).data();
  timed(Category::kvStore, "kv_store", index, count,
        [&] { storeKv(pages_, table, index, first, count, k_.data(), v_.data()); });
  AttentionShape shape{d.heads, d.kvHeads, d.headDim, d.causal};
  DLM_RETURN_IF_ERROR(timed(Category::attention, "attention", index, count, [&] {
    return pagedAttention(q_.data(), count, first, first + count, shape, pages_, table, index,
                          attention_.data(), attentionScratch_, pool_);
  }));

  DLM_RETURN_IF_ERROR(project("o_proj", attention_.data(), w.o, nullptr, normed_.data()));
  timed(Category::elementwise, "residual_add", index, count,
        [&] { addInPlace(hidden_.data(), normed_.data(), count * H); });

  timed(Category::rmsnorm, "mlp_norm", index, count, [&] {
    rmsNorm(hidden_.data(), count, H, H, w.mlpNorm.data, d.rmsNormEps, normed_.data());
  });
  DLM_RETURN_IF_ERROR(project("gate_proj", normed_.data(), w.gate, nullptr, gate_.data()));
  DLM_RETURN_IF_ERROR(project("up_proj", normed_.data(), w.up, nullptr, up_.data()));
  timed(Category::elementwise, "silu_mul", index, count,
        [&] { siluMultiply(gate_.data(), up_.data(), count * d.intermediate); });
  DLM_RETURN_IF_ERROR(project("down_proj", gate_.data(), w.down, nullptr, normed_.data()));
  timed(Category::elementwise, "residual_add", index, count,
        [&] { addInPlace(hidden_.data(), normed_.data(), count * H); });
  return Status::ok();
}

Status CpuBackend::computeLogits(sampling::LogitRows rows) {
  const model::ModelDims &d = weights_->dims();
  if (rows.count() == 0)
    return Status::ok();
  // Only the rows a policy decodes go through the LM head: for a real vocabulary the head is
  // the largest GEMM of the forward.
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const int64_t source = d.logitShift ? std::max<int64_t>(r - 1, 0) : r;
    std::memcpy(&headInput_[(r - rows.begin) * d.hidden], &hidden_[source * d.hidden],
                d.hidden * sizeof(float));
  }
  timed(profile::Category::rmsnorm, "final_norm", -1, rows.count(), [&] {
    rmsNorm(headInput_.data(), rows.count(), d.hidden, d.hidden, weights_->finalNorm().data,
            d.rmsNormEps, headInput_.data());
  });
  return timed(profile::Category::lmHead, "lm_head", -1, rows.count(), [&] {
    return linear(headInput_.data(), rows.count(), weights_->lmHead(), d.vocabSize, nullptr,
                  logits_.data(), pool_.threads());
  });
}

MemoryUsage CpuBackend::memoryUsage() const {
  MemoryUsage usage;
  // Tied weights are one tensor: count each buffer once.
  std::set<const float *> seen;
  auto add = [&](const model::HostTensor &t) {
    if (t && seen.insert(t.data).second)
      usage.weightBytes += static_cast<size_t>(t.rows * t.cols) * sizeof(float);
  };
  add(weights_->embed());
  add(weights_->finalNorm());
  add(weights_->lmHead());
  for (const model::LayerWeights &l : weights_->layers())
    for (const model::HostTensor *t : {&l.attnNorm, &l.q, &l.k, &l.v, &l.qBias, &l.kBias,
                                       &l.vBias, &l.qNorm, &l.kNorm, &l.o, &l.mlpNorm, &l.gate,
                                       &l.up, &l.down})
      add(*t);
  usage.convertedWeightBytes = weights_->ownedBytes();
  const size_t pageBytes = pages_.pageBytes();
  usage.kvPoolBytes = static_cast<size_t>(kv_->pageCount()) * pageBytes;
  usage.kvInUseBytes = static_cast<size_t>(kv_->pageCount() - kv_->freePages()) * pageBytes;
  usage.kvPeakBytes = static_cast<size_t>(peakKvPages_) * pageBytes;
  usage.activationBytes = bytesOf(hidden_) + bytesOf(normed_) + bytesOf(q_) + bytesOf(k_) +
                          bytesOf(v_) + bytesOf(attention_) + bytesOf(gate_) + bytesOf(up_) +
                          bytesOf(attentionScratch_.keys) + bytesOf(attentionScratch_.values) +
                          bytesOf(attentionScratch_.scores) + bytesOf(headInput_) +
                          bytesOf(logits_);
  return usage;
}

} // namespace dlm::cpu
