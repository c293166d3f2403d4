#include "runtime/sampling/SpeculativeVerify.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dlm::sampling {

void rowDistribution(const float *logits, int64_t vocab, double temperature,
                     const uint8_t *allowed, std::vector<double> &probabilities) {
  probabilities.assign(static_cast<size_t>(vocab), 0.0);
  double maximum = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < vocab; ++v)
    if (!allowed || allowed[v])
      maximum = std::max(maximum, static_cast<double>(logits[v]) / temperature);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (allowed && !allowed[v])
      continue;
    const double e = std::exp(static_cast<double>(logits[v]) / temperature - maximum);
    probabilities[static_cast<size_t>(v)] = e;
    sum += e;
  }
  for (double &p : probabilities)
    p /= sum;
}

bool draftPasses(double p, double q, double alpha, double u) {
  if (alpha <= 0 || q <= 0)
    return true;
  const double r = p / (alpha * q);
  return r >= 1 || u < r;
}

int32_t drawFromWeights(const std::vector<double> &weights, double u) {
  double sum = 0;
  for (double w : weights)
    sum += w;
  const double target = u * sum;
  double cumulative = 0;
  int32_t last = 0;
  for (size_t v = 0; v < weights.size(); ++v) {
    if (weights[v] <= 0)
      continue;
    cumulative += weights[v];
    last = static_cast<int32_t>(v);
    if (cumulative > target)
      return last;
  }
  // Rounding left u * sum at or past the last cumulative sum.
  return last;
}

int32_t drawResidual(const std::vector<double> &p, const std::vector<double> &q, double u,
                     std::vector<double> &residual) {
  residual.resize(p.size());
  double sum = 0;
  for (size_t v = 0; v < p.size(); ++v) {
    residual[v] = std::max(0.0, p[v] - q[v]);
    sum += residual[v];
  }
  return drawFromWeights(sum > 0 ? residual : p, u);
}

} // namespace dlm::sampling
