// The serving engine (runtime/engine/Engine.h): requests generate()d from many threads at once,
// in different phases and with different settings, each get exactly what a one-request Session
// on a batch-invariant backend gives them when the engine is batch-invariant, and the runs packed
// several of them. Without batch invariance (the default) a request alone is bit for bit a
// session's.
#include "runtime/engine/Engine.h"

#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <thread>

namespace dlm::engine {
namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;

GenerateRequest request(int i) {
  GenerateRequest r;
  for (int t = 0; t < 2 + 3 * (i % 4); ++t)
    r.promptIds.push_back(static_cast<int32_t>(2 + (i * 7 + t * 3) % 30));
  r.knobs["gen_length"] = int64_t(8);
  r.knobs["block_length"] = int64_t(4);
  r.knobs["steps"] = int64_t(i % 3 == 0 ? 4 : 8);
  // The prefix and the dual cache: cached and window forwards packed with full ones.
  if (i % 2)
    r.knobs["cache"] = std::string(i % 4 == 1 ? "prefix" : "dual");
  r.seed = static_cast<uint64_t>(i);
  return r;
}

// Requests 0..n-1 generated at once, each on its own thread; `onBlock(i)` is request i's block
// callback. Returns each request's output ids, or its error message in `errors`.
std::vector<std::vector<int32_t>>
generateConcurrently(Engine &engine, int n, std::vector<std::string> &errors,
                     const std::function<void(int)> &onBlock = {},
                     const std::function<GenerateRequest(int)> &make = request) {
  std::vector<std::vector<int32_t>> outputs(static_cast<size_t>(n));
  errors.assign(static_cast<size_t>(n), "");
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      StatusOr<GenerateResult> out = engine.generate(make(i), [&](const StreamedBlock &) {
        if (onBlock)
          onBlock(i);
      });
      if (out)
        outputs[static_cast<size_t>(i)] = out->outputIds;
      else
        errors[static_cast<size_t>(i)] = out.status().message();
    });
  for (std::thread &t : threads)
    t.join();
  return outputs;
}

// The default tiny model, written to `dir` and opened.
std::shared_ptr<LoadedModel> tinyModel(TempDir &dir) {
  TinyModel tiny{dlm::testing::TinyModelOptions{}};
  tiny.write(dir.file("tiny.dlm"));
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(dir.file("tiny.dlm"));
  EXPECT_TRUE(model) << model.status().message();
  return model ? *model : nullptr;
}

// Requests 0..n-1 of `make`, one after another on one batch-invariant session: what each gets
// alone (an empty output where one failed, which the test then reports).
std::vector<std::vector<int32_t>>
generateAlone(std::shared_ptr<LoadedModel> model, int n,
              const std::function<GenerateRequest(int)> &make = request) {
  SessionOptions single;
  single.batchInvariant = true;
  single.threads = 2;
  StatusOr<std::unique_ptr<Session>> session = Session::create(std::move(model), single);
  EXPECT_TRUE(session) << session.status().message();
  std::vector<std::vector<int32_t>> alone(static_cast<size_t>(n));
  for (int i = 0; session && i < n; ++i) {
    StatusOr<GenerateResult> out = (*session)->generate(make(i));
    EXPECT_TRUE(out) << "request " << i << " alone: " << out.status().message();
    if (out)
      alone[static_cast<size_t>(i)] = out->outputIds;
  }
  return alone;
}

TEST(Engine, ConcurrentRequestsGetWhatTheyGetAlone) {
  TempDir dir;
  std::shared_ptr<LoadedModel> model = tinyModel(dir);
  ASSERT_TRUE(model);
  constexpr int kRequests = 8;

  const std::vector<std::vector<int32_t>> alone = generateAlone(model, kRequests);

  EngineOptions options;
  options.session.batchInvariant = true;
  options.session.threads = 2;
  options.session.kvPages = 256;
  options.session.kvPageTokens = 4;
  options.tokensPerForward = 64;
  StatusOr<std::unique_ptr<Engine>> engine = Engine::create(model, options);
  ASSERT_TRUE(engine) << engine.status().message();
  EXPECT_TRUE((*engine)->sessionOptions().batchInvariant);
  std::vector<std::string> errors;
  std::vector<int64_t> blocks(kRequests, 0);
  const std::vector<std::vector<int32_t>> together =
      generateConcurrently(**engine, kRequests, errors, [&](int i) { ++blocks[i]; });
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(errors[i], "") << "request " << i;
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
    EXPECT_EQ(blocks[i], 2) << "request " << i << ": committed blocks streamed";
  }
  EXPECT_GT((*engine)->stats().mostPerRun, 1);
}

