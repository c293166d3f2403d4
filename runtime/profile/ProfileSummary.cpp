#include "runtime/profile/ProfileSummary.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace dlm::profile {

namespace {

constexpr double kNsPerMs = 1e6;

double ms(int64_t ns) { return static_cast<double>(ns) / kNsPerMs; }
int64_t endNs(const Event &e) { return e.startNs + e.durationNs; }

std::vector<const Event *> sortedByStart(std::vector<const Event *> events) {
  std::sort(events.begin(), events.end(), [](const Event *a, const Event *b) {
    return a->startNs != b->startNs ? a->startNs < b->startNs : a->durationNs > b->durationNs;
  });
  return events;
}

// For each parent (non-overlapping, sorted by start), the children (sorted by start) that lie
// inside it: how many and their total duration.
struct Contained {
  int64_t count = 0;
  int64_t ns = 0;
};
std::vector<Contained> containedIn(const std::vector<const Event *> &parents,
                                   const std::vector<const Event *> &children) {
  std::vector<Contained> out(parents.size());
  size_t c = 0;
  for (size_t p = 0; p < parents.size(); ++p) {
    while (c < children.size() && children[c]->startNs < parents[p]->startNs)
      ++c;
    for (; c < children.size() && endNs(*children[c]) <= endNs(*parents[p]); ++c) {
      ++out[p].count;
      out[p].ns += children[c]->durationNs;
    }
  }
  return out;
}

} // namespace

Distribution Distribution::of(std::vector<double> samples) {
  Distribution d;
  if (samples.empty())
    return d;
  std::sort(samples.begin(), samples.end());
  d.count = static_cast<int64_t>(samples.size());
  for (double s : samples)
    d.total += s;
  d.mean = d.total / static_cast<double>(d.count);
  const size_t n = samples.size();
  d.median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  d.p90 = samples[std::min(n - 1, static_cast<size_t>(0.9 * static_cast<double>(n)))];
  d.min = samples.front();
  d.max = samples.back();
  return d;
}

Summary summarize(const Profiler &profiler) {
  Summary summary;
  summary.events = profiler.size();
  summary.dropped = profiler.dropped();

  int64_t kernelNs[kCategoryCount] = {};
  int64_t kernelCalls[kCategoryCount] = {};
  double kernelFlops[kCategoryCount] = {};
  int64_t kernelFlopNs[kCategoryCount] = {};
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, GemmShapeRow> shapes;
  std::vector<double> forwards;
  std::set<uint64_t> threads;
  // Per request id: its request, block, step and forward events.
  struct RequestEvents {
    std::vector<const Event *> requests, blocks, steps, forwards;
  };
  std::map<uint64_t, RequestEvents> perRequest;

  for (const Event &e : profiler) {
    if (e.track == TrackKind::thread) {
      threads.insert(e.trackId);
      if (e.trackId != 0)
        continue; // worker shares overlap the caller's kernels
      if (isKernel(e.category)) {
        const int c = static_cast<int>(e.category);
        kernelNs[c] += e.durationNs;
        ++kernelCalls[c];
        if (e.outputs >= 0 && e.inputs >= 0 && e.tokens >= 0) {
          kernelFlops[c] += 2.0 * static_cast<double>(e.tokens) * e.outputs * e.inputs;
          kernelFlopNs[c] += e.durationNs;
          GemmShapeRow &shape = shapes[{c, e.tokens, e.outputs, e.inputs}];
          shape.category = e.category;
          shape.m = e.tokens;
          shape.n = e.outputs;
          shape.k = e.inputs;
          ++shape.calls;
          shape.ms += ms(e.durationNs);
        }
      } else if (e.category == Category::forward) {
        forwards.push_back(ms(e.durationNs));
      }
      continue;
    }
    RequestEvents &r = perRequest[e.trackId];
    switch (e.category) {
    case Category::request:
      r.requests.push_back(&e);
      break;
    case Category::block:
      r.blocks.push_back(&e);
      break;
    case Category::step:
      r.steps.push_back(&e);
      break;
    case Category::forward:
      r.forwards.push_back(&e);
      break;
    default:
      break;
    }
  }

  summary.forwardMs = Distribution::of(forwards);
  double kernelTotal = 0;
  for (int c = 0; c < kCategoryCount; ++c) {
    if (!kernelCalls[c])
      continue;
    KernelRow row;
    row.category = static_cast<Category>(c);
    row.calls = kernelCalls[c];
    row.ms = ms(kernelNs[c]);
    row.flops = kernelFlops[c];
    row.flopMs = ms(kernelFlopNs[c]);
    kernelTotal += row.ms;
    summary.kernels.push_back(row);
  }
  const double forwardTotal = summary.forwardMs.total;
  const double denominator = forwardTotal > 0 ? forwardTotal : kernelTotal;
  for (KernelRow &row : summary.kernels)
    row.share = denominator > 0 ? row.ms / denominator : 0;
  std::sort(summary.kernels.begin(), summary.kernels.end(),
            [](const KernelRow &a, const KernelRow &b) { return a.ms > b.ms; });
  for (const auto &[key, shape] : shapes)
    summary.gemmShapes.push_back(shape);
  std::sort(summary.gemmShapes.begin(), summary.gemmShapes.end(),
            [](const GemmShapeRow &a, const GemmShapeRow &b) { return a.ms > b.ms; });
  if (forwardTotal > 0) {
    summary.untrackedMs = std::max(0.0, forwardTotal - kernelTotal);
    summary.untrackedShare = summary.untrackedMs / forwardTotal;
  }

  std::vector<double> steps, overheads, stepsPerBlock;
  for (auto &[id, r] : perRequest) {
    const std::vector<const Event *> requests = sortedByStart(r.requests);
    const std::vector<const Event *> blocks = sortedByStart(r.blocks);
    const std::vector<const Event *> stepEvents = sortedByStart(r.steps);
    const std::vector<const Event *> forwardEvents = sortedByStart(r.forwards);

    const std::vector<Contained> forwardsInStep = containedIn(stepEvents, forwardEvents);
    for (size_t s = 0; s < stepEvents.size(); ++s) {
      steps.push_back(ms(stepEvents[s]->durationNs));
      overheads.push_back(ms(stepEvents[s]->durationNs - forwardsInStep[s].ns));
    }
    for (const Contained &c : containedIn(blocks, stepEvents))
      stepsPerBlock.push_back(static_cast<double>(c.count));

    const std::vector<Contained> blocksIn = containedIn(requests, blocks);
    const std::vector<Contained> stepsIn = containedIn(requests, stepEvents);
    const std::vector<Contained> forwardsIn = containedIn(requests, forwardEvents);
    for (size_t q = 0; q < requests.size(); ++q) {
      RequestRow row;
      row.id = id;
      row.ms = ms(requests[q]->durationNs);
      row.blocks = blocksIn[q].count;
      row.steps = stepsIn[q].count;
      row.forwards = forwardsIn[q].count;
      summary.requests.push_back(row);
    }
  }
  summary.stepMs = Distribution::of(steps);
  summary.hostOverheadMs = Distribution::of(overheads);
  summary.stepsPerBlock = Distribution::of(stepsPerBlock);
  summary.threads.assign(threads.begin(), threads.end());
  return summary;
}

} // namespace dlm::profile
