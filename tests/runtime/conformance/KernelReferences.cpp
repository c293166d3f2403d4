#include "tests/runtime/conformance/KernelReferences.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>

namespace dlm::reference {

uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t counterKey(uint64_t seed, uint64_t request, uint64_t stream, uint64_t step,
                    uint64_t position) {
  return mix64(mix64(mix64(mix64(mix64(seed) ^ request) ^ stream) ^ step) ^ position);
}

double gumbel(uint64_t key, uint64_t v) {
  const double u = (static_cast<double>(mix64(key ^ v) >> 11) + 0.5) * 0x1p-53;
  return -std::log(-std::log(u));
}

int64_t uniformToken(uint64_t key, int64_t vocab) {
  return static_cast<int64_t>(mix64(key) % static_cast<uint64_t>(vocab));
}

std::vector<double> linear(const float *x, int64_t rows, int64_t inputs, const float *weight,
                           int64_t weightStride, int64_t outputs, const float *bias) {
  std::vector<double> y(static_cast<size_t>(rows * outputs));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < outputs; ++o) {
      double sum = bias ? bias[o] : 0.0;
      for (int64_t i = 0; i < inputs; ++i)
        sum += static_cast<double>(x[r * inputs + i]) * weight[o * weightStride + i];
      y[r * outputs + o] = sum;
    }
  return y;
}

std::vector<double> matmul(bool transposeB, int64_t m, int64_t n, int64_t k, double alpha,
                           const float *a, int64_t lda, const float *b, int64_t ldb) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += static_cast<double>(a[i * lda + p]) * (transposeB ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * n + j] = alpha * sum;
    }
  return c;
}

std::vector<double> rmsNormRow(const float *x, int64_t width, const float *weight, double eps) {
  double sumSquares = 0;
  for (int64_t i = 0; i < width; ++i)
    sumSquares += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(sumSquares / static_cast<double>(width) + eps);
  std::vector<double> y(static_cast<size_t>(width));
  for (int64_t i = 0; i < width; ++i)
    y[i] = x[i] * scale * (weight ? static_cast<double>(weight[i]) : 1.0);
  return y;
}

std::vector<double> ropeHead(const float *head, const RopeSpec &spec, int64_t position) {
  const int64_t rotaryDim = spec.rotaryDim ? spec.rotaryDim : spec.headDim;
  const int64_t pairs = spec.frequencyPairs ? spec.frequencyPairs : rotaryDim / 2;
  const double frequencyDim =
      static_cast<double>(spec.frequencyDim ? spec.frequencyDim : rotaryDim);
  std::vector<double> y(head, head + spec.headDim);
  for (int64_t j = 0; j < pairs; ++j) {
    const double angle = static_cast<double>(position) /
                         std::pow(spec.theta, 2.0 * static_cast<double>(j) / frequencyDim);
    const double a = head[j], b = head[j + rotaryDim / 2];
    y[j] = a * std::cos(angle) - b * std::sin(angle);
    y[j + rotaryDim / 2] = b * std::cos(angle) + a * std::sin(angle);
  }
  return y;
}

double activate(Activation activation, double x) {
  if (activation == Activation::silu)
    return x / (1.0 + std::exp(-x));
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

double gatedActivation(Activation activation, double gate, double up) {
  return activate(activation, gate) * up;
}

bool keyVisible(const AttentionMask &mask, int64_t query, int64_t key) {
  const bool windowed =
      mask.kind == MaskKind::slidingWindow || mask.kind == MaskKind::slidingWindowSymmetric;
  if (mask.causalRequest || mask.kind == MaskKind::causal || mask.kind == MaskKind::slidingWindow)
    return key <= query && (!windowed || query - key < mask.window);
  switch (mask.kind) {
  case MaskKind::bidirectional:
    return true;
  case MaskKind::blockCausal:
    return key / mask.blockSize <= query / mask.blockSize;
  case MaskKind::slidingWindowSymmetric:
    return std::llabs(query - key) < mask.window;
  default:
    return false;
  }
}

std::vector<double> attentionHead(const float *query, const float *keys, const float *values,
                                  int64_t keyCount, int64_t kvHeads, int64_t kvHead,
                                  int64_t headDim, double scale, const AttentionMask &mask,
                                  int64_t queryPosition) {
  std::vector<double> weights(static_cast<size_t>(keyCount), 0.0);
  double maximum = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < keyCount; ++j) {
    if (!keyVisible(mask, queryPosition, j))
      continue;
    double dot = 0;
    for (int64_t d = 0; d < headDim; ++d)
      dot += static_cast<double>(query[d]) * keys[(j * kvHeads + kvHead) * headDim + d];
    weights[j] = dot * scale;
    maximum = std::max(maximum, weights[j]);
  }
  double total = 0;
  for (int64_t j = 0; j < keyCount; ++j) {
    weights[j] = keyVisible(mask, queryPosition, j) ? std::exp(weights[j] - maximum) : 0.0;
    total += weights[j];
  }
  std::vector<double> out(static_cast<size_t>(headDim), 0.0);
  if (total == 0)
    return out;
  for (int64_t d = 0; d < headDim; ++d) {
    double sum = 0;
    for (int64_t j = 0; j < keyCount; ++j)
      sum += weights[j] * values[(j * kvHeads + kvHead) * headDim + d];
    out[d] = sum / total;
  }
  return out;
}

