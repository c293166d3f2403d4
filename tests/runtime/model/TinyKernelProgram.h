// The "cpu" kernel records of the tiny test transformer (TinyModel.h), written by hand in the
// layout dlm-lower-to-kernel-program gives a compiled @forward (runtime/model/KernelProgram.h):
// norm fused into the q/k/v projections, the residual adds folded into the o and down
// projections, the gated MLP as gate, up, silu_mul, down, the final norm in the LM head. The plan gives every value a region of its own (valid, if not tight);
// dlmc's plans, which share regions, are covered by the end-to-end tests.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/model/KernelProgram.h"
#include "importer/model/CanonicalWeights.h"
#include "runtime/model/ModelSpec.h"

#include <string>
#include <vector>

namespace dlm::testing {

struct TinyProgramShape {
  int64_t layers = 0, hidden = 0, heads = 0, kvHeads = 0, headDim = 0, intermediate = 0;
  int64_t vocab = 0;
  double eps = 1e-5, theta = 10000.0;
  bool causal = false, qkvBias = false, qkNorm = false, tied = false, logitShift = false;
};

inline artifact::KernelTarget tinyCpuKernelTarget(const TinyProgramShape &s) {
  namespace kp = spec::kernels;
  artifact::KernelTarget target;
  target.target = std::string(kp::kTarget);
  int64_t nextSlot = kp::kFirstResultSlot, nextOffset = 0;
  auto record = [&](std::string_view kind, const std::string &name, int64_t layer,
                    std::vector<int64_t> operands, int64_t width) -> artifact::Kernel & {
    artifact::Kernel k;
    k.kind = std::string(kind);
    k.name = layer >= 0 ? "layers." + std::to_string(layer) + "." + name : name;
    std::string list;
    for (int64_t slot : operands)
      list += (list.empty() ? "" : ",") + std::to_string(slot);
    k.parameters[std::string(kp::kLayer)] = layer;
    k.parameters[std::string(kp::kOperands)] = list;
    if (width > 0) {
      k.parameters[std::string(kp::kResult)] = nextSlot++;
      k.parameters[std::string(kp::kWidth)] = width;
      if (kind != kp::kLmHead) {
        k.parameters[std::string(kp::kOffset)] = nextOffset;
        nextOffset += (width + kp::kRowAlignmentElements - 1) / kp::kRowAlignmentElements *
                      kp::kRowAlignmentElements;
      }
    }
    target.kernels.push_back(std::move(k));
    return target.kernels.back();
  };
  auto set = [](artifact::Kernel &k, std::string_view key, artifact::AttributeValue value) {
    k.parameters[std::string(key)] = std::move(value);
  };
  auto slotOf = [](const artifact::Kernel &k) {
    return std::get<int64_t>(k.parameters.at(std::string(kp::kResult)));
  };
  const int64_t q = s.heads * s.headDim, kv = s.kvHeads * s.headDim;

  artifact::Kernel &embedding =
      record(kp::kEmbedding, "embedding", -1, {kp::kTokensSlot}, s.hidden);
  set(embedding, kp::kWeight, std::string(spec::kEmbed));
  int64_t x = slotOf(embedding);
  for (int64_t l = 0; l < s.layers; ++l) {
    auto name = [l](std::string_view role) { return spec::layerWeightName(l, role); };
    auto projection = [&](const std::string &label, std::string_view role, std::string_view bias,
                          int64_t input, int64_t width, bool norm) {
      artifact::Kernel &k = record(norm ? kp::kNormLinear : kp::kLinear, label, l, {input}, width);
      set(k, kp::kWeight, name(role));
      if (norm) {
        set(k, kp::kNormWeight, name(spec::kAttnNorm));
        set(k, kp::kEps, s.eps);
      }
      if (s.qkvBias && !bias.empty())
        set(k, kp::kBias, name(bias));
      return slotOf(k);
    };
    int64_t qs = projection("q_proj", spec::kQ, spec::kQBias, x, q, true);
    int64_t ks = projection("k_proj", spec::kK, spec::kKBias, x, kv, true);
    int64_t vs = projection("v_proj", spec::kV, spec::kVBias, x, kv, true);
    if (s.qkNorm) {
      for (auto [slot, role, width] : {std::tuple{&qs, spec::kQNorm, q}, {&ks, spec::kKNorm, kv}}) {
        artifact::Kernel &k = record(kp::kRmsNorm, std::string(role), l, {*slot}, width);
        set(k, kp::kWeight, name(role));
        set(k, kp::kEps, s.eps);
        *slot = slotOf(k);
      }
    }
    for (auto [slot, width, label] : {std::tuple{&qs, q, "rope"}, {&ks, kv, "rope#2"}}) {
      artifact::Kernel &k = record(kp::kRope, label, l, {*slot, kp::kPositionsSlot}, width);
      set(k, kp::kTheta, s.theta);
      set(k, kp::kHeadDim, s.headDim);
      *slot = slotOf(k);
    }
    record(kp::kKvStore, "kv_store", l, {ks, vs}, 0);
    artifact::Kernel &attention = record(kp::kAttention, "attention", l, {qs, ks, vs}, q);
    set(attention, kp::kMask, std::string(s.causal ? "causal" : "bidirectional"));
    set(attention, kp::kHeads, s.heads);
    set(attention, kp::kKvHeads, s.kvHeads);
    set(attention, kp::kHeadDim, s.headDim);
    // The residual adds are the o and down projections' epilogues, as dlmc folds them.
    auto accumulating = [&](const std::string &label, std::string_view role, int64_t input,
                            int64_t residual) {
      artifact::Kernel &k = record(kp::kLinear, label, l, {input, residual}, s.hidden);
      set(k, kp::kWeight, name(role));
      set(k, kp::kAccumulate, true);
      return slotOf(k);
    };
    int64_t h = accumulating("o_proj", spec::kO, slotOf(attention), x);
    artifact::Kernel &mlpNorm = record(kp::kRmsNorm, "mlp_norm", l, {h}, s.hidden);
    set(mlpNorm, kp::kWeight, name(spec::kMlpNorm));
    set(mlpNorm, kp::kEps, s.eps);
    int64_t m = slotOf(mlpNorm);
    int64_t gate = projection("gate_proj", spec::kGate, "", m, s.intermediate, false);
    int64_t up = projection("up_proj", spec::kUp, "", m, s.intermediate, false);
    int64_t act = slotOf(record(kp::kSiluMul, "silu_mul", l, {gate, up}, s.intermediate));
    x = accumulating("down_proj", spec::kDown, act, h);
  }
  artifact::Kernel &head = record(kp::kLmHead, "lm_head", -1, {x}, s.vocab);
  set(head, kp::kNormWeight, std::string(spec::kFinalNorm));
  set(head, kp::kEps, s.eps);
  set(head, kp::kWeight, std::string(s.tied ? spec::kEmbed : spec::kLmHead));
  set(head, kp::kLogitShift, s.logitShift);
  return target;
}

} // namespace dlm::testing
