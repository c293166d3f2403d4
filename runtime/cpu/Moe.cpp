#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

namespace dlm::cpu {

namespace {

// The (token, choice) pairs up to which a forward's experts run one per thread: while the average
// expert's two products (6 I H flops a pair) stay under kParallelGemmFlops, each product would
// run on one thread anyway and the other threads would wait (DiffusionGemma's 16 experts over a
// 64-token canvas: some 16 tokens an expert).
int64_t expertParallelSlots(int64_t hidden, int64_t experts, int64_t expertWidth) {
  return static_cast<int64_t>(kParallelGemmFlops * static_cast<double>(experts) /
                              (6.0 * static_cast<double>(expertWidth * hidden)));
}

template <typename Buffer> void grow(Buffer &buffer, int64_t size) {
  if (buffer.size() < static_cast<size_t>(size))
    buffer.resize(static_cast<size_t>(size));
}

} // namespace

void MoeScratch::reserve(int64_t tokens, int64_t hidden, int64_t experts, int64_t topK,
                         int64_t expertWidth, int threads, bool rowByRow) {
  grow(routed, tokens * hidden);
  grow(logits, tokens * experts);
  grow(choice, tokens * topK);
  grow(order, experts);
  grow(choosing, experts);
  grow(groups, experts);
  grow(groupScore, experts);
  grow(weight, tokens * topK);
  parallelSlots = threads > 1 && !rowByRow
                      ? std::min(tokens * topK, expertParallelSlots(hidden, experts, expertWidth))
                      : 0;
  grow(slotOutput, parallelSlots * hidden);
  // The first thread's for every token (the experts one after the other), the others' for the
  // tokens of a forward whose experts run one per thread.
  grow(this->experts, parallelSlots > 0 ? threads : 1);
  for (size_t t = 0; t < this->experts.size(); ++t) {
    Expert &expert = this->experts[t];
    const int64_t rows = t == 0 ? tokens : parallelSlots / topK;
    grow(expert.slots, rows);
    grow(expert.gathered, rows * hidden);
    grow(expert.gateUp, rows * 2 * expertWidth);
    grow(expert.activation, rows * expertWidth);
    grow(expert.output, rows * hidden);
  }
}

size_t MoeScratch::bytes() const {
  size_t floats = routed.size() + logits.size() + weight.size() + choosing.size() +
                  groupScore.size() + slotOutput.size();
  size_t ints = choice.size() + order.size() + groups.size();
  for (const Expert &expert : experts) {
    floats += expert.gathered.size() + expert.gateUp.size() + expert.activation.size() +
              expert.output.size();
    ints += expert.slots.size();
  }
  return floats * sizeof(float) + ints * sizeof(int32_t);
}

namespace {

// z @ router^T into the logits, at once or a row at a time.
Status routerProduct(const float *z, int64_t rows, int64_t hidden, const MoeParams &moe,
                     MoeScratch &scratch, int threads, bool rowByRow) {
  const model::HostTensor &router = *moe.router.tensor;
  if (!rowByRow)
    return linear(z, rows, router, nullptr, scratch.logits.data(), threads);
  for (int64_t t = 0; t < rows; ++t)
    DLM_RETURN_IF_ERROR(linear(z + t * hidden, 1, router, nullptr,
                               scratch.logits.data() + t * moe.experts, threads));
  return Status::ok();
}

// logits = z @ router^T: z = rms_norm_noweight(r) * router_scale * router_input_scale (two
// float32 products in that order) with routerNorm, z = r without.
Status routerLogits(const float *r, int64_t rows, int64_t hidden, const MoeParams &moe,
                    MoeScratch &scratch, int threads, bool rowByRow) {
  if (!moe.routerNorm)
    return routerProduct(r, rows, hidden, moe, scratch, threads, rowByRow);
  rmsNorm(r, rows, hidden, hidden, nullptr, moe.eps, scratch.routed.data());
  const float *routerScale = moe.routerScale.tensor ? moe.routerScale.tensor->data : nullptr;
  const float inputScale = static_cast<float>(moe.routerInputScale);
  for (int64_t t = 0; t < rows; ++t) {
    float *z = scratch.routed.data() + t * hidden;
    for (int64_t h = 0; h < hidden; ++h)
      z[h] = z[h] * (routerScale ? routerScale[h] : 1.0f) * inputScale;
  }
  return routerProduct(scratch.routed.data(), rows, hidden, moe, scratch, threads, rowByRow);
}

// The scores of one token's logits p, in place: a softmax over the experts or sigmoids.
void scoreExperts(float *p, const MoeParams &moe) {
  const int64_t experts = moe.experts;
  if (moe.sigmoidScores) {
    for (int64_t e = 0; e < experts; ++e)
      p[e] = 1.0f / (1.0f + std::exp(-p[e]));
    return;
  }
  float maximum = -INFINITY;
  for (int64_t e = 0; e < experts; ++e)
    maximum = std::max(maximum, p[e]);
  float sum = 0;
  for (int64_t e = 0; e < experts; ++e) {
    p[e] = std::exp(p[e] - maximum);
    sum += p[e];
  }
  for (int64_t e = 0; e < experts; ++e)
    p[e] /= sum;
}

// With groups: the experts outside the topGroups best groups (a group scores the sum of its two
// largest choosing scores; ties: the lower group) can no longer be chosen.
void limitToBestGroups(const MoeParams &moe, MoeScratch &scratch) {
  const int64_t groups = moe.groups, size = moe.experts / moe.groups;
  float *c = scratch.choosing.data();
  std::vector<float> &groupScore = scratch.groupScore;
  for (int64_t g = 0; g < groups; ++g) {
    float first = -INFINITY, second = -INFINITY;
    for (int64_t e = g * size; e < (g + 1) * size; ++e) {
      if (c[e] > first) {
        second = first;
        first = c[e];
      } else if (c[e] > second) {
        second = c[e];
      }
    }
    groupScore[static_cast<size_t>(g)] = first + second;
  }
  std::vector<int32_t> &order = scratch.groups;
  for (int64_t g = 0; g < groups; ++g)
    order[static_cast<size_t>(g)] = static_cast<int32_t>(g);
  const float *score = groupScore.data();
  std::partial_sort(order.begin(), order.begin() + moe.topGroups, order.begin() + groups,
                    [score](int32_t a, int32_t b) {
                      return score[a] > score[b] || (score[a] == score[b] && a < b);
                    });
  for (int64_t j = moe.topGroups; j < groups; ++j)
    for (int64_t g = order[static_cast<size_t>(j)], e = g * size; e < (g + 1) * size; ++e)
      c[e] = -INFINITY;
}

// One token: its experts' scores from the logits p (in place), the topK largest choosing scores
// (score + expert bias; ties: the lower expert id) among the allowed groups, and their weights:
// the scores renormalised (normalizeTopK), times expertScale and routedScale.
void routeToken(float *p, const MoeParams &moe, MoeScratch &scratch, int32_t *choice,
                float *weight) {
  const int64_t experts = moe.experts, topK = moe.topK;
  scoreExperts(p, moe);
  float *c = scratch.choosing.data();
  const float *bias = moe.expertBias.tensor ? moe.expertBias.tensor->data : nullptr;
  for (int64_t e = 0; e < experts; ++e)
    c[e] = bias ? p[e] + bias[e] : p[e];
  if (moe.groups > 1)
    limitToBestGroups(moe, scratch);
  std::vector<int32_t> &order = scratch.order;
  for (int64_t e = 0; e < experts; ++e)
    order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
  std::partial_sort(order.begin(), order.begin() + topK, order.begin() + experts,
                    [c](int32_t a, int32_t b) { return c[a] > c[b] || (c[a] == c[b] && a < b); });
  float chosen = 0;
  for (int64_t j = 0; j < topK; ++j)
    chosen += p[order[static_cast<size_t>(j)]];
  const float *expertScale = moe.expertScale.tensor ? moe.expertScale.tensor->data : nullptr;
  const float routedScale = static_cast<float>(moe.routedScale);
  for (int64_t j = 0; j < topK; ++j) {
    const int32_t e = order[static_cast<size_t>(j)];
    float w = moe.normalizeTopK ? p[e] / chosen : p[e];
    if (expertScale)
      w *= expertScale[e];
    choice[j] = e;
    weight[j] = w * routedScale;
  }
}

} // namespace

Status widenedExpertGemm(const MoeParams &moe, int64_t expertWidth, int64_t hidden,
                         ExpertMatrix matrix, int64_t e, const float *in, int64_t rows, float *out,
                         int threads) {
  const int64_t inner = expertWidth;
  const model::HostTensor slice =
      matrix == ExpertMatrix::gateUp
          ? model::HostTensor{moe.gateUp.tensor->data + e * 2 * inner * hidden, 2 * inner, hidden}
          : model::HostTensor{moe.down.tensor->data + e * hidden * inner, hidden, inner};
  return linear(in, rows, slice, nullptr, out, threads);
}

namespace {

// Expert e's tokens (their slots in `expert`, `count` of them) through gate_up, act(gate) * up
// and down into expert.output, on `thread` (see ExpertGemm).
Status runExpert(int64_t e, const float *x, int64_t rows, int64_t hidden, const MoeParams &moe,
                 int64_t inner, const int32_t *choice, MoeScratch::Expert &expert, int64_t &count,
                 const ExpertGemm &expertGemm, int thread) {
  const int64_t topK = moe.topK;
  count = 0;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t j = 0; j < topK; ++j)
      if (choice[t * topK + j] == e) {
        expert.slots[static_cast<size_t>(count)] = static_cast<int32_t>(t * topK + j);
        std::memcpy(expert.gathered.data() + count * hidden, x + t * hidden,
                    static_cast<size_t>(hidden) * sizeof(float));
        ++count;
      }
  if (count == 0)
    return Status::ok();
  DLM_RETURN_IF_ERROR(expertGemm(ExpertMatrix::gateUp, e, expert.gathered.data(), count,
                                 expert.gateUp.data(), thread));
  const bool gelu = moe.activation == spec::kernels::MoeActivation::geluTanh;
  for (int64_t i = 0; i < count; ++i) {
    float *a = expert.activation.data() + i * inner;
    const float *row = expert.gateUp.data() + i * 2 * inner;
    std::memcpy(a, row, static_cast<size_t>(inner) * sizeof(float));
    if (gelu)
      geluTanhMultiply(a, row + inner, inner);
    else
      siluMultiply(a, row + inner, inner);
  }
  return expertGemm(ExpertMatrix::down, e, expert.activation.data(), count, expert.output.data(),
                    thread);
}

// y[token] += weight * out, the token of `slot`.
void addWeighted(const MoeScratch &scratch, int64_t topK, int64_t hidden, int32_t slot,
                 const float *out, float *y) {
  const float w = scratch.weight[static_cast<size_t>(slot)];
  float *to = y + (slot / topK) * hidden;
  for (int64_t h = 0; h < hidden; ++h)
    to[h] += w * out[h];
}

// The experts one per thread, each output row kept by its slot; then each token's outputs added
// in ascending expert order, as the serial loop adds them.
Status runExpertsInParallel(const float *x, int64_t rows, int64_t hidden, const MoeParams &moe,
                            int64_t inner, float *y, MoeScratch &scratch, ThreadPool &pool,
                            const ExpertGemm &expertGemm) {
  const int64_t topK = moe.topK;
  std::atomic<bool> failed{false};
  Status failure = Status::ok();
  std::mutex failureMutex;
  pool.parallelFor(moe.experts, 2, [&](int64_t begin, int64_t end, int thread) {
    MoeScratch::Expert &expert = scratch.experts[static_cast<size_t>(thread)];
    for (int64_t e = begin; e < end && !failed; ++e) {
      int64_t count = 0;
      Status status = runExpert(e, x, rows, hidden, moe, inner, scratch.choice.data(), expert,
                                count, expertGemm, thread);
      if (!status.isOk()) {
        std::lock_guard<std::mutex> lock(failureMutex);
        failure = std::move(status);
        failed = true;
        return;
      }
      for (int64_t i = 0; i < count; ++i)
        std::memcpy(scratch.slotOutput.data() + expert.slots[static_cast<size_t>(i)] * hidden,
                    expert.output.data() + i * hidden, static_cast<size_t>(hidden) * sizeof(float));
    }
  });
  DLM_RETURN_IF_ERROR(failure);
  for (int64_t t = 0; t < rows; ++t) {
    const int32_t *chosen = scratch.choice.data() + t * topK;
    for (int64_t e = 0, added = 0; added < topK && e < moe.experts; ++e)
      for (int64_t j = 0; j < topK; ++j)
        if (chosen[j] == e) {
          const int32_t slot = static_cast<int32_t>(t * topK + j);
          addWeighted(scratch, topK, hidden, slot, scratch.slotOutput.data() + slot * hidden, y);
          ++added;
        }
  }
  return Status::ok();
}

} // namespace

