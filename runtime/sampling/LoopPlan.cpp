#include "runtime/sampling/LoopPlan.h"

#include <iomanip>
#include <sstream>

namespace dlm::sampling {

namespace {

const char *forwardModeName(ForwardStep::Mode mode) {
  switch (mode) {
  case ForwardStep::Mode::full:
    return "full";
  case ForwardStep::Mode::cached:
    return "cached";
  case ForwardStep::Mode::window:
    return "window";
  }
  return "?";
}

const char *sampleKindName(SampleStep::Kind kind) {
  return kind == SampleStep::Kind::gumbelMax ? "gumbel_max" : "tempered";
}

const char *acceptRuleName(AcceptStep::Rule rule) {
  switch (rule) {
  case AcceptStep::Rule::topK:
    return "top_k";
  case AcceptStep::Rule::threshold:
    return "threshold";
  case AcceptStep::Rule::entropyBound:
    return "entropy_bound";
  }
  return "?";
}

void printStep(std::ostream &out, const StepPlan &step) {
  const ForwardStep &f = step.forward;
  out << "forward " << forwardModeName(f.mode) << " count=" << f.count << " keep=" << f.keep;
  if (f.mode == ForwardStep::Mode::window)
    out << " feed_end=" << f.feedEnd;
  out << " rows=" << f.rowBegin << ',' << f.rowEnd;
  const SampleStep &s = step.sample;
  out << "; sample " << sampleKindName(s.kind) << " temperature=" << s.temperature
      << " excluded=" << s.excluded << " step=" << s.rngStep;
  const AcceptStep &a = step.accept;
  out << "; accept " << acceptRuleName(a.rule);
  // Only the rule's own parameter: the others are not read, and must not split graph keys.
  if (a.rule == AcceptStep::Rule::topK)
    out << " k=" << a.k;
  else if (a.rule == AcceptStep::Rule::threshold)
    out << " threshold=" << a.threshold;
  else
    out << " bound=" << a.bound;
  out << " candidates=" << (a.candidates == AcceptStep::Candidates::masked ? "masked" : "all");
  if (a.converge == AcceptStep::Converge::stableConfident)
    out << " converge=stable_confident stability=" << a.stability << " confidence=" << a.confidence;
  out << "; gate "
      << (step.gate.rule == GateStep::Rule::noMaskLeft ? "no_mask_left" : "converged_or_last")
      << " last=" << (step.gate.last ? 1 : 0);
  const RenoiseStep &r = step.renoise;
  out << "; renoise " << (r.noise == RenoiseStep::Noise::mask ? "mask" : "uniform")
      << " candidates="
      << (r.candidates == RenoiseStep::Candidates::maskedOnly ? "masked_only" : "every_rejected")
      << " step=" << r.rngStep;
}

} // namespace

std::string stepPlanText(const StepPlan &step) {
  std::ostringstream out;
  out << std::setprecision(17);
  printStep(out, step);
  return out.str();
}

std::string loopPlanText(const LoopPlan &plan) {
  std::ostringstream out;
  out << std::setprecision(17);
  out << "loop [" << plan.begin << ',' << plan.end << ") of " << plan.total
      << " mask=" << plan.maskToken << " seed=" << plan.seed << " request=" << plan.request
      << " unroll=" << plan.unroll << " capped=" << (plan.capped ? 1 : 0) << '\n';
  for (const StepPlan &step : plan.steps) {
    printStep(out, step);
    out << '\n';
  }
  return out.str();
}

} // namespace dlm::sampling
