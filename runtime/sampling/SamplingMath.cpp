// Built with -ffp-contract=off: `logit + T * gumbel` must round like numpy's two operations, not
// like one fused multiply-add, or near-ties could break differently from the reference.
#include "runtime/sampling/SamplingMath.h"

#include "runtime/sampling/CounterRng.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace dlm::sampling {

std::vector<int64_t> numTransferTokens(int64_t masked, int64_t steps) {
  std::vector<int64_t> schedule(static_cast<size_t>(std::max<int64_t>(steps, 0)),
                                steps > 0 ? masked / steps : 0);
  for (int64_t i = 0; steps > 0 && i < masked % steps; ++i)
    ++schedule[static_cast<size_t>(i)];
  return schedule;
}

namespace {

double rowMax(const float *logits, int64_t vocab) {
  double maximum = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < vocab; ++v)
    maximum = std::max(maximum, static_cast<double>(logits[v]));
  return maximum;
}

// The softmax denominator over `maximum`, summed in index order.
double expSum(const float *logits, int64_t vocab, double maximum) {
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v)
    sum += std::exp(static_cast<double>(logits[v]) - maximum);
  return sum;
}

} // namespace

RowDecision decodeRow(const float *logits, int64_t vocab, double temperature, uint64_t gumbelKey,
                      int64_t excluded, const uint8_t *allowed) {
  RowDecision decision;
  double best = -std::numeric_limits<double>::infinity();
  const bool noisy = temperature > 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (v == excluded || (allowed && !allowed[v]))
      continue;
    double score = static_cast<double>(logits[v]);
    if (noisy)
      score = score + temperature * rng::gumbel(gumbelKey, static_cast<uint64_t>(v));
    if (score > best || decision.token < 0) {
      best = score;
      decision.token = static_cast<int32_t>(v);
    }
  }
  const double maximum = rowMax(logits, vocab);
  decision.confidence = std::exp(static_cast<double>(logits[decision.token]) - maximum) /
                        expSum(logits, vocab, maximum);
  return decision;
}

void topKTopPFilter(const float *logits, int64_t vocab, double temperature, int64_t topK,
                    double topP, int64_t excluded, std::vector<uint8_t> &allowed,
                    std::vector<int32_t> &order) {
  allowed.assign(static_cast<size_t>(vocab), 1);
  order.clear();
  for (int64_t v = 0; v < vocab; ++v)
    if (v != excluded)
      order.push_back(static_cast<int32_t>(v));
  if (excluded >= 0 && excluded < vocab)
    allowed[static_cast<size_t>(excluded)] = 0;
  auto z = [&](int32_t v) { return static_cast<double>(logits[v]) / temperature; };
  // Descending z, ties to the lower id.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return z(a) > z(b) || (z(a) == z(b) && a < b);
  });
  size_t kept = order.size();
  if (topK > 0 && static_cast<size_t>(topK) < kept) {
    const double kth = z(order[static_cast<size_t>(topK) - 1]);
    kept = static_cast<size_t>(topK);
    while (kept < order.size() && z(order[kept]) >= kth)
      ++kept;
  }
  if (topP < 1.0 && kept > 1) {
    const double maximum = z(order[0]);
    double total = 0;
    for (size_t i = 0; i < kept; ++i)
      total += std::exp(z(order[i]) - maximum);
    // From the smallest up: a token goes while the mass of it and everything below is <= 1 - p.
    double below = 0;
    size_t last = kept;
    while (last > 1) {
      below += std::exp(z(order[last - 1]) - maximum) / total;
      if (below > 1.0 - topP)
        break;
      --last;
    }
    kept = last;
  }
  for (size_t i = kept; i < order.size(); ++i)
    allowed[static_cast<size_t>(order[i])] = 0;
}