// tests/reference/llada2's LLaDA2 fixture compiled by dlmc, and its requests.
std::shared_ptr<LoadedModel> llada2Model(TempDir &dir) {
  const std::string path = dir.file("llada2.dlm");
  const std::string command =
      std::string(DLM_DLMC) + " compile " + DLM_LLADA2_FIXTURE + " -o " + path + " > /dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(path);
  EXPECT_TRUE(model) << model.status().message();
  return model ? *model : nullptr;
}

GenerateRequest moeRequest(int i) {
  GenerateRequest r;
  for (int t = 0; t < 3 + 5 * (i % 3); ++t)
    r.promptIds.push_back(static_cast<int32_t>(5 + (i * 11 + t * 7) % 90));
  r.knobs["gen_length"] = int64_t(64);
  return r;
}

// A mixture-of-experts model (tests/reference/llada2's LLaDA2 fixture, compiled by dlmc and
// decoded by block-refinement) serves concurrently: each request gets the tokens it gets alone,
// the experts' products running a row at a time on the batch-invariant backend. The requests
// alone share one session: block-refinement's first forward over a prompt shorter than a block
// is a cached one, which must not meet the last request's K/V.
TEST(Engine, MixtureOfExpertsRequestsGetWhatTheyGetAlone) {
  TempDir dir;
  std::shared_ptr<LoadedModel> model = llada2Model(dir);
  ASSERT_TRUE(model);
  constexpr int kRequests = 4;
  const std::vector<std::vector<int32_t>> alone = generateAlone(model, kRequests, moeRequest);
  EngineOptions options;
  options.session.batchInvariant = true;
  options.session.threads = 2;
  StatusOr<std::unique_ptr<Engine>> engine = Engine::create(model, options);
  ASSERT_TRUE(engine) << engine.status().message();
  std::vector<std::string> errors;
  const std::vector<std::vector<int32_t>> together =
      generateConcurrently(**engine, kRequests, errors, {}, moeRequest);
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(errors[i], "") << "request " << i;
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
  }
  EXPECT_GT((*engine)->stats().mostPerRun, 1);
}

// Without batch invariance (the default) the engine runs the session's kernels: a request alone
// gets the session's logits bit for bit (these models are not causal: no prefix pages are
// shared). Under load the packed products' sums may differ in their last bits, and what a
// request is packed with depends on the threads' timing, so there every request must finish
// and the outputs that differ from alone are only counted (a dense model and a mixture of
// experts grouped by expert).
void checkFastEngine(std::shared_ptr<LoadedModel> model, int requests,
                     const std::function<GenerateRequest(int)> &make) {
  SessionOptions single;
  single.threads = 2;
  StatusOr<std::unique_ptr<Session>> session = Session::create(model, single);
  ASSERT_TRUE(session) << session.status().message();
  EngineOptions options;
  options.session.threads = 2;
  StatusOr<std::unique_ptr<Engine>> engine = Engine::create(model, options);
  ASSERT_TRUE(engine) << engine.status().message();
  EXPECT_FALSE((*engine)->sessionOptions().batchInvariant);
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < requests; ++i) {
    GenerateRequest r = make(i);
    r.captureFirstLogits = true;
    StatusOr<GenerateResult> bySession = (*session)->generate(r);
    StatusOr<GenerateResult> byEngine = (*engine)->generate(r);
    ASSERT_TRUE(bySession && byEngine) << "request " << i;
    EXPECT_EQ(byEngine->firstLogits, bySession->firstLogits) << "request " << i;
    EXPECT_EQ(byEngine->outputIds, bySession->outputIds) << "request " << i;
    alone.push_back(bySession->outputIds);
  }
  std::vector<std::string> errors;
  const std::vector<std::vector<int32_t>> together =
      generateConcurrently(**engine, requests, errors, {}, make);
  int differing = 0;
  for (int i = 0; i < requests; ++i) {
    EXPECT_EQ(errors[i], "") << "request " << i;
    EXPECT_FALSE(together[i].empty()) << "request " << i;
    differing += together[i] != alone[static_cast<size_t>(i)];
  }
  ::testing::Test::RecordProperty("outputs_differing_under_load", differing);
  EXPECT_GT((*engine)->stats().mostPerRun, 1);
}

