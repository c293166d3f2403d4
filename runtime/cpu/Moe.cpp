#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dlm::cpu {

void MoeScratch::reserve(int64_t tokens, int64_t hidden, int64_t experts, int64_t topK,
                         int64_t expertWidth) {
  auto grow = [](auto &buffer, int64_t size) {
    if (buffer.size() < static_cast<size_t>(size))
      buffer.resize(static_cast<size_t>(size));
  };
  grow(routed, tokens * hidden);
  grow(logits, tokens * experts);
  grow(choice, tokens * topK);
  grow(order, experts);
  grow(choosing, experts);
  grow(groups, experts);
  grow(groupScore, experts);
  grow(weight, tokens * topK);
  grow(this->tokens, tokens);
  grow(gathered, tokens * hidden);
  grow(gateUp, tokens * 2 * expertWidth);
  grow(activation, tokens * expertWidth);
  grow(output, tokens * hidden);
}

size_t MoeScratch::bytes() const {
  return (routed.size() + logits.size() + weight.size() + gathered.size() + gateUp.size() +
          activation.size() + output.size()) *
             sizeof(float) +
         (choosing.size() + groupScore.size()) * sizeof(float) +
         (choice.size() + order.size() + groups.size() + tokens.size()) * sizeof(int32_t);
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

Status moeForward(const float *r, const float *x, int64_t rows, int64_t hidden,
                  const MoeParams &moe, int64_t expertWidth, float *y, MoeScratch &scratch,
                  int threads, const ExpertGemm &expertGemm, bool rowByRow) {
  const int64_t experts = moe.experts, topK = moe.topK, inner = expertWidth;
  const bool gelu = moe.activation == spec::kernels::MoeActivation::geluTanh;
  DLM_RETURN_IF_ERROR(routerLogits(r, rows, hidden, moe, scratch, threads, rowByRow));

  for (int64_t t = 0; t < rows; ++t)
    routeToken(scratch.logits.data() + t * experts, moe, scratch, scratch.choice.data() + t * topK,
               scratch.weight.data() + t * topK);

  // Per expert: its tokens' rows through gate_up and down, accumulated into y with their weights.
  std::memset(y, 0, static_cast<size_t>(rows * hidden) * sizeof(float));
  for (int64_t e = 0; e < experts; ++e) {
    int64_t count = 0;
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = 0; j < topK; ++j)
        if (scratch.choice[static_cast<size_t>(t * topK + j)] == e) {
          scratch.tokens[static_cast<size_t>(count)] = static_cast<int32_t>(t * topK + j);
          std::memcpy(scratch.gathered.data() + count * hidden, x + t * hidden,
                      static_cast<size_t>(hidden) * sizeof(float));
          ++count;
        }
    if (count == 0)
      continue;
    DLM_RETURN_IF_ERROR(
        expertGemm(ExpertMatrix::gateUp, e, scratch.gathered.data(), count, scratch.gateUp.data()));
    for (int64_t i = 0; i < count; ++i) {
      float *a = scratch.activation.data() + i * inner;
      const float *row = scratch.gateUp.data() + i * 2 * inner;
      std::memcpy(a, row, static_cast<size_t>(inner) * sizeof(float));
      if (gelu)
        geluTanhMultiply(a, row + inner, inner);
      else
        siluMultiply(a, row + inner, inner);
    }
    DLM_RETURN_IF_ERROR(
        expertGemm(ExpertMatrix::down, e, scratch.activation.data(), count, scratch.output.data()));
    for (int64_t i = 0; i < count; ++i) {
      const int32_t slot = scratch.tokens[static_cast<size_t>(i)];
      const float w = scratch.weight[static_cast<size_t>(slot)];
      float *out = y + (slot / topK) * hidden;
      const float *from = scratch.output.data() + i * hidden;
      for (int64_t h = 0; h < hidden; ++h)
        out[h] += w * from[h];
    }
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
    auto product = [&](ExpertMatrix matrix, int64_t e, const float *x, int64_t rows, float *y) {
      const PackedExperts *stack = matrix == ExpertMatrix::gateUp ? gateUp : down;
      return stack ? packedGemm_.run(stack->expert(e), x, rows, nullptr, y, pool_, false)
                   : widenedExpertGemm(moe, k.expertWidth, width, matrix, e, x, rows, y,
                                       pool_.threads());
    };
    // Batch-invariant: every product of the block a row at a time, so that a row's result does
    // not depend on the rows that share its forward or its experts.
    const bool rowByRow = batchInvariant_;
    auto gemm = [&](ExpertMatrix matrix, int64_t e, const float *x, int64_t rows, float *y) {
      if (!rowByRow)
        return product(matrix, e, x, rows, y);
      const bool gateUpMatrix = matrix == ExpertMatrix::gateUp;
      const int64_t inputs = gateUpMatrix ? width : k.expertWidth;
      const int64_t outputs = gateUpMatrix ? 2 * k.expertWidth : width;
      for (int64_t i = 0; i < rows; ++i)
        DLM_RETURN_IF_ERROR(product(matrix, e, x + i * inputs, 1, y + i * outputs));
      return Status::ok();
    };
    return moeForward(operand(run, 0), operand(run, 1), count, width, moe, k.expertWidth,
                      result(run), moeScratch_, pool_.threads(), ExpertGemm(gemm), rowByRow);
  });
}

} // namespace dlm::cpu
