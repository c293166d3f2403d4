// dlm-serve's counters and their Prometheus text (GET /metrics): requests by outcome, generated
// tokens (total and per second over the last window), request forwards, with the engine's
// scheduler stats (queue depth, running requests, KV pages, tokens per packed run).
#pragma once

#include "runtime/engine/BatchScheduler.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

namespace dlm::serve {

// How a generation request ended, as the `outcome` label says it.
enum class Outcome {
  success,       // answered (finish_reason stop or length)
  cancelled,     // the client went away
  invalidRequest, // 4xx before or from the engine (bad fields, context length)
  queueFull,     // 429
  unavailable,   // 503: shutting down
  failed,        // anything else
};
const char *outcomeName(Outcome outcome);

class ServeMetrics {
public:
  using Clock = std::chrono::steady_clock;
  explicit ServeMetrics(double windowSeconds = 10) : window_(windowSeconds) {}

  void requestEnded(Outcome outcome);
  // A request's generated (completion) tokens and its forwards, counted when it ends.
  void generated(int64_t tokens, int64_t forwards, Clock::time_point now = Clock::now());

  // The Prometheus text exposition (version 0.0.4).
  std::string prometheus(const engine::SchedulerStats &stats, Clock::time_point now = Clock::now()) const;

  int64_t requests(Outcome outcome) const;
  int64_t generatedTokens() const;
  // Generated tokens per second over the last window.
  double tokensPerSecond(Clock::time_point now) const;
  // The (time, tokens) samples the window holds: those of the last window, at most, whether or
  // not anyone reads /metrics (the window once grew by one sample a request until it was read).
  size_t windowSamples() const;

private:
  const double window_;
  mutable std::mutex mutex_;
  std::map<Outcome, int64_t> requests_;
  int64_t generatedTokens_ = 0;
  int64_t forwards_ = 0;
  mutable std::deque<std::pair<Clock::time_point, int64_t>> recent_;

  // Drops the samples older than the window before `now`; the mutex is held.
  void dropOldSamples(Clock::time_point now) const;
};

} // namespace dlm::serve