TEST(Engine, WithoutBatchInvarianceARequestAloneIsTheSessions) {
  TempDir dir;
  std::shared_ptr<LoadedModel> model = tinyModel(dir);
  ASSERT_TRUE(model);
  checkFastEngine(model, 8, request);
}

TEST(Engine, WithoutBatchInvarianceMixtureOfExpertsRequestsAloneAreTheSessions) {
  TempDir dir;
  std::shared_ptr<LoadedModel> model = llada2Model(dir);
  ASSERT_TRUE(model);
  checkFastEngine(model, 4, moeRequest);
}

TEST(Engine, ABadRequestFailsAloneByName) {
  TempDir dir;
  std::shared_ptr<LoadedModel> model = tinyModel(dir);
  ASSERT_TRUE(model);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::create(model);
  ASSERT_TRUE(engine) << engine.status().message();
  GenerateRequest bad = request(1);
  bad.knobs["gen_length"] = int64_t(7); // not a multiple of block_length
  StatusOr<GenerateResult> out = (*engine)->generate(bad);
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("gen_length"), std::string::npos)
      << out.status().message();
  // The engine still serves.
  EXPECT_TRUE((*engine)->generate(request(2)));
}

// Pages of 4 tokens: request(i) needs at most 5 (11 prompt tokens and 8 generated).
std::unique_ptr<Engine> tinyEngine(std::shared_ptr<LoadedModel> model, int64_t pages,
                                   int64_t maxRunning = 0, int64_t maxWaiting = 0) {
  EngineOptions options;
  options.session.batchInvariant = true; // the tests compare with what a request gets alone
  options.session.threads = 2;
  options.session.kvPages = pages;
  options.session.kvPageTokens = 4;
  options.tokensPerForward = 64;
  options.maxRunning = maxRunning;
  options.maxWaiting = maxWaiting;
  StatusOr<std::unique_ptr<Engine>> engine = Engine::create(std::move(model), options);
  EXPECT_TRUE(engine) << engine.status().message();
  return engine ? std::move(*engine) : nullptr;
}

TEST(Engine, APoolForFourRequestsAnswersSixteenAsAlone) {
  TempDir dir;
  std::shared_ptr<LoadedModel> model = tinyModel(dir);
  ASSERT_TRUE(model);
  constexpr int kRequests = 16;
  std::unique_ptr<Engine> roomy = tinyEngine(model, 256);
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < kRequests; ++i) {
    StatusOr<GenerateResult> out = roomy->generate(request(i));
    ASSERT_TRUE(out) << out.status().message();
    alone.push_back(out->outputIds);
  }
  std::unique_ptr<Engine> engine = tinyEngine(model, 20);
  std::vector<std::string> errors;
  std::atomic<int64_t> mostReserved{0};
  const std::vector<std::vector<int32_t>> together =
      generateConcurrently(*engine, kRequests, errors, [&](int) {
        const int64_t reserved = engine->stats().kvPagesReserved;
        int64_t most = mostReserved.load();
        while (reserved > most && !mostReserved.compare_exchange_weak(most, reserved)) {
        }
      });
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(errors[i], "") << "request " << i;
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
  }
  const SchedulerStats stats = engine->stats();
  EXPECT_EQ(stats.admitted, kRequests);
  EXPECT_LE(mostReserved.load(), 20);
  EXPECT_EQ(stats.kvPagesReserved, 0);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
}

TEST(Engine, ARequestLargerThanThePoolIsRefusedByName) {
  TempDir dir;
  std::unique_ptr<Engine> engine = tinyEngine(tinyModel(dir), 3);
  ASSERT_TRUE(engine);
  StatusOr<GenerateResult> out = engine->generate(request(3)); // 11 + 8 tokens: 5 pages
  ASSERT_FALSE(out);
  EXPECT_EQ(out.status().code(), StatusCode::contextLengthExceeded);
  EXPECT_EQ(out.status().message(), "the request needs 5 KV pages of 4 tokens; the pool has 3");
  EXPECT_EQ(engine->stats().refused, 1);
}

