// The batch scheduler (runtime/engine/BatchScheduler.h, docs/design/serving.md §1): concurrent
// requests, each a decode program on its own thread, have their forwards packed into shared runs
// and decode exactly what they decode alone on a batch-invariant backend, whatever their phases
// (prefills, appended tokens, cached blocks) and lengths.
#include "runtime/engine/BatchScheduler.h"

#include "runtime/cpu/CpuBackend.h"
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/program/DecodeProgram.h"
#include "tests/runtime/model/TinyModel.h"
#include "tests/runtime/program/ShippedDecodeProgram.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace dlm::engine {
namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;

program::DecodeProgram loadProgram(const std::string &policy) {
  StatusOr<program::DecodeProgram> loaded =
      program::DecodeProgram::load(program::testing::shippedDecodeProgram(policy).records, {});
  EXPECT_TRUE(loaded) << loaded.status().message();
  return std::move(*loaded);
}

class BatchSchedulerTest : public ::testing::Test {
public: // checkConcurrentEqualsAlone uses the fixture's model and requests
  void open(TinyModelOptions options) {
    tiny = std::make_unique<TinyModel>(options);
    tiny->write(dir.file("tiny.dlm"));
    StatusOr<artifact::ArtifactReader> opened = artifact::ArtifactReader::open(dir.file("tiny.dlm"));
    ASSERT_TRUE(opened) << opened.status().message();
    reader = std::make_unique<artifact::ArtifactReader>(std::move(*opened));
    StatusOr<std::shared_ptr<const model::ModelWeights>> loaded = model::ModelWeights::load(*reader);
    ASSERT_TRUE(loaded) << loaded.status().message();
    weights = *loaded;
    facts.maskTokenId = options.maskTokenId;
    facts.eosTokenIds = {};
  }

  std::unique_ptr<cpu::CpuBackend> backend(int64_t pages, bool sharePrefixes = false) {
    BackendOptions options;
    options.sharePrefixes = sharePrefixes;
    options.threads = 2;
    options.kvPageTokens = 4;
    options.kvPages = pages;
    options.batchInvariant = true;
    StatusOr<std::unique_ptr<cpu::CpuBackend>> created = cpu::CpuBackend::create(
        weights, reader->findKernelTarget("cpu")->kernels, tiny->options().maxPositions, options);
    EXPECT_TRUE(created) << created.status().message();
    return std::move(*created);
  }

  // Request i: its own prompt and length.
  program::ProgramRequest request(int i, artifact::Attributes knobs) const {
    program::ProgramRequest r;
    for (int t = 0; t < 3 + 2 * i; ++t)
      r.prompt.push_back(static_cast<int32_t>(2 + (i * 11 + t * 5) % 30));
    r.knobs = std::move(knobs);
    r.seed = static_cast<uint64_t>(i);
    return r;
  }

  TempDir dir;
  std::unique_ptr<TinyModel> tiny;
  std::unique_ptr<artifact::ArtifactReader> reader;
  std::shared_ptr<const model::ModelWeights> weights;
  sampling::TokenFacts facts;
};

// Every request alone on its own backend, then all at once through the scheduler.
void checkConcurrentEqualsAlone(BatchSchedulerTest &test, const std::string &policy,
                                const std::vector<artifact::Attributes> &knobs);

TEST_F(BatchSchedulerTest, AutoregressiveRequestsDecodeAsAlone) {
  TinyModelOptions options;
  options.causal = true;
  options.qkNorm = true;
  open(options);
  std::vector<artifact::Attributes> knobs;
  for (int i = 0; i < 6; ++i)
    knobs.push_back({{"max_new_tokens", int64_t(4 + 3 * i)}, {"temperature", i % 2 ? 0.8 : 0.0}});
  checkConcurrentEqualsAlone(*this, "autoregressive", knobs);
}