namespace {

// The row's argmax and Gumbel-max sample over the tempered logits z = logits / temperature in T
// (the Gumbel noise added in double), `excluded` never picked; returns max z over every token.
template <typename T>
T pickTokens(const float *logits, int64_t vocab, T temperature, uint64_t gumbelKey,
             int64_t excluded, TemperedRow &row) {
  T maximum = -std::numeric_limits<T>::infinity();
  T bestArgmax = -std::numeric_limits<T>::infinity();
  double bestSample = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < vocab; ++v) {
    const T z = static_cast<T>(logits[v]) / temperature;
    maximum = std::max(maximum, z);
    if (v == excluded)
      continue;
    if (z > bestArgmax || row.argmax < 0) {
      bestArgmax = z;
      row.argmax = static_cast<int32_t>(v);
    }
    const double noisy = static_cast<double>(z) + rng::gumbel(gumbelKey, static_cast<uint64_t>(v));
    if (noisy > bestSample || row.sample < 0) {
      bestSample = noisy;
      row.sample = static_cast<int32_t>(v);
    }
  }
  return maximum;
}

} // namespace

TemperedRow temperedRow(const float *logits, int64_t vocab, double temperature, uint64_t gumbelKey,
                        int64_t excluded) {
  TemperedRow row;
  const double maximum = pickTokens(logits, vocab, temperature, gumbelKey, excluded, row);
  // Entropy from log-softmax, as the reference: lp = s - log(sum exp(s)), H = -sum exp(lp) lp.
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v)
    sum += std::exp(static_cast<double>(logits[v]) / temperature - maximum);
  const double logSum = std::log(sum);
  double entropy = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double logP = (static_cast<double>(logits[v]) / temperature - maximum) - logSum;
    const double p = std::exp(logP);
    if (p > 0)
      entropy -= p * logP;
  }
  row.entropy = entropy;
  return row;
}

TemperedRow temperedRowF32(const float *logits, int64_t vocab, float temperature,
                           uint64_t gumbelKey, int64_t excluded) {
  TemperedRow row;
  const float maximum = pickTokens(logits, vocab, temperature, gumbelKey, excluded, row);
  // torch's Categorical(logits=z).entropy(): lz = z - logsumexp(z), H = -sum softmax(lz) * lz.
  // logsumexp is max + log(sum exp(z - max)) in float32 tensor ops: its final rounding to float32
  // shifts every lz by up to half an ulp of the max (2e-6 at |z| ~ 40), and H by as much, which
  // for a confident row is far more than every other rounding; so it is rounded here as torch
  // rounds it, and the rest is computed in double and rounded once.
  const double shift = static_cast<double>(maximum);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v)
    sum += std::exp(static_cast<double>(logits[v] / temperature) - shift);
  const float logSum = static_cast<float>(std::log(static_cast<double>(static_cast<float>(sum))));
  const float logSumExp = logSum + maximum;
  float maxLogP = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < vocab; ++v)
    maxLogP = std::max(maxLogP, logits[v] / temperature - logSumExp);
  double normalizer = 0;
  for (int64_t v = 0; v < vocab; ++v)
    normalizer += std::exp(static_cast<double>(logits[v] / temperature - logSumExp) -
                           static_cast<double>(maxLogP));
  double entropy = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double logP = static_cast<double>(logits[v] / temperature - logSumExp);
    const double p = std::exp(logP - static_cast<double>(maxLogP)) / normalizer;
    entropy -= p * logP;
  }
  row.entropy = static_cast<float>(entropy);
  return row;
}

void confidenceOrder(const std::vector<double> &confidence, const std::vector<int64_t> &positions,
                     std::vector<int64_t> &order) {
  order.resize(confidence.size());
  std::iota(order.begin(), order.end(), 0);
  // A NaN confidence ranks as -infinity: a strict weak order whatever the logits held.
  auto rank = [&](int64_t i) {
    return std::isnan(confidence[i]) ? -std::numeric_limits<double>::infinity() : confidence[i];
  };
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (rank(a) != rank(b))
      return rank(a) > rank(b);
    return positions[a] < positions[b];
  });
}

