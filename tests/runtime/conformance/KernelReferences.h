// The double-precision references of the kernel conformance suite: one definition per kernel
// semantics, shared by the CPU backend's tests (CpuKernelConformanceTest.cpp) and the CUDA
// kernels' tests on the emulated device (tests/runtime/cuda/), so that both backends are held to
// the same meaning. They are written for clarity, not speed, and share no code with any kernel
// they check (the counter RNG is written out again for that reason). Inputs are the exact values
// a kernel reads (float, or bf16 widened to float); outputs are double.
#pragma once

#include <cstdint>
#include <vector>

namespace dlm::reference {

// ---- Counter RNG (tests/reference/counter_rng.py) -----------------------------------------------

// The streams of the key: Gumbel noise, renoise token, initial canvas token.
inline constexpr uint64_t kGumbelStream = 0;
inline constexpr uint64_t kRenoiseStream = 1;
inline constexpr uint64_t kInitialCanvasStream = 2;

uint64_t mix64(uint64_t z);
// mix64(mix64(mix64(mix64(mix64(seed) ^ request) ^ stream) ^ step) ^ position)
uint64_t counterKey(uint64_t seed, uint64_t request, uint64_t stream, uint64_t step,
                    uint64_t position);
// -log(-log(u)), u = ((mix64(key ^ v) >> 11) + 0.5) * 2^-53
double gumbel(uint64_t key, uint64_t v);
// mix64(key) mod vocab
int64_t uniformToken(uint64_t key, int64_t vocab);

// ---- Dense math ---------------------------------------------------------------------------------

// y[rows, outputs] = x[rows, inputs] W^T (+ bias), W in PyTorch [outputs, inputs] layout with rows
// `weightStride` apart; bias may be null.
std::vector<double> linear(const float *x, int64_t rows, int64_t inputs, const float *weight,
                           int64_t weightStride, int64_t outputs, const float *bias);

// C[m, n] = alpha * A[m, k] op(B), op(B) = B[k, n] or, transposed, B[n, k]^T; BLAS leading
// dimensions. C is dense [m, n].
std::vector<double> matmul(bool transposeB, int64_t m, int64_t n, int64_t k, double alpha,
                           const float *a, int64_t lda, const float *b, int64_t ldb);

// One row: x * 1/sqrt(mean(x^2) + eps) * weight; weight null is the "no-scale" norm.
std::vector<double> rmsNormRow(const float *x, int64_t width, const float *weight, double eps);

// NeoX rotary embedding of one head: pairs (j, j + rotaryDim/2) for j < frequencyPairs rotate by
// position * theta^(-2j / frequencyDim); the other dimensions pass through. Zeros mean the
// defaults (full rotary: rotaryDim = headDim, frequencyPairs = rotaryDim/2,
// frequencyDim = rotaryDim); fewer pairs is "proportional" RoPE.
struct RopeSpec {
  int64_t headDim = 0;
  int64_t rotaryDim = 0;
  int64_t frequencyPairs = 0;
  int64_t frequencyDim = 0;
  double theta = 10000.0;
};
std::vector<double> ropeHead(const float *head, const RopeSpec &spec, int64_t position);

enum class Activation { silu, geluTanh };
double activate(Activation activation, double x);
// act(gate) * up
double gatedActivation(Activation activation, double gate, double up);

// ---- Attention ----------------------------------------------------------------------------------

// The visibility rules of dlm.masked_attention, on positions.
enum class MaskKind {
  causal,                 // key <= query
  bidirectional,          // every key
  blockCausal,            // key / blockSize <= query / blockSize
  slidingWindow,          // 0 <= query - key < window
  slidingWindowSymmetric, // |query - key| < window
};

struct AttentionMask {
  MaskKind kind = MaskKind::causal;
  // A causal request in a mixed batch is causal (and windowed under the sliding kinds) whatever
  // the kernel's kind.
  bool causalRequest = false;
  int64_t window = 0;
  int64_t blockSize = 0;
};
bool keyVisible(const AttentionMask &mask, int64_t query, int64_t key);

// One query head over a request's keys and values in logical order, [key][kvHeads][headDim]
// (the test writes them into scattered pages; the reference reads the sequence they stand for):
// softmax(scale * q . k_j over visible j) weighted sum of v_j, read from KV head `kvHead`. A row
// that sees no key is all zeros.
std::vector<double> attentionHead(const float *query, const float *keys, const float *values,
                                  int64_t keyCount, int64_t kvHeads, int64_t kvHead,
                                  int64_t headDim, double scale, const AttentionMask &mask,
                                  int64_t queryPosition);

// ---- Sampler ------------------------------------------------------------------------------------

// The sampler's statistics of one logits row: z = softcap(logits) / temperature (temperature 0 is
// greedy: z = softcap(logits)); entropy of softmax(z) in nats over the whole row (-inf logits
// contribute nothing); argmax of z and the Gumbel-max sample argmax(z + gumbel(key, v)) over
// v != excluded, ties to the lower id (greedy: sample = argmax); the sample's probability
// softmax(z)[sample].
struct SamplerRow {
  std::vector<double> z;
  double maximum = 0; // max z
  double sum = 0;     // sum exp(z - maximum)
  double entropy = 0;
  int64_t argmax = -1;
  int64_t sample = -1;
  double sampleScore = 0; // z[sample] + gumbel (z[sample] when greedy)
  double sampleProbability = 0;
};
// softcap 0: none. excluded -1: none.
SamplerRow samplerRow(const float *logits, int64_t vocab, double temperature, double softcap,
                      uint64_t gumbelKey, int64_t excluded);
// softmax(z)[token] of a row computed by samplerRow.
double probability(const SamplerRow &row, int64_t token);

// ---- Accept rules, convergence, renoise ---------------------------------------------------------

enum class AcceptRule {
  entropyBound,        // by ascending entropy while the entropy accepted before stays <= bound
  confidenceThreshold, // confidence >= threshold, and the most confident one
  topK,                // the k most confident
};

struct AcceptKnobs {
  double entropyBound = 0;
  double threshold = 0;
  int64_t topK = 0;
};

// keep[i] for the positions of one canvas: candidates (all when `candidate` is empty) are walked
// by ascending entropy (entropy-bound) or descending confidence (the others), ties to the lower
// position; the first in the walk is always kept (except under top-k with k = 0). Non-candidates
// are never kept.
std::vector<uint8_t> acceptCanvas(AcceptRule rule, const std::vector<double> &entropy,
                                  const std::vector<double> &confidence,
                                  const std::vector<uint8_t> &candidate, const AcceptKnobs &knobs);

// Convergence after a step: the argmax canvas unchanged from the previous step extends the count
// of stable steps (else it restarts at 0); converged when that count reaches `stability` and the
// mean entropy is below `entropyBound`.
struct Convergence {
  int64_t stableSteps = 0;
  bool converged = false;
};
Convergence convergenceAfterStep(const std::vector<int64_t> &argmax,
                                 const std::vector<int64_t> &previousArgmax,
                                 int64_t stableStepsBefore, const std::vector<double> &entropy,
                                 int64_t stability, double entropyBound);

enum class NoiseKind { maskToken, uniform };

// The noise token of a position: the mask, or a uniform token from the renoise (or initial
// canvas) stream at (seed, request, step, position).
int64_t noiseToken(NoiseKind noise, bool initialCanvas, int64_t mask, int64_t vocab, uint64_t seed,
                   uint64_t request, uint64_t step, uint64_t position);
// Which rejected positions take the noise: every one (entropy-bound canvases, whatever the noise:
// tests/reference/samplers.py re-masks a rejected token), or only those holding the mask
// (mask-absorbing blocks: a token once unmasked stays).
enum class RenoiseCandidates { everyPosition, maskedOnly };

// The next token of one canvas position: the initial canvas is all noise; otherwise a kept
// position takes the sample, a rejected candidate takes the noise, anything else stays.
int64_t renoisedToken(RenoiseCandidates candidates, bool initialCanvas, bool keep, int64_t sampled,
                      int64_t current, int64_t mask, int64_t noiseTokenValue);

} // namespace dlm::reference