Status moeForward(const float *r, const float *x, int64_t rows, int64_t hidden,
                  const MoeParams &moe, int64_t expertWidth, float *y, MoeScratch &scratch,
                  ThreadPool &pool, const ExpertGemm &expertGemm, bool rowByRow) {
  const int64_t experts = moe.experts, topK = moe.topK, inner = expertWidth;
  DLM_RETURN_IF_ERROR(routerLogits(r, rows, hidden, moe, scratch, pool.threads(), rowByRow));

  for (int64_t t = 0; t < rows; ++t)
    routeToken(scratch.logits.data() + t * experts, moe, scratch, scratch.choice.data() + t * topK,
               scratch.weight.data() + t * topK);

  std::memset(y, 0, static_cast<size_t>(rows * hidden) * sizeof(float));
  // Batch-invariant products stay on the whole pool: which way the experts run depends on the
  // batch, and a row's result must not.
  if (!rowByRow && rows * topK <= scratch.parallelSlots)
    return runExpertsInParallel(x, rows, hidden, moe, inner, y, scratch, pool, expertGemm);
  // Per expert: its tokens' rows through gate_up and down, accumulated into y with their weights.
  MoeScratch::Expert &expert = scratch.experts.front();
  for (int64_t e = 0; e < experts; ++e) {
    int64_t count = 0;
    DLM_RETURN_IF_ERROR(runExpert(e, x, rows, hidden, moe, inner, scratch.choice.data(), expert,
                                  count, expertGemm, -1));
    for (int64_t i = 0; i < count; ++i)
      addWeighted(scratch, topK, hidden, expert.slots[static_cast<size_t>(i)],
                  expert.output.data() + i * hidden, y);
  }
  return Status::ok();
}