TEST_F(BatchSchedulerTest, DiffusionRequestsWithCachedBlocksDecodeAsAlone) {
  open(TinyModelOptions{});
  std::vector<artifact::Attributes> knobs;
  // Half the requests keep the prefix's K/V across a block's steps (cached forwards), half
  // recompute everything (full forwards).
  for (int i = 0; i < 6; ++i)
    knobs.push_back({{"gen_length", int64_t(8)}, {"block_length", int64_t(4)},
                     {"steps", int64_t(4 + 4 * (i % 2))},
                     {"cache", std::string(i < 3 ? "prefix" : "none")}});
  checkConcurrentEqualsAlone(*this, "low-confidence", knobs);
}

// Requests whose prompts share their first three pages (12 tokens) decode as alone when a later
// prefill adopts the pages an earlier request published, and when its pages were published by
// a request running beside it.
TEST_F(BatchSchedulerTest, PrefillsAdoptPublishedPrefixesAndDecodeAsAlone) {
  TinyModelOptions options;
  options.causal = true;
  options.qkNorm = true;
  open(options);
  const program::DecodeProgram program = loadProgram("autoregressive");
  auto sharedPrefixRequest = [&](int i) {
    program::ProgramRequest r;
    for (int t = 0; t < 12; ++t)
      r.prompt.push_back(static_cast<int32_t>(2 + (t * 7) % 30));
    for (int t = 0; t < 1 + i; ++t)
      r.prompt.push_back(static_cast<int32_t>(3 + (i * 5 + t) % 29));
    r.knobs = {{"max_new_tokens", int64_t(6)}, {"temperature", i % 2 ? 0.8 : 0.0}};
    r.seed = static_cast<uint64_t>(i);
    return r;
  };
  constexpr int kRequests = 5;
  std::vector<std::vector<int32_t>> alone(kRequests), together(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    std::unique_ptr<cpu::CpuBackend> single = backend(0);
    StatusOr<sampling::DecodeOutcome> out =
        program::DecodeInterpreter(program).run(*single, facts, sharedPrefixRequest(i), {});
    ASSERT_TRUE(out) << out.status().message();
    alone[i] = out->outputIds;
  }
  std::unique_ptr<cpu::CpuBackend> shared = backend(64, /*sharePrefixes=*/true);
  SchedulerLimits limits;
  limits.tokensPerRun = 96;
  limits.kvPages = 64;
  limits.kvPageTokens = 4;
  StatusOr<std::unique_ptr<BatchScheduler>> scheduler = BatchScheduler::create(*shared, limits);
  ASSERT_TRUE(scheduler) << scheduler.status().message();
  auto run = [&](int i) {
    StatusOr<std::unique_ptr<sampling::DecodeModel>> model = (*scheduler)->open();
    ASSERT_TRUE(model) << model.status().message();
    StatusOr<sampling::DecodeOutcome> out =
        program::DecodeInterpreter(program).run(**model, facts, sharedPrefixRequest(i), {});
    ASSERT_TRUE(out) << "request " << i << ": " << out.status().message();
    together[i] = out->outputIds;
  };
  run(0); // publishes the shared pages; then the others adopt them, side by side
  std::vector<std::thread> threads;
  for (int i = 1; i < kRequests; ++i)
    threads.emplace_back(run, i);
  for (std::thread &t : threads)
    t.join();
  for (int i = 0; i < kRequests; ++i)
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
  const SchedulerStats stats = (*scheduler)->stats();
  EXPECT_GE(stats.prefixTokensReused, 12 * (kRequests - 1));
  EXPECT_GT(stats.kvPagesCached, 0) << "published pages stay cached after their requests";
  EXPECT_EQ(stats.kvPagesInUse, stats.kvPagesCached);
}