SamplerRow samplerRow(const float *logits, int64_t vocab, double temperature, double softcap,
                      uint64_t gumbelKey, int64_t excluded) {
  SamplerRow row;
  const bool sampling = temperature > 0;
  row.z.resize(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) {
    double logit = logits[v];
    if (softcap > 0)
      logit = softcap * std::tanh(logit / softcap);
    row.z[v] = sampling ? logit / temperature : logit;
  }
  row.maximum = *std::max_element(row.z.begin(), row.z.end());
  for (double value : row.z)
    row.sum += std::exp(value - row.maximum);
  const double logSum = std::log(row.sum);
  for (double value : row.z) {
    const double logP = value - row.maximum - logSum;
    if (std::isfinite(logP))
      row.entropy -= std::exp(logP) * logP;
  }
  double bestScore = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < vocab; ++v) {
    if (v == excluded)
      continue;
    if (row.argmax < 0 || row.z[v] > row.z[row.argmax])
      row.argmax = v;
    if (sampling) {
      const double score = row.z[v] + gumbel(gumbelKey, static_cast<uint64_t>(v));
      if (row.sample < 0 || score > bestScore) {
        bestScore = score;
        row.sample = v;
      }
    }
  }
  if (!sampling) {
    row.sample = row.argmax;
    bestScore = row.z[row.argmax];
  }
  row.sampleScore = bestScore;
  row.sampleProbability = probability(row, row.sample);
  return row;
}

double probability(const SamplerRow &row, int64_t token) {
  return std::exp(row.z[token] - row.maximum) / row.sum;
}

std::vector<uint8_t> acceptCanvas(AcceptRule rule, const std::vector<double> &entropy,
                                  const std::vector<double> &confidence,
                                  const std::vector<uint8_t> &candidate, const AcceptKnobs &knobs) {
  const size_t count = rule == AcceptRule::entropyBound ? entropy.size() : confidence.size();
  std::vector<size_t> order;
  for (size_t i = 0; i < count; ++i)
    if (candidate.empty() || candidate[i])
      order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const double a = rule == AcceptRule::entropyBound ? entropy[x] : -confidence[x];
    const double b = rule == AcceptRule::entropyBound ? entropy[y] : -confidence[y];
    return a < b || (a == b && x < y);
  });
  std::vector<uint8_t> keep(count, 0);
  double running = 0;
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const size_t i = order[rank];
    switch (rule) {
    case AcceptRule::entropyBound:
      running += entropy[i];
      keep[i] = rank == 0 || running - entropy[i] <= knobs.entropyBound;
      break;
    case AcceptRule::confidenceThreshold:
      keep[i] = rank == 0 || confidence[i] >= knobs.threshold;
      break;
    case AcceptRule::topK:
      keep[i] = static_cast<int64_t>(rank) < knobs.topK;
      break;
    }
  }
  return keep;
}

Convergence convergenceAfterStep(const std::vector<int64_t> &argmax,
                                 const std::vector<int64_t> &previousArgmax,
                                 int64_t stableStepsBefore, const std::vector<double> &entropy,
                                 int64_t stability, double entropyBound) {
  Convergence result;
  result.stableSteps = argmax == previousArgmax ? stableStepsBefore + 1 : 0;
  const double mean =
      std::accumulate(entropy.begin(), entropy.end(), 0.0) / static_cast<double>(entropy.size());
  result.converged = result.stableSteps >= stability && mean < entropyBound;
  return result;
}

int64_t noiseToken(NoiseKind noise, bool initialCanvas, int64_t mask, int64_t vocab, uint64_t seed,
                   uint64_t request, uint64_t step, uint64_t position) {
  if (noise == NoiseKind::maskToken)
    return mask;
  const uint64_t stream = initialCanvas ? kInitialCanvasStream : kRenoiseStream;
  return uniformToken(counterKey(seed, request, stream, step, position), vocab);
}

int64_t renoisedToken(RenoiseCandidates candidates, bool initialCanvas, bool keep, int64_t sampled,
                      int64_t current, int64_t mask, int64_t noiseTokenValue) {
  if (initialCanvas)
    return noiseTokenValue;
  if (keep)
    return sampled;
  const bool candidate = candidates == RenoiseCandidates::everyPosition || current == mask;
  return candidate ? noiseTokenValue : current;
}

} // namespace dlm::reference
