#include "tools/dlm-serve/ServeMetrics.h"

#include <cstdio>
#include <sstream>

namespace dlm::serve {

const char *outcomeName(Outcome outcome) {
  switch (outcome) {
  case Outcome::success:
    return "success";
  case Outcome::cancelled:
    return "cancelled";
  case Outcome::invalidRequest:
    return "invalid_request";
  case Outcome::queueFull:
    return "queue_full";
  case Outcome::unavailable:
    return "unavailable";
  case Outcome::failed:
    return "failed";
  }
  return "failed";
}

void ServeMetrics::requestEnded(Outcome outcome) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[outcome];
}

void ServeMetrics::generated(int64_t tokens, int64_t forwards, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  generatedTokens_ += tokens;
  forwards_ += forwards;
  recent_.emplace_back(now, tokens);
  dropOldSamples(now);
}

void ServeMetrics::dropOldSamples(Clock::time_point now) const {
  const auto horizon =
      now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(window_));
  while (!recent_.empty() && recent_.front().first < horizon)
    recent_.pop_front();
}

size_t ServeMetrics::windowSamples() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return recent_.size();
}

int64_t ServeMetrics::requests(Outcome outcome) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = requests_.find(outcome);
  return found == requests_.end() ? 0 : found->second;
}

int64_t ServeMetrics::generatedTokens() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return generatedTokens_;
}

double ServeMetrics::tokensPerSecond(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mutex_);
  dropOldSamples(now);
  int64_t tokens = 0;
  for (const auto &[time, count] : recent_)
    tokens += count;
  return static_cast<double>(tokens) / window_;
}

namespace {

constexpr const char *kGauge = "gauge";
constexpr const char *kCounter = "counter";

// One Prometheus sample with its HELP and TYPE lines.
struct Metric {
  const char *name;
  const char *type;
  const char *help;
  double value;
};

void writeMetrics(std::ostringstream &out, std::initializer_list<Metric> metrics) {
  for (const Metric &m : metrics) {
    char number[64];
    std::snprintf(number, sizeof number, "%.17g", m.value);
    out << "# HELP " << m.name << " " << m.help << "\n# TYPE " << m.name << " " << m.type << "\n"
        << m.name << " " << number << "\n";
  }
}

double ratio(int64_t numerator, int64_t denominator) {
  return denominator > 0 ? static_cast<double>(numerator) / static_cast<double>(denominator) : 0.0;
}

} // namespace

std::string ServeMetrics::prometheus(const engine::SchedulerStats &stats,
                                     Clock::time_point now) const {
  const double perSecond = tokensPerSecond(now);
  std::ostringstream out;
  writeMetrics(
      out,
      {
          {"dlm_requests_waiting", kGauge, "Requests waiting for admission (queue depth).",
           double(stats.waiting)},
          {"dlm_requests_running", kGauge, "Admitted requests running now.", double(stats.running)},
          {"dlm_kv_pages_total", kGauge, "KV pages in the pool.", double(stats.kvPages)},
          {"dlm_kv_pages_reserved", kGauge,
           "KV pages reserved for the running requests' worst cases.",
           double(stats.kvPagesReserved)},
          {"dlm_kv_pages_in_use", kGauge,
           "KV pages holding K/V now, published prefix pages included.",
           double(stats.kvPagesInUse)},
          {"dlm_kv_pages_cached", kGauge,
           "Published prefix pages no request holds (free on demand).",
           double(stats.kvPagesCached)},
          {"dlm_prefix_tokens_reused_total", kCounter,
           "Prefill tokens taken from published prefix pages instead of computed.",
           double(stats.prefixTokensReused)},
          {"dlm_scheduler_runs_total", kCounter, "Packed backend forwards.", double(stats.runs)},
          {"dlm_scheduler_forwards_total", kCounter, "Request forwards the packed runs served.",
           double(stats.forwards)},
          {"dlm_scheduler_fed_tokens_total", kCounter, "Tokens the packed runs fed.",
           double(stats.fedTokens)},
          {"dlm_scheduler_tokens_per_forward", kGauge,
           "Tokens fed per packed forward, all requests together, since start.",
           ratio(stats.fedTokens, stats.runs)},
          {"dlm_scheduler_requests_per_forward", kGauge,
           "Request forwards per packed forward since start.", ratio(stats.forwards, stats.runs)},
          {"dlm_scheduler_admitted_total", kCounter, "Requests admitted.", double(stats.admitted)},
          {"dlm_scheduler_refused_total", kCounter,
           "Requests refused for a full queue or a request larger than the pool.",
           double(stats.refused)},
          {"dlm_scheduler_cancelled_total", kCounter,
           "Forwards or admissions refused because the caller cancelled.", double(stats.cancelled)},
      });
  int64_t generated = 0, forwards = 0;
  std::map<Outcome, int64_t> requests;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generated = generatedTokens_;
    forwards = forwards_;
    requests = requests_;
  }
  writeMetrics(out, {
                        {"dlm_generated_tokens_total", kCounter, "Completion tokens generated.",
                         double(generated)},
                        {"dlm_generated_tokens_per_second", kGauge,
                         "Completion tokens per second over the last 10 seconds.", perSecond},
                        {"dlm_generated_tokens_per_request_forward", kGauge,
                         "Completion tokens per request forward (parallel decoding) since start.",
                         ratio(generated, forwards)},
                    });
  out << "# HELP dlm_requests_total Generation requests by how they ended.\n"
         "# TYPE dlm_requests_total counter\n";
  for (Outcome outcome : {Outcome::success, Outcome::cancelled, Outcome::invalidRequest,
                          Outcome::queueFull, Outcome::unavailable, Outcome::failed}) {
    auto found = requests.find(outcome);
    out << "dlm_requests_total{outcome=\"" << outcomeName(outcome) << "\"} "
        << (found == requests.end() ? 0 : found->second) << "\n";
  }
  return out.str();
}

} // namespace dlm::serve
