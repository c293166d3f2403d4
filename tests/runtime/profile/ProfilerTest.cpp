#include "runtime/profile/ChromeTrace.h"
#include "runtime/profile/ProfileSummary.h"
#include "runtime/profile/Profiler.h"
#include "runtime/session/Session.h"

#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace dlm::profile {
namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;

Event event(Category category, const char *name, TrackKind track, uint64_t trackId, int64_t start,
            int64_t duration, int64_t index = -1) {
  return Event{name, category, track, trackId, start, duration, -1, -1, index, -1, -1};
}

Event gemm(int64_t m, int64_t n, int64_t k, int64_t start, int64_t duration) {
  return Event{"q_proj", Category::gemm, TrackKind::thread, 0, start, duration, 0, m, -1, n, k};
}

TEST(ProfilerTest, ScopesRecordNestedEventsWhenTheyClose) {
  Profiler profiler(16);
  {
    Scope outer(&profiler, Category::forward, "forward", TrackKind::thread, 0, -1, 5);
    Scope inner(&profiler, Category::gemm, "q_proj", TrackKind::thread, 0, 3, 5);
  }
  ASSERT_EQ(profiler.size(), 2u);
  const Event &inner = profiler.begin()[0];
  const Event &outer = profiler.begin()[1];
  EXPECT_STREQ(inner.name, "q_proj");
  EXPECT_EQ(inner.category, Category::gemm);
  EXPECT_EQ(inner.layer, 3);
  EXPECT_EQ(inner.tokens, 5);
  EXPECT_STREQ(outer.name, "forward");
  EXPECT_GE(inner.durationNs, 0);
  EXPECT_LE(outer.startNs, inner.startNs);
  EXPECT_GE(outer.startNs + outer.durationNs, inner.startNs + inner.durationNs);
}

TEST(ProfilerTest, NullProfilerRecordsNothing) {
  Profiler unused(4);
  {
    Scope scope(nullptr, Category::gemm, "q_proj");
    Scope kernel = kernelScope(nullptr, Category::attention, "attention", 0, 1);
  }
  EXPECT_EQ(unused.size(), 0u);
}

TEST(ProfilerTest, FullBufferCountsDroppedEventsAndClearForgets) {
  Profiler profiler(2);
  for (int i = 0; i < 5; ++i)
    Scope scope(&profiler, Category::rope, "rope");
  EXPECT_EQ(profiler.size(), 2u);
  EXPECT_EQ(profiler.dropped(), 3u);
  profiler.clear();
  EXPECT_EQ(profiler.size(), 0u);
  EXPECT_EQ(profiler.dropped(), 0u);
}