Status CpuBackend::runMoe(const RecordRun &run) {
  const program::ProgramRecord &k = run.k;
  const int64_t count = run.count, width = run.width;
  return timedRecord(run, [&] {
    const auto &moe = k.as<MoeParams>();
    // Experts kept as stored run on the projections' GEMM; float32 ones are read widened.
    auto packed = [&](const model::HostTensor *stack) {
      auto it = packedExperts_.find(stack);
      return it == packedExperts_.end() ? nullptr : it->second.get();
    };
    const PackedExperts *gateUp = packed(moe.gateUp.tensor), *down = packed(moe.down.tensor);
    // On every thread (thread < 0), or on pool thread `thread` alone with its own GEMM state.
    auto product = [&](ExpertMatrix matrix, int64_t e, const float *x, int64_t rows, float *y,
                       int thread) {
      const PackedExperts *stack = matrix == ExpertMatrix::gateUp ? gateUp : down;
      if (!stack)
        return widenedExpertGemm(moe, k.expertWidth, width, matrix, e, x, rows, y,
                                 thread < 0 ? pool_.threads() : 1);
      if (thread < 0)
        return packedGemm_.run(stack->expert(e), x, rows, nullptr, y, pool_, false);
      return expertGemms_[static_cast<size_t>(thread)]->run(stack->expert(e), x, rows, nullptr, y,
                                                            onOneThread_, false);
    };
    // Batch-invariant: every product of the block a row at a time, so that a row's result does
    // not depend on the rows that share its forward or its experts.
    const bool rowByRow = batchInvariant_;
    auto gemm = [&](ExpertMatrix matrix, int64_t e, const float *x, int64_t rows, float *y,
                    int thread) {
      if (!rowByRow)
        return product(matrix, e, x, rows, y, thread);
      const bool gateUpMatrix = matrix == ExpertMatrix::gateUp;
      const int64_t inputs = gateUpMatrix ? width : k.expertWidth;
      const int64_t outputs = gateUpMatrix ? 2 * k.expertWidth : width;
      for (int64_t i = 0; i < rows; ++i)
        DLM_RETURN_IF_ERROR(product(matrix, e, x + i * inputs, 1, y + i * outputs, thread));
      return Status::ok();
    };
    return moeForward(operand(run, 0), operand(run, 1), count, width, moe, k.expertWidth,
                      result(run), moeScratch_, pool_, ExpertGemm(gemm), rowByRow);
  });
}

} // namespace dlm::cpu
