// dlm-serve's Prometheus text (tools/dlm-serve/ServeMetrics.h).
#include "tools/dlm-serve/ServeMetrics.h"

#include <gtest/gtest.h>

namespace dlm::serve {
namespace {

TEST(ServeMetrics, PrometheusText) {
  ServeMetrics metrics(10);
  const auto now = ServeMetrics::Clock::now();
  metrics.requestEnded(Outcome::success);
  metrics.requestEnded(Outcome::success);
  metrics.requestEnded(Outcome::cancelled);
  metrics.generated(64, 8, now - std::chrono::seconds(20)); // outside the window
  metrics.generated(30, 10, now);
  engine::SchedulerStats stats;
  stats.waiting = 3;
  stats.running = 2;
  stats.kvPages = 64;
  stats.kvPagesReserved = 12;
  stats.kvPagesInUse = 9;
  stats.kvPagesCached = 5;
  stats.prefixTokensReused = 48;
  stats.runs = 4;
  stats.fedTokens = 100;
  const std::string text = metrics.prometheus(stats, now);
  for (const char *line :
       {"dlm_requests_waiting 3\n", "dlm_requests_running 2\n", "dlm_kv_pages_total 64\n",
        "dlm_kv_pages_reserved 12\n", "dlm_kv_pages_in_use 9\n", "dlm_kv_pages_cached 5\n",
        "dlm_prefix_tokens_reused_total 48\n",
        "dlm_scheduler_tokens_per_forward 25\n", "dlm_generated_tokens_total 94\n",
        "dlm_generated_tokens_per_second 3\n", "dlm_requests_total{outcome=\"success\"} 2\n",
        "dlm_requests_total{outcome=\"cancelled\"} 1\n",
        "dlm_requests_total{outcome=\"queue_full\"} 0\n",
        "# TYPE dlm_generated_tokens_total counter\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  EXPECT_EQ(metrics.requests(Outcome::success), 2);
}

// A server nobody scrapes still forgets the samples older than the window as requests end.
TEST(ServeMetrics, WindowStaysBoundedWithoutScrapes) {
  ServeMetrics metrics(10);
  const auto start = ServeMetrics::Clock::now();
  for (int i = 0; i < 10000; ++i)
    metrics.generated(1, 1, start + std::chrono::milliseconds(100 * i));
  // One request every 100 ms over a 10 s window: about 100 samples, not 10000.
  EXPECT_LE(metrics.windowSamples(), 102u);
  EXPECT_EQ(metrics.generatedTokens(), 10000);
}

} // namespace
} // namespace dlm::serve
