// The arithmetic of speculative verification (the spec_verify decode record, dlm.spec_verify):
// the target's and the draft's distributions of one position, the test a draft token passes and
// the draw that replaces the first one that fails. Seeds 002-004 give the rules (DFlash's and
// I-DLM's, docs/design/speculative-decoding.md); Leviathan et al. 2023 prove the alpha = 1 rule
// lossless when the draft token was drawn from q.
#pragma once

#include <cstdint>
#include <vector>

namespace dlm::sampling {

// probabilities = softmax(logits / temperature) over the tokens `allowed` marks (every token when
// null; the others get 0), in double.
void rowDistribution(const float *logits, int64_t vocab, double temperature,
                     const uint8_t *allowed, std::vector<double> &probabilities);

// Whether a draft token with target probability p and draft probability q passes: alpha <= 0
// accepts everything, else r = p / (alpha q) passes when r >= 1 or u < r (q = 0: passes, as the
// draft could not have drawn it unless its distribution was not q).
bool draftPasses(double p, double q, double alpha, double u);

// The token that replaces a rejected draft: a draw from normalize(max(0, p - q)), or from p when
// that is zero everywhere (p == q). `residual` is scratch.
int32_t drawResidual(const std::vector<double> &p, const std::vector<double> &q, double u,
                     std::vector<double> &residual);

// The inverse CDF of non-negative weights with a positive sum at u in (0, 1): the first token
// whose cumulative weight passes u * sum (the last with a positive weight at the end).
int32_t drawFromWeights(const std::vector<double> &weights, double u);

} // namespace dlm::sampling