TEST(ProfilerTest, ThreadsRecordConcurrently) {
  Profiler profiler(4000);
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t)
    threads.emplace_back([&profiler, t] {
      for (int i = 0; i < 1000; ++i)
        Scope scope(&profiler, Category::workerShare, "worker_share", TrackKind::thread, t);
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_EQ(profiler.size(), 4000u);
  std::map<uint64_t, int> perThread;
  for (const Event &e : profiler)
    ++perThread[e.trackId];
  EXPECT_EQ(perThread, (std::map<uint64_t, int>{{0, 1000}, {1, 1000}, {2, 1000}, {3, 1000}}));
}

TEST(ProfileSummaryTest, KernelSharesHostOverheadAndStepsPerBlock) {
  Profiler profiler(64);
  // Thread track: two forwards of 10 ms, each with 6 ms of gemm and 2 ms of attention.
  for (int f = 0; f < 2; ++f) {
    const int64_t at = f * 20'000'000;
    profiler.record(event(Category::gemm, "q_proj", TrackKind::thread, 0, at + 1'000'000,
                          6'000'000));
    profiler.record(event(Category::attention, "attention", TrackKind::thread, 0,
                          at + 7'000'000, 2'000'000));
    profiler.record(event(Category::forward, "forward", TrackKind::thread, 0, at, 10'000'000));
    // The same forward seen by the request, inside a 12 ms step: 2 ms host overhead.
    profiler.record(event(Category::forward, "forward", TrackKind::request, 7, at, 10'000'000));
    profiler.record(event(Category::step, "denoise_step", TrackKind::request, 7, at, 12'000'000,
                          f));
  }
  profiler.record(event(Category::block, "block", TrackKind::request, 7, 0, 40'000'000, 0));
  profiler.record(event(Category::request, "request", TrackKind::request, 7, 0, 41'000'000));

  const Summary s = summarize(profiler);
  ASSERT_EQ(s.kernels.size(), 2u);
  EXPECT_EQ(s.kernels[0].category, Category::gemm);
  EXPECT_EQ(s.kernels[0].calls, 2);
  EXPECT_DOUBLE_EQ(s.kernels[0].ms, 12.0);
  EXPECT_DOUBLE_EQ(s.kernels[0].share, 0.6);
  EXPECT_DOUBLE_EQ(s.kernels[1].share, 0.2);
  EXPECT_DOUBLE_EQ(s.untrackedMs, 4.0);
  EXPECT_EQ(s.forwardMs.count, 2);
  EXPECT_EQ(s.stepMs.count, 2);
  EXPECT_DOUBLE_EQ(s.stepMs.mean, 12.0);
  EXPECT_DOUBLE_EQ(s.hostOverheadMs.mean, 2.0);
  EXPECT_EQ(s.stepsPerBlock.count, 1);
  EXPECT_DOUBLE_EQ(s.stepsPerBlock.mean, 2.0);
  ASSERT_EQ(s.requests.size(), 1u);
  EXPECT_EQ(s.requests[0].id, 7u);
  EXPECT_EQ(s.requests[0].steps, 2);
  EXPECT_EQ(s.requests[0].blocks, 1);
  EXPECT_EQ(s.requests[0].forwards, 2);
}

TEST(ProfileSummaryTest, GemmRatesPerKindAndShape) {
  Profiler profiler(16);
  // 2 * 10 * 20 * 30 = 12,000 flops in 1 us (12 GFLOP/s), twice; and one other shape.
  profiler.record(gemm(10, 20, 30, 0, 1'000));
  profiler.record(gemm(10, 20, 30, 5'000, 1'000));
  profiler.record(gemm(1, 20, 30, 9'000, 100));
  // A GEMM without a shape counts in time, not in the rate.
  profiler.record(event(Category::gemm, "q_proj", TrackKind::thread, 0, 10'000, 500));
  const Summary s = summarize(profiler);
  ASSERT_EQ(s.kernels.size(), 1u);
  EXPECT_EQ(s.kernels[0].calls, 4);
  EXPECT_DOUBLE_EQ(s.kernels[0].flops, 2 * 12'000.0 + 1'200.0);
  EXPECT_DOUBLE_EQ(s.kernels[0].flopMs, 0.0021);
  EXPECT_NEAR(s.kernels[0].gflops(), 25'200.0 / 2'100.0, 1e-9);
  ASSERT_EQ(s.gemmShapes.size(), 2u);
  EXPECT_EQ(s.gemmShapes[0].m, 10);
  EXPECT_EQ(s.gemmShapes[0].n, 20);
  EXPECT_EQ(s.gemmShapes[0].k, 30);
  EXPECT_EQ(s.gemmShapes[0].calls, 2);
  EXPECT_NEAR(s.gemmShapes[0].gflops(), 12.0, 1e-9);
  EXPECT_EQ(s.gemmShapes[1].m, 1);
  EXPECT_NEAR(s.gemmShapes[1].gflops(), 12.0, 1e-9);
}

TEST(ChromeTraceTest, CompleteEventsAndTrackNames) {
  Profiler profiler(8);
  profiler.record(event(Category::gemm, "q_\"proj", TrackKind::thread, 0, 1500, 250));
  profiler.record(event(Category::workerShare, "worker_share", TrackKind::thread, 1, 1600, 10));
  profiler.record(event(Category::step, "denoise_step", TrackKind::request, 3, 1000, 2000, 4));
  std::ostringstream text;
  TraceLabels labels;
  labels.backend = "dlm cpu backend";
  writeChromeTrace(profiler, labels, text);

  const nlohmann::json trace = nlohmann::json::parse(text.str());
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  std::set<std::string> threadNames;
  int complete = 0;
  for (const nlohmann::json &e : trace["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name")
        threadNames.insert(e["args"]["name"].get<std::string>());
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    ++complete;
    if (e["name"] == "q_\"proj") {
      EXPECT_EQ(e["cat"], "gemm");
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.5);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 0.25);
      EXPECT_EQ(e["pid"], kThreadsPid);
      EXPECT_EQ(e["tid"], 0);
    }
    if (e["name"] == "denoise_step") {
      EXPECT_EQ(e["pid"], kRequestsPid);
      EXPECT_EQ(e["tid"], 3);
      EXPECT_EQ(e["args"]["step"], 4);
    }
  }
  EXPECT_EQ(complete, 3);
  EXPECT_EQ(threadNames,
            (std::set<std::string>{"thread 0 (caller)", "worker 1", "request 3"}));
}

class ProfiledSessionTest : public ::testing::Test {
protected:
  std::unique_ptr<Session> session(Profiler *profiler) {
    TinyModelOptions options;
    options.eosTokenIds = {};
    TinyModel(options).write(dir.file("tiny.dlm"));
    StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(dir.file("tiny.dlm"));
    EXPECT_TRUE(model.isOk()) << model.status().message();
    SessionOptions sessionOptions;
    sessionOptions.threads = 2;
    sessionOptions.profiler = profiler;
    StatusOr<std::unique_ptr<Session>> created = Session::create(*model, sessionOptions);
    EXPECT_TRUE(created.isOk()) << created.status().message();
    return created ? std::move(*created) : nullptr;
  }

  static GenerateRequest request(const char *cache = "none") {
    GenerateRequest r;
    r.promptIds = {3, 4, 5};
    r.knobs["gen_length"] = int64_t(8);
    r.knobs["block_length"] = int64_t(4);
    r.knobs["steps"] = int64_t(8);
    r.requestId = 11;
    r.knobs["cache"] = std::string(cache);
    return r;
  }

  TempDir dir;
};

TEST_F(ProfiledSessionTest, GenerationRecordsRequestBlocksStepsForwardsAndKernels) {
  Profiler profiler;
  std::unique_ptr<Session> s = session(&profiler);
  ASSERT_TRUE(s);
  StatusOr<GenerateResult> result = s->generate(request("prefix"));
  ASSERT_TRUE(result.isOk()) << result.status().message();

  std::map<Category, int64_t> onRequest, onThread;
  for (const Event &e : profiler) {
    if (e.track == TrackKind::request) {
      EXPECT_EQ(e.trackId, 11u);
      ++onRequest[e.category];
    } else {
      ++onThread[e.category];
    }
  }
  EXPECT_EQ(onRequest[Category::request], 1);
  EXPECT_EQ(onRequest[Category::block], result->stats.blocks);
  EXPECT_EQ(onRequest[Category::step], result->stats.decodeSteps);
  EXPECT_EQ(onRequest[Category::forward], result->stats.forwards);
  EXPECT_EQ(onThread[Category::forward], result->stats.forwards);
  const int64_t layers = 2;
  EXPECT_EQ(onThread[Category::attention], layers * result->stats.forwards);
  EXPECT_EQ(onThread[Category::gemm], 7 * layers * result->stats.forwards);
  EXPECT_EQ(onThread[Category::lmHead], result->stats.forwards);

  const Summary summary = summarize(profiler);
  // Every projection and LM head call gave its shape: K is the hidden width or the MLP's.
  int64_t shapedCalls = 0;
  for (const GemmShapeRow &g : summary.gemmShapes) {
    shapedCalls += g.calls;
    EXPECT_GT(g.m, 0);
    EXPECT_GT(g.n, 0);
    EXPECT_GT(g.k, 0);
  }
  EXPECT_EQ(shapedCalls, onThread[Category::gemm] + onThread[Category::lmHead]);
  EXPECT_EQ(summary.stepMs.count, result->stats.decodeSteps);
  EXPECT_DOUBLE_EQ(summary.stepsPerBlock.mean, 4.0);
  double shares = 0;
  for (const KernelRow &row : summary.kernels)
    shares += row.share;
  EXPECT_GT(shares, 0.0);
  EXPECT_LE(shares, 1.0 + 1e-9);

  const MemoryUsage memory = s->backend().memoryUsage();
  EXPECT_GT(memory.weightBytes, 0u);
  EXPECT_GT(memory.kvPoolBytes, 0u);
  EXPECT_GT(memory.kvPeakBytes, 0u);
  EXPECT_LE(memory.kvPeakBytes, memory.kvPoolBytes);
  EXPECT_GT(memory.activationBytes, 0u);
}

TEST_F(ProfiledSessionTest, NoProfilerNoEventsAndTheSameTokens) {
  Profiler profiler;
  std::unique_ptr<Session> profiled = session(&profiler);
  std::unique_ptr<Session> plain = session(nullptr);
  ASSERT_TRUE(profiled && plain);
  StatusOr<GenerateResult> a = profiled->generate(request());
  const size_t recorded = profiler.size();
  StatusOr<GenerateResult> b = plain->generate(request());
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(a->outputIds, b->outputIds);
  EXPECT_GT(recorded, 0u);
  EXPECT_EQ(profiler.size(), recorded); // the plain session recorded nothing
}

} // namespace
} // namespace dlm::profile
