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
  const auto horizon = now - std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(window_));
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

void metric(std::ostringstream &out, const char *name, const char *type, const char *help,
            double value) {
  char number[64];
  std::snprintf(number, sizeof number, "%.17g", value);
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << " " << number << "\n";
}

} // namespace

std::string ServeMetrics::prometheus(const engine::SchedulerStats &stats, Clock::time_point now) const {
  const double perSecond = tokensPerSecond(now);
  std::ostringstream out;
  metric(out, "dlm_requests_waiting", "gauge", "Requests waiting for admission (queue depth).",
         static_cast<double>(stats.waiting));
  metric(out, "dlm_requests_running", "gauge", "Admitted requests running now.",
         static_cast<double>(stats.running));
  metric(out, "dlm_kv_pages_total", "gauge", "KV pages in the pool.",
         static_cast<double>(stats.kvPages));
  metric(out, "dlm_kv_pages_reserved", "gauge",
         "KV pages reserved for the running requests' worst cases.",
         static_cast<double>(stats.kvPagesReserved));
  metric(out, "dlm_kv_pages_in_use", "gauge",
         "KV pages holding K/V now, published prefix pages included.",
         static_cast<double>(stats.kvPagesInUse));
  metric(out, "dlm_kv_pages_cached", "gauge",
         "Published prefix pages no request holds (free on demand).",
         static_cast<double>(stats.kvPagesCached));
  metric(out, "dlm_prefix_tokens_reused_total", "counter",
         "Prefill tokens taken from published prefix pages instead of computed.",
         static_cast<double>(stats.prefixTokensReused));
  metric(out, "dlm_scheduler_runs_total", "counter", "Packed backend forwards.",
         static_cast<double>(stats.runs));
  metric(out, "dlm_scheduler_forwards_total", "counter", "Request forwards the packed runs served.",
         static_cast<double>(stats.forwards));
  metric(out, "dlm_scheduler_fed_tokens_total", "counter", "Tokens the packed runs fed.",
         static_cast<double>(stats.fedTokens));
  metric(out, "dlm_scheduler_tokens_per_forward", "gauge",
         "Tokens fed per packed forward, all requests together, since start.",
         stats.runs > 0 ? static_cast<double>(stats.fedTokens) / static_cast<double>(stats.runs)
                        : 0.0);
  metric(out, "dlm_scheduler_requests_per_forward", "gauge",
         "Request forwards per packed forward since start.",
         stats.runs > 0 ? static_cast<double>(stats.forwards) / static_cast<double>(stats.runs)
                        : 0.0);
  metric(out, "dlm_scheduler_admitted_total", "counter", "Requests admitted.",
         static_cast<double>(stats.admitted));
  metric(out, "dlm_scheduler_refused_total", "counter",
         "Requests refused for a full queue or a request larger than the pool.",
         static_cast<double>(stats.refused));
  metric(out, "dlm_scheduler_cancelled_total", "counter",
         "Forwards or admissions refused because the caller cancelled.",
         static_cast<double>(stats.cancelled));
  int64_t generated = 0, forwards = 0;
  std::map<Outcome, int64_t> requests;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generated = generatedTokens_;
    forwards = forwards_;
    requests = requests_;
  }
  metric(out, "dlm_generated_tokens_total", "counter", "Completion tokens generated.",
         static_cast<double>(generated));
  metric(out, "dlm_generated_tokens_per_second", "gauge",
         "Completion tokens per second over the last 10 seconds.", perSecond);
  metric(out, "dlm_generated_tokens_per_request_forward", "gauge",
         "Completion tokens per request forward (parallel decoding) since start.",
         forwards > 0 ? static_cast<double>(generated) / static_cast<double>(forwards) : 0.0);
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