// A request that reserves more after its admission gets the pages while they are free, and a
// named error, not a wait that could deadlock, once they are not.
TEST_F(BatchSchedulerTest, AdmittedRequestsGrowOnlyIntoFreePages) {
  open(TinyModelOptions{});
  std::unique_ptr<cpu::CpuBackend> shared = backend(8);
  SchedulerLimits limits;
  limits.tokensPerRun = 32;
  limits.kvPages = 8;
  limits.kvPageTokens = 4;
  StatusOr<std::unique_ptr<BatchScheduler>> scheduler = BatchScheduler::create(*shared, limits);
  ASSERT_TRUE(scheduler) << scheduler.status().message();
  StatusOr<std::unique_ptr<sampling::DecodeModel>> a = (*scheduler)->open();
  StatusOr<std::unique_ptr<sampling::DecodeModel>> b = (*scheduler)->open();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE((*a)->reserve(12, 4).isOk()); // 3 pages
  ASSERT_TRUE((*b)->reserve(12, 4).isOk()); // 3 more
  EXPECT_TRUE((*a)->reserve(20, 4).isOk()); // grows to 5: 8 of 8
  EXPECT_EQ((*scheduler)->stats().kvPagesReserved, 8);
  const Status grown = (*b)->reserve(16, 4);
  ASSERT_FALSE(grown.isOk());
  EXPECT_EQ(grown.message(), "not supported yet: a request reserving 4 KV pages after it was "
                             "admitted with 3 while the pool is full (preemption)");
  a->reset();
  EXPECT_TRUE((*b)->reserve(16, 4).isOk()) << "a's pages are free again";
  EXPECT_EQ((*scheduler)->stats().kvPagesReserved, 4);
  // A first reserve of nothing is an admission too: the request counts as running once.
  StatusOr<std::unique_ptr<sampling::DecodeModel>> c = (*scheduler)->open();
  ASSERT_TRUE(c);
  ASSERT_TRUE((*c)->reserve(0, 0).isOk());
  EXPECT_TRUE((*c)->reserve(8, 4).isOk());
  EXPECT_EQ((*scheduler)->stats().running, 2);
  EXPECT_EQ((*scheduler)->stats().kvPagesReserved, 6);
}

void checkConcurrentEqualsAlone(BatchSchedulerTest &test, const std::string &policy,
                                const std::vector<artifact::Attributes> &knobs) {
  const program::DecodeProgram program = loadProgram(policy);
  const int n = static_cast<int>(knobs.size());
  std::vector<std::vector<int32_t>> alone(n), together(n);
  for (int i = 0; i < n; ++i) {
    std::unique_ptr<cpu::CpuBackend> single = test.backend(0);
    ASSERT_TRUE(single);
    StatusOr<sampling::DecodeOutcome> out = program::DecodeInterpreter(program).run(
        *single, test.facts, test.request(i, knobs[i]), {});
    ASSERT_TRUE(out) << out.status().message();
    alone[i] = out->outputIds;
  }
  std::unique_ptr<cpu::CpuBackend> shared = test.backend(256);
  SchedulerLimits limits;
  limits.tokensPerRun = 96;
  limits.kvPages = 256;
  limits.kvPageTokens = 4;
  StatusOr<std::unique_ptr<BatchScheduler>> scheduler = BatchScheduler::create(*shared, limits);
  ASSERT_TRUE(scheduler) << scheduler.status().message();
  std::vector<std::thread> threads;
  std::vector<Status> statuses(n, Status::ok());
  for (int i = 0; i < n; ++i) {
    StatusOr<std::unique_ptr<sampling::DecodeModel>> model = (*scheduler)->open();
    ASSERT_TRUE(model) << model.status().message();
    threads.emplace_back([&, i, m = std::move(*model)]() mutable {
      StatusOr<sampling::DecodeOutcome> out = program::DecodeInterpreter(program).run(
          *m, test.facts, test.request(i, knobs[i]), {});
      statuses[i] = out.status();
      if (out)
        together[i] = out->outputIds;
      m.reset(); // closes the request
    });
  }
  for (std::thread &t : threads)
    t.join();
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(statuses[i]) << "request " << i << ": " << statuses[i].message();
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
  }
  const SchedulerStats stats = (*scheduler)->stats();
  EXPECT_GT(stats.mostPerRun, 1) << "no run packed several requests";
  EXPECT_LT(stats.runs, stats.forwards);
}

} // namespace
} // namespace dlm::engine
