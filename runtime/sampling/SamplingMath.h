// The arithmetic of the decoding policies, on one float32 logits row at a time, in double as
// tests/reference/samplers.py does it. Free functions without state so that each is unit-tested
// against hand-computed cases.
#pragma once

#include <cstdint>
#include <vector>

namespace dlm::sampling {

// Fast-dLLM get_num_transfer_tokens: `masked` tokens over `steps` steps, masked / steps each and
// one more for the first masked % steps steps. steps must be positive.
std::vector<int64_t> numTransferTokens(int64_t masked, int64_t steps);

// No token is excluded from an argmax.
inline constexpr int64_t kNoExcludedToken = -1;

struct RowDecision {
  int32_t token = -1;
  // softmax(logits)[token] over the whole row (the excluded column included).
  double confidence = 0;
};

// token = argmax_v (logits[v] + temperature * gumbel(gumbelKey, v)) over v != excluded (plain
// argmax when temperature is 0); ties go to the lower id. With `allowed`, only the tokens it
// marks take part (topKTopPFilter).
RowDecision decodeRow(const float *logits, int64_t vocab, double temperature, uint64_t gumbelKey,
                      int64_t excluded, const uint8_t *allowed = nullptr);

// transformers' TopKLogitsWarper then TopPLogitsWarper on z = logits / temperature (temperature >
// 0), as generate() applies them after the temperature: allowed[v] = 1 for the tokens both keep.
// Top-k keeps every token whose z is >= the k-th largest (ties with it stay; 0: no limit); top-p
// then drops, among those, each token whose softmax mass together with every token below it is
// <= 1 - topP (the largest always stays; 1: no limit). `excluded` is never allowed. `order` is
// scratch.
void topKTopPFilter(const float *logits, int64_t vocab, double temperature, int64_t topK,
                    double topP, int64_t excluded, std::vector<uint8_t> &allowed,
                    std::vector<int32_t> &order);

struct TemperedRow {
  int32_t sample = -1; // argmax(z + gumbel) over v != excluded, z = logits / temperature
  int32_t argmax = -1; // argmax(z) over v != excluded
  double entropy = 0;  // entropy of softmax(z) over the whole row, in nats
};

TemperedRow temperedRow(const float *logits, int64_t vocab, double temperature, uint64_t gumbelKey,
                        int64_t excluded);

// transformers' float32 sampler (DiffusionGemma, docs/design/diffusion-gemma.md §6.3): z =
// logits[v] / temperature as a float32 division (not a multiplication by 1/T), argmax(z) over
// v != excluded (first index), sample = argmax(z + gumbel) over v != excluded, and the entropy of
// softmax(z) over the whole row as torch's float32 Categorical(logits=z).entropy() computes it up
// to its reduction order: log-sum-exp rounded to float32 as torch rounds it (which moves the
// entropy of a confident row by up to ~2e-6), the rest in double, rounded to float32 once.
TemperedRow temperedRowF32(const float *logits, int64_t vocab, float temperature,
                           uint64_t gumbelKey, int64_t excluded);

// Indices 0..count-1 ordered by descending confidence, ties to the lower position.
void confidenceOrder(const std::vector<double> &confidence, const std::vector<int64_t> &positions,
                     std::vector<int64_t> &order);

// The entropy-bound accept rule. Walk the positions by ascending entropy (ties to the lower
// index) and accept position k while (entropy accumulated through k) - entropy[k] <= bound,
// i.e. while the entropy of the positions accepted before it stays within the budget; the
// lowest-entropy position is always accepted. accepted[i] is 1 for accepted index i.
void entropyAccept(const std::vector<double> &entropy, double bound, std::vector<int64_t> &order,
                   std::vector<uint8_t> &accepted);

// entropyAccept in transformers' float32 (EntropyBoundSampler): the entropies are float32, the
// inclusive cumsum over the ascending order is torch's CPU one (accumulated in double, each
// prefix rounded to float32), and position k is accepted when the float32 cs_k - H_k <= bound.
void entropyAcceptF32(const std::vector<double> &entropy, float bound,
                      std::vector<int64_t> &order, std::vector<uint8_t> &accepted);

// dInfer's hierarchical decoding (HierarchyDecoder; seed 001 appendix B.1) over the candidates of
// a step, given in ascending position with their confidences. Kept: the most confident candidate
// (ties to the lower position); every candidate above `threshold`; and, level by level, the
// candidates at the maximum of their segment when that maximum is above `lowThreshold`. Level 1's
// segments are the maximal runs of adjacent positions; each later level splits the segments of
// the one before at the candidates it chose. depth 1 is dInfer's code; deeper levels are dlm's
// reading of the paper's recursive partition within one step (docs/design/decode-program.md §3).
// Comparisons are strict, as dInfer's. `segments` is scratch.
struct HierarchicalRule {
  double threshold = 1.0;
  double lowThreshold = 0.4;
  int64_t depth = 1;
};
void hierarchicalAccept(const std::vector<double> &confidence, const std::vector<int64_t> &positions,
                        const HierarchicalRule &rule, std::vector<int64_t> &segments,
                        std::vector<uint8_t> &keep);

// argmax softmax(logits) (ties to the lower id) and its probability, in double: what credit
// decoding (dInfer CreditThresholdParallelDecoder; seed 001 appendix B.2) credits each step.
struct TopProbability {
  int32_t token = -1;
  double probability = 0;
};
TopProbability topProbability(const float *logits, int64_t vocab);

// A logit fused with its token's credit: float(logit + alpha * log(1 + credit)). A token without
// credit keeps its logit exactly, which is why only credited tokens need rewriting.
float creditedLogit(float logit, double credit, double alpha);

} // namespace dlm::sampling