// Request 0 holds the only running place until `release`; the next waits, the one after finds
// the queue full.
TEST(Engine, AFullQueueRefusesAndTheWaitingRequestStillRuns) {
  TempDir dir;
  std::unique_ptr<Engine> engine = tinyEngine(tinyModel(dir), 64, /*maxRunning=*/1,
                                              /*maxWaiting=*/1);
  ASSERT_TRUE(engine);
  std::atomic<bool> release{false};
  std::thread first([&] {
    StatusOr<GenerateResult> out = engine->generate(request(0), [&](const StreamedBlock &) {
      while (!release.load())
        std::this_thread::yield();
    });
    EXPECT_TRUE(out) << out.status().message();
  });
  while (engine->stats().running == 0)
    std::this_thread::yield();
  std::thread second([&] { EXPECT_TRUE(engine->generate(request(1))); });
  while (engine->stats().waiting == 0)
    std::this_thread::yield();
  StatusOr<GenerateResult> third = engine->generate(request(2));
  ASSERT_FALSE(third);
  EXPECT_EQ(third.status().code(), StatusCode::queueFull);
  EXPECT_EQ(third.status().message(), "the waiting queue is full (1 requests wait for KV pages)");
  release = true;
  first.join();
  second.join();
  EXPECT_EQ(engine->stats().admitted, 2);
}

TEST(Engine, ACancelledRequestStopsAndFreesItsPages) {
  TempDir dir;
  std::unique_ptr<Engine> engine = tinyEngine(tinyModel(dir), 64, /*maxRunning=*/1);
  ASSERT_TRUE(engine);
  // Cancelled after its first committed block: it stops at its next forward.
  std::atomic<bool> cancelled{false};
  int64_t blocks = 0;
  StatusOr<GenerateResult> out = engine->generate(
      request(1),
      [&](const StreamedBlock &) {
        ++blocks;
        cancelled = true;
      },
      &cancelled);
  ASSERT_FALSE(out);
  EXPECT_EQ(out.status().code(), StatusCode::cancelled) << out.status().message();
  EXPECT_EQ(blocks, 1);
  EXPECT_EQ(engine->stats().kvPagesReserved, 0);
  EXPECT_EQ(engine->stats().kvPagesInUse, 0);

  // Cancelled while it waits for admission behind a request that holds the only place.
  std::atomic<bool> release{false}, cancelWaiting{false};
  std::thread first([&] {
    EXPECT_TRUE(engine->generate(request(0), [&](const StreamedBlock &) {
      while (!release.load())
        std::this_thread::yield();
    }));
  });
  while (engine->stats().running == 0)
    std::this_thread::yield();
  std::thread waiting([&] {
    StatusOr<GenerateResult> out = engine->generate(request(2), {}, &cancelWaiting);
    ASSERT_FALSE(out);
    EXPECT_EQ(out.status().code(), StatusCode::cancelled);
  });
  while (engine->stats().waiting == 0)
    std::this_thread::yield();
  cancelWaiting = true;
  waiting.join();
  release = true;
  first.join();
  EXPECT_TRUE(engine->generate(request(3))) << "the engine still serves";
}

TEST(Engine, ShutdownDrainsAndThenRefuses) {
  TempDir dir;
  std::unique_ptr<Engine> engine = tinyEngine(tinyModel(dir), 64);
  ASSERT_TRUE(engine);
  std::atomic<bool> started{false};
  StatusOr<GenerateResult> running = Status::error("not run");
  std::thread request0([&] {
    running = engine->generate(request(0), [&](const StreamedBlock &) { started = true; });
  });
  while (!started.load())
    std::this_thread::yield();
  engine->shutdown();
  EXPECT_EQ(engine->stats().running, 0) << "shutdown returned with a request running";
  request0.join();
  EXPECT_TRUE(running) << "the running request finished: " << running.status().message();
  StatusOr<GenerateResult> late = engine->generate(request(1));
  ASSERT_FALSE(late);
  EXPECT_EQ(late.status().code(), StatusCode::unavailable);
}

} // namespace
} // namespace dlm::engine