namespace {

// The entropy-bound walk with the entropies, the budget and each prefix's subtraction in T; the
// running sum in double, rounded to T at every prefix (exact for double; torch's CPU cumsum for
// float). A NaN entropy ranks as +infinity: a strict weak order whatever the logits held.
template <typename T>
void entropyAcceptIn(const std::vector<double> &entropy, T bound, std::vector<int64_t> &order,
                     std::vector<uint8_t> &accepted) {
  const size_t count = entropy.size();
  order.resize(count);
  std::iota(order.begin(), order.end(), 0);
  auto rank = [&](int64_t i) {
    const T h = static_cast<T>(entropy[static_cast<size_t>(i)]);
    return std::isnan(h) ? std::numeric_limits<T>::infinity() : h;
  };
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (rank(a) != rank(b))
      return rank(a) < rank(b);
    return a < b;
  });
  accepted.assign(count, 0);
  // The same operations as numpy's cumsum(hs) - hs (double) or torch's float32 tensors, so the
  // budget edge agrees bit for bit.
  double running = 0;
  for (size_t k = 0; k < count; ++k) {
    const T h = static_cast<T>(entropy[static_cast<size_t>(order[k])]);
    running += static_cast<double>(h);
    const T before = static_cast<T>(running) - h;
    accepted[static_cast<size_t>(order[k])] = (k == 0 || before <= bound) ? 1 : 0;
  }
}

} // namespace

void entropyAccept(const std::vector<double> &entropy, double bound, std::vector<int64_t> &order,
                   std::vector<uint8_t> &accepted) {
  entropyAcceptIn<double>(entropy, bound, order, accepted);
}

void entropyAcceptF32(const std::vector<double> &entropy, float bound,
                      std::vector<int64_t> &order, std::vector<uint8_t> &accepted) {
  entropyAcceptIn<float>(entropy, bound, order, accepted);
}

namespace {

// Keeps the candidates at the maximum of segment [begin, end) when it exceeds `low`, and appends
// the pieces between them to `next` as (begin, end) pairs.
void splitAtMaximum(const std::vector<double> &confidence, int64_t begin, int64_t end, double low,
                    std::vector<int64_t> &next, std::vector<uint8_t> &keep) {
  double maximum = confidence[static_cast<size_t>(begin)];
  for (int64_t i = begin + 1; i < end; ++i)
    maximum = std::max(maximum, confidence[static_cast<size_t>(i)]);
  if (!(maximum > low))
    return;
  int64_t piece = begin;
  for (int64_t i = begin; i < end; ++i) {
    if (confidence[static_cast<size_t>(i)] != maximum)
      continue;
    keep[static_cast<size_t>(i)] = 1;
    if (piece < i)
      next.insert(next.end(), {piece, i});
    piece = i + 1;
  }
  if (piece < end)
    next.insert(next.end(), {piece, end});
}

} // namespace

void hierarchicalAccept(const std::vector<double> &confidence, const std::vector<int64_t> &positions,
                        const HierarchicalRule &rule, std::vector<int64_t> &segments,
                        std::vector<uint8_t> &keep) {
  const int64_t count = static_cast<int64_t>(confidence.size());
  keep.assign(static_cast<size_t>(count), 0);
  if (count == 0)
    return;
  // Level 1: the runs of adjacent positions.
  segments.clear();
  int64_t run = 0;
  for (int64_t i = 1; i <= count; ++i)
    if (i == count || positions[static_cast<size_t>(i)] != positions[static_cast<size_t>(i - 1)] + 1) {
      segments.insert(segments.end(), {run, i});
      run = i;
    }
  for (int64_t level = 0; level < rule.depth && !segments.empty(); ++level) {
    const size_t current = segments.size();
    for (size_t s = 0; s < current; s += 2)
      splitAtMaximum(confidence, segments[s], segments[s + 1], rule.lowThreshold, segments, keep);
    segments.erase(segments.begin(), segments.begin() + static_cast<std::ptrdiff_t>(current));
  }
  size_t best = 0;
  for (size_t i = 0; i < confidence.size(); ++i) {
    if (confidence[i] > rule.threshold)
      keep[i] = 1;
    if (confidence[i] > confidence[best])
      best = i;
  }
  keep[best] = 1;
}

TopProbability topProbability(const float *logits, int64_t vocab) {
  TopProbability top;
  for (int64_t v = 0; v < vocab; ++v)
    if (top.token < 0 || logits[v] > logits[top.token])
      top.token = static_cast<int32_t>(v);
  if (top.token >= 0)
    top.probability = 1.0 / expSum(logits, vocab, static_cast<double>(logits[top.token]));
  return top;
}

float creditedLogit(float logit, double credit, double alpha) {
  return static_cast<float>(static_cast<double>(logit) + alpha * std::log1p(credit));
}

} // namespace dlm::sampling
