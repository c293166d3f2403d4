// The CPU forward against a double-precision forward of the same tiny model, for each
// architectural variant the contract allows, plus the KV-cache paths the decoding policies use.
#include "runtime/cpu/CpuBackend.h"

#include "tests/runtime/model/TinyModel.h"

#include <atomic>
#include <gtest/gtest.h>
#include <mutex>
#include <set>
#include <thread>

#include <algorithm>
#include <cmath>

namespace dlm::cpu {
namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;

struct Variant {
  const char *name;
  TinyModelOptions options;
};

TinyModelOptions with(std::function<void(TinyModelOptions &)> change) {
  TinyModelOptions options;
  change(options);
  return options;
}

std::vector<Variant> variants() {
  return {
      {"llada_f32", {}},
      {"llada_bf16", with([](TinyModelOptions &o) { o.bf16 = true; })},
      {"tied_mha", with([](TinyModelOptions &o) {
         o.tied = true;
         o.kvHeads = 4;
       })},
      {"dream_bias_shift", with([](TinyModelOptions &o) {
         o.qkvBias = true;
         o.logitShift = true;
         o.embeddingSize = 40;
       })},
      {"qwen3_qknorm_causal", with([](TinyModelOptions &o) {
         o.qkNorm = true;
         o.causal = true;
         o.tied = true;
       })},
      {"llama_causal_gqa", with([](TinyModelOptions &o) {
         o.causal = true;
         o.heads = 4;
         o.kvHeads = 1;
       })},
  };
}

class CpuBackendTest : public ::testing::TestWithParam<Variant> {
public: // checkPackedSequences reads the model and ids()
  void SetUp() override {
    tiny = std::make_unique<TinyModel>(GetParam().options);
    dlm::testing::LoadedTinyModel loaded = dlm::testing::writeAndLoad(*tiny, dir.file("tiny.dlm"));
    ASSERT_TRUE(loaded.weights);
    reader = std::move(loaded.reader);
    weights = loaded.weights;
  }

  std::unique_ptr<CpuBackend> backend(int threads = 2, int pageTokens = 4, int64_t pages = 0,
                                      bool batchInvariant = false) {
    BackendOptions options;
    options.threads = threads;
    options.batchInvariant = batchInvariant;
    options.kvPageTokens = pageTokens;
    options.kvPages = pages;
    StatusOr<std::unique_ptr<CpuBackend>> created =
        CpuBackend::create(weights, reader->findKernelTarget("cpu")->kernels,
                           tiny->options().maxPositions, options);
    EXPECT_TRUE(created.isOk()) << created.status().message();
    return created ? std::move(*created) : nullptr;
  }

  std::vector<int32_t> ids(int64_t n) const {
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < n; ++i)
      tokens.push_back(static_cast<int32_t>((i * 7 + 3) % tiny->options().vocab));
    return tokens;
  }

  TempDir dir;
  std::unique_ptr<TinyModel> tiny;
  std::unique_ptr<artifact::ArtifactReader> reader;
  std::shared_ptr<const model::ModelWeights> weights;
};

// max |a - b| / max |b|
double relativeError(const float *actual, const double *expected, int64_t count) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < count; ++i) {
    worst = std::max(worst, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return worst / scale;
}

// A decode step's rows (DecodeModel::forEachRow) go over the pool's threads, each row once,
// whatever the row count against the threads.
TEST_P(CpuBackendTest, ForEachRowRunsEveryRowOnceOverThePool) {
  for (int threads : {1, 2, 3})
    for (int64_t rows : {int64_t(0), int64_t(1), int64_t(2), int64_t(37)}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(rows) + " rows");
      std::unique_ptr<CpuBackend> cpu = backend(threads);
      ASSERT_TRUE(cpu);
      std::vector<std::atomic<int>> visits(static_cast<size_t>(rows));
      std::mutex mutex;
      std::set<std::thread::id> used;
      auto row = [&](int64_t j) {
        ++visits[static_cast<size_t>(j)];
        std::lock_guard<std::mutex> lock(mutex);
        used.insert(std::this_thread::get_id());
      };
      cpu->forEachRow(rows, sampling::RowBody(row));
      for (int64_t j = 0; j < rows; ++j)
        EXPECT_EQ(visits[static_cast<size_t>(j)].load(), 1) << "row " << j;
      EXPECT_LE(used.size(), static_cast<size_t>(std::min<int64_t>(threads, rows)));
      if (threads > 1 && rows > 1)
        EXPECT_GT(used.size(), 1u) << "the rows stayed on one thread";
    }
}

TEST_P(CpuBackendTest, FullForwardMatchesTheDoubleReference) {
  const int64_t n = 13; // crosses page boundaries (4 tokens per page)
  std::unique_ptr<CpuBackend> cpu = backend();
  ASSERT_TRUE(cpu);
  ASSERT_TRUE(cpu->reserve(n, n).isOk());
  const std::vector<int32_t> tokens = ids(n);
  StatusOr<sampling::LogitsView> logits = cpu->forwardFull(tokens.data(), n, 0, {0, n});
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  ASSERT_EQ(logits->rows, n);
  ASSERT_EQ(logits->vocab, tiny->options().vocab);
  const std::vector<double> expected = tiny->referenceLogits(tokens);
  EXPECT_LT(relativeError(logits->data, expected.data(), n * logits->vocab), 2e-5);
}

// The batch-invariant GEMMs compute the same model: their logits against the double reference
// (a padded LM head, biases and folded residuals included).
TEST_P(CpuBackendTest, BatchInvariantForwardMatchesTheDoubleReference) {
  const int64_t n = 13;
  std::unique_ptr<CpuBackend> cpu = backend(2, 4, 0, true);
  ASSERT_TRUE(cpu);
  ASSERT_TRUE(cpu->reserve(n, n).isOk());
  const std::vector<int32_t> tokens = ids(n);
  StatusOr<sampling::LogitsView> logits = cpu->forwardFull(tokens.data(), n, 0, {0, n});
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  const std::vector<double> expected = tiny->referenceLogits(tokens);
  EXPECT_LT(relativeError(logits->data, expected.data(), n * logits->vocab), 2e-5);
}

// A packed run refused before its kernels (here a token outside the vocabulary in another part)
// leaves every other part's sequence as it was, an extend's rewritten slots and a window's whole
// sequence included.
TEST_P(CpuBackendTest, ARefusedPackedRunRestoresTheOtherSequences) {
  using Mode = sampling::ForwardSpec::Mode;
  std::unique_ptr<CpuBackend> cpu = backend(2, 4, 64);
  ASSERT_TRUE(cpu->reserve(40, 40).isOk());
  const std::vector<int32_t> a = ids(12);
  kv::SequenceId sa = *cpu->createSequence(), sb = *cpu->createSequence();
  ASSERT_TRUE(
      cpu->forwardBatch("", {{sa, sampling::ForwardSpec::of(Mode::full, a.data(), 8, 8, {0, 0})}})
          .isOk());
  sampling::ForwardSpec extend = sampling::ForwardSpec::of(Mode::extend, a.data(), 12, 8, {0, 4});
  extend.first = 5;
  StatusOr<sampling::LogitsView> before = cpu->forwardBatch("", {{sa, extend}});
  ASSERT_TRUE(before.isOk()) << before.status().message();
  const std::vector<float> want(before->data, before->data + before->rows * before->vocab);
  std::vector<int32_t> bad = ids(4);
  bad[2] = static_cast<int32_t>(tiny->options().embeddingSize + 5);
  StatusOr<sampling::LogitsView> refused = cpu->forwardBatch(
      "", {{sa, extend}, {sb, sampling::ForwardSpec::of(Mode::full, bad.data(), 4, 4, {0, 1})}});
  ASSERT_FALSE(refused.isOk());
  EXPECT_EQ(cpu->kvCache().length(sa), 8);
  EXPECT_EQ(cpu->kvCache().committedLength(sa), 8);
  StatusOr<sampling::LogitsView> again = cpu->forwardBatch("", {{sa, extend}});
  ASSERT_TRUE(again.isOk()) << again.status().message();
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(again->data[i], want[i]) << i;

  // A window (the dual cache) keeps the whole sequence it was refused over, and runs after.
  const sampling::ForwardSpec window = sampling::ForwardSpec::window(a.data(), 8, 3, 6, {0, 3});
  refused = cpu->forwardBatch(
      "", {{sa, window}, {sb, sampling::ForwardSpec::of(Mode::full, bad.data(), 4, 4, {0, 1})}});
  ASSERT_FALSE(refused.isOk());
  EXPECT_EQ(cpu->kvCache().length(sa), 8);
  EXPECT_TRUE(cpu->forwardBatch("", {{sa, window}}).isOk());
}

TEST_P(CpuBackendTest, RowSubsetsAreTheSameRows) {
  const int64_t n = 9;
  std::unique_ptr<CpuBackend> cpu = backend();
  ASSERT_TRUE(cpu->reserve(n, n).isOk());
  const std::vector<int32_t> tokens = ids(n);
  StatusOr<sampling::LogitsView> all = cpu->forwardFull(tokens.data(), n, 0, {0, n});
  ASSERT_TRUE(all.isOk());
  std::vector<float> copy(all->data, all->data + n * all->vocab);
  StatusOr<sampling::LogitsView> some = cpu->forwardFull(tokens.data(), n, 0, {3, 7});
  ASSERT_TRUE(some.isOk());
  for (int64_t i = 0; i < 4 * some->vocab; ++i)
    ASSERT_NEAR(some->data[i], copy[3 * some->vocab + i], 1e-5f);
}

TEST_P(CpuBackendTest, CachedForwardReproducesTheFullForward) {
  // With the tokens unchanged since the full forward, the cached prefix holds exactly what the
  // full forward computed, so the chunk's rows must agree.
  const int64_t n = 14, keep = 6;
  std::unique_ptr<CpuBackend> cpu = backend();
  ASSERT_TRUE(cpu->reserve(n, n).isOk());
  const std::vector<int32_t> tokens = ids(n);
  StatusOr<sampling::LogitsView> full = cpu->forwardFull(tokens.data(), n, keep, {0, n});
  ASSERT_TRUE(full.isOk()) << full.status().message();
  std::vector<float> copy(full->data, full->data + n * full->vocab);
  EXPECT_EQ(cpu->kvCache().freePages(), cpu->kvCache().pageCount() - 2);

  StatusOr<sampling::LogitsView> cached = cpu->forwardCached(tokens.data(), n, keep, {0, n - keep});
  ASSERT_TRUE(cached.isOk()) << cached.status().message();
  // A shifting model's chunk row 0 is its own prediction, not the shifted one.
  const int64_t first = tiny->options().logitShift ? 1 : 0;
  for (int64_t r = first; r < n - keep; ++r)
    for (int64_t v = 0; v < cached->vocab; ++v)
      ASSERT_NEAR(cached->row(r)[v], copy[(keep + r) * cached->vocab + v], 2e-5f)
          << "row " << r << " token " << v;
  // The cache is back to the prefix.
  EXPECT_EQ(cpu->kvCache().freePages(), cpu->kvCache().pageCount() - 2);
}

// The dual cache's window forward: with the cache filled by a full forward of the same tokens,
// the window's rows are that forward's rows (and the double reference's), the window crossing
// page boundaries; the cache keeps all of [0, n) and the same pages.
TEST_P(CpuBackendTest, WindowForwardOverAFreshCacheReproducesTheFullForward) {
  const int64_t n = 14, feedBegin = 5, feedEnd = 11;
  std::unique_ptr<CpuBackend> cpu = backend();
  ASSERT_TRUE(cpu->reserve(n, n).isOk());
  const std::vector<int32_t> tokens = ids(n);
  StatusOr<sampling::LogitsView> full = cpu->forwardFull(tokens.data(), n, n, {0, n});
  ASSERT_TRUE(full.isOk()) << full.status().message();
  std::vector<float> copy(full->data, full->data + n * full->vocab);
  const int32_t pages = cpu->kvCache().pageCount() - cpu->kvCache().freePages();
  EXPECT_EQ(cpu->kvCache().length(0), n);

  StatusOr<sampling::LogitsView> window = cpu->forward(sampling::ForwardSpec::window(
      tokens.data(), n, feedBegin, feedEnd, {0, feedEnd - feedBegin}));
  ASSERT_TRUE(window.isOk()) << window.status().message();
  ASSERT_EQ(window->rows, feedEnd - feedBegin);
  const std::vector<double> expected = tiny->referenceLogits(tokens);
  // A shifting model's row 0 predicts from its own position, as in a cached forward.
  const int64_t first = tiny->options().logitShift ? 1 : 0;
  const int64_t vocab = window->vocab;
  for (int64_t r = first; r < window->rows; ++r) {
    for (int64_t v = 0; v < vocab; ++v)
      ASSERT_NEAR(window->row(r)[v], copy[(feedBegin + r) * vocab + v], 2e-5f)
          << "row " << r << " token " << v;
    EXPECT_LT(relativeError(window->row(r), &expected[(feedBegin + r) * vocab], vocab), 2e-5)
        << "row " << r;
  }
  EXPECT_EQ(cpu->kvCache().length(0), n);
  EXPECT_EQ(cpu->kvCache().pageCount() - cpu->kvCache().freePages(), pages);
}

// The fed tokens' K/V replace their range in the cache: after a window of other tokens, a window
// of the original ones over the same range reads none of what the first wrote.
TEST_P(CpuBackendTest, WindowForwardOverwritesItsRangeInPlace) {
  const int64_t n = 13, feedBegin = 3, feedEnd = 9;
  const sampling::LogitRows rows{0, feedEnd - feedBegin};
  std::unique_ptr<CpuBackend> cpu = backend();
  ASSERT_TRUE(cpu->reserve(n, n).isOk());
  const std::vector<int32_t> tokens = ids(n);
  std::vector<int32_t> other = tokens;
  for (int64_t i = feedBegin; i < feedEnd; ++i)
    other[i] = static_cast<int32_t>((other[i] + 5) % tiny->options().vocab);
  ASSERT_TRUE(cpu->forwardFull(tokens.data(), n, n, {0, 0}).isOk());
  StatusOr<sampling::LogitsView> first =
      cpu->forward(sampling::ForwardSpec::window(tokens.data(), n, feedBegin, feedEnd, rows));
  ASSERT_TRUE(first.isOk()) << first.status().message();
  const std::vector<float> expected(first->data, first->data + rows.count() * first->vocab);
  StatusOr<sampling::LogitsView> changed =
      cpu->forward(sampling::ForwardSpec::window(other.data(), n, feedBegin, feedEnd, rows));
  ASSERT_TRUE(changed.isOk()) << changed.status().message();
  EXPECT_FALSE(std::equal(expected.begin(), expected.end(), changed->data));
  StatusOr<sampling::LogitsView> again =
      cpu->forward(sampling::ForwardSpec::window(tokens.data(), n, feedBegin, feedEnd, rows));
  ASSERT_TRUE(again.isOk()) << again.status().message();
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), again->data));
}

// What follows the window comes from the cache: stale there, the window's logits change, unless
// the model is causal (its queries never see later positions).
TEST_P(CpuBackendTest, WindowForwardReadsTheCachedSuffix) {
  const int64_t n = 12, feedBegin = 2, feedEnd = 7;
  const sampling::LogitRows rows{0, feedEnd - feedBegin};
  std::unique_ptr<CpuBackend> cpu = backend();
  ASSERT_TRUE(cpu->reserve(n, n).isOk());
  const std::vector<int32_t> tokens = ids(n);
  std::vector<int32_t> staleSuffix = tokens;
  for (int64_t i = feedEnd; i < n; ++i)
    staleSuffix[i] = static_cast<int32_t>((staleSuffix[i] + 3) % tiny->options().vocab);
  auto window = [&](const std::vector<int32_t> &cached) {
    EXPECT_TRUE(cpu->forwardFull(cached.data(), n, n, {0, 0}).isOk());
    StatusOr<sampling::LogitsView> logits =
        cpu->forward(sampling::ForwardSpec::window(tokens.data(), n, feedBegin, feedEnd, rows));
    EXPECT_TRUE(logits.isOk()) << logits.status().message();
    return logits ? std::vector<float>(logits->data, logits->data + rows.count() * logits->vocab)
                  : std::vector<float>{};
  };
  const std::vector<float> fresh = window(tokens), stale = window(staleSuffix);
  ASSERT_EQ(fresh.size(), stale.size());
  if (tiny->options().causal)
    EXPECT_EQ(fresh, stale);
  else
    EXPECT_NE(fresh, stale);
}

TEST_P(CpuBackendTest, ThreadCountDoesNotChangeTheResult) {
  const int64_t n = 11;
  const std::vector<int32_t> tokens = ids(n);
  std::unique_ptr<CpuBackend> one = backend(1), two = backend(2);
  ASSERT_TRUE(one->reserve(n, n).isOk());
  ASSERT_TRUE(two->reserve(n, n).isOk());
  StatusOr<sampling::LogitsView> a = one->forwardFull(tokens.data(), n, 0, {0, n});
  std::vector<float> copy(a->data, a->data + n * a->vocab);
  StatusOr<sampling::LogitsView> b = two->forwardFull(tokens.data(), n, 0, {0, n});
  ASSERT_TRUE(b.isOk());
  EXPECT_TRUE(std::equal(copy.begin(), copy.end(), b->data));
}

// Packed forwards over several sequences (docs/design/serving.md §2): three requests in
// different phases share one run (a prefill, a cached block over its own prefix, an appending
// step) and each gets the rows it would get alone (within GEMM rounding: oneDNN's sgemm is not
// batch-invariant), and each sequence's cache ends as its mode leaves it.
// With batch-invariant kernels (BackendOptions::batchInvariant) the rows are bit-identical.
void checkPackedSequences(CpuBackendTest &test, std::unique_ptr<CpuBackend> cpu, float bound);

TEST_P(CpuBackendTest, PackedSequencesGetTheirOwnRows) {
  checkPackedSequences(*this, backend(2, 4, 64), 2e-5f);
}

TEST_P(CpuBackendTest, BatchInvariantPackedSequencesGetTheirOwnBits) {
  checkPackedSequences(*this, backend(2, 4, 64, true), 0.0f);
}

void checkPackedSequences(CpuBackendTest &test, std::unique_ptr<CpuBackend> cpu, float bound) {
  using Mode = sampling::ForwardSpec::Mode;
  const int64_t vocab = test.tiny->options().vocab;
  auto ids = [&](int64_t n) { return test.ids(n); };
  ASSERT_TRUE(cpu);
  ASSERT_TRUE(cpu->reserve(40, 40).isOk());
  const std::vector<int32_t> a = ids(11);
  std::vector<int32_t> b = ids(13), c = ids(9);
  std::rotate(b.begin(), b.begin() + 3, b.end());
  std::rotate(c.begin(), c.begin() + 5, c.end());
  // Alone, on fresh sequences: a full; b's prefix 7 then a cached block; c's prefix 6 then an
  // append of the rest.
  kv::SequenceId sa = *cpu->createSequence(), sb = *cpu->createSequence(),
                 sc = *cpu->createSequence();
  auto alone = [&](kv::SequenceId s, const sampling::ForwardSpec &spec) {
    StatusOr<sampling::LogitsView> out = cpu->forwardBatch("", {{s, spec}});
    EXPECT_TRUE(out.isOk()) << out.status().message();
    return out ? std::vector<float>(out->data, out->data + out->rows * out->vocab)
               : std::vector<float>();
  };
  const auto fullA = sampling::ForwardSpec::of(Mode::full, a.data(), 11, 11, {0, 11});
  const auto prefixB = sampling::ForwardSpec::of(Mode::full, b.data(), 7, 7, {0, 0});
  const auto blockB = sampling::ForwardSpec::of(Mode::cached, b.data(), 13, 7, {0, 6});
  const auto prefixC = sampling::ForwardSpec::of(Mode::full, c.data(), 6, 6, {0, 0});
  const auto stepC = sampling::ForwardSpec::of(Mode::append, c.data(), 9, 6, {2, 3});
  const std::vector<float> wantA = alone(sa, fullA);
  alone(sb, prefixB);
  const std::vector<float> wantB = alone(sb, blockB);
  alone(sc, prefixC);
  const std::vector<float> wantC = alone(sc, stepC);
  ASSERT_EQ(wantA.size(), size_t(11 * vocab));
  ASSERT_EQ(wantB.size(), size_t(6 * vocab));
  ASSERT_EQ(wantC.size(), size_t(1 * vocab));

  // Together, after putting each sequence back where it was before its forward.
  ASSERT_TRUE(cpu->removeSequence(sa).isOk());
  ASSERT_TRUE(cpu->forwardBatch("", {{sc, sampling::ForwardSpec::of(Mode::full, c.data(), 6, 6,
                                                                     {0, 0})}})
                  .isOk());
  kv::SequenceId sa2 = *cpu->createSequence();
  StatusOr<sampling::LogitsView> packed =
      cpu->forwardBatch("", {{sc, stepC}, {sa2, fullA}, {sb, blockB}});
  ASSERT_TRUE(packed.isOk()) << packed.status().message();
  ASSERT_EQ(packed->rows, 1 + 11 + 6);
  const std::vector<const std::vector<float> *> want = {&wantC, &wantA, &wantB};
  int64_t row = 0;
  for (const std::vector<float> *w : want)
    for (size_t i = 0; i < w->size(); ++i, row += (i % vocab == 0))
      ASSERT_NEAR(packed->data[row * vocab + static_cast<int64_t>(i % vocab)], (*w)[i], bound)
          << "packed row " << row;
  EXPECT_EQ(cpu->kvCache().length(sc), 9);  // appended and committed
  EXPECT_EQ(cpu->kvCache().length(sa2), 11); // kept
  EXPECT_EQ(cpu->kvCache().length(sb), 7);  // a cached block leaves the prefix
  // A mismatched cache length names the part and leaves the others as they were.
  StatusOr<sampling::LogitsView> bad = cpu->forwardBatch("", {{sb, blockB}, {sc, stepC}});
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("append forward: the KV cache holds 9 tokens"),
            std::string::npos)
      << bad.status().message();
  EXPECT_EQ(cpu->kvCache().length(sb), 7);
}

INSTANTIATE_TEST_SUITE_P(Variants, CpuBackendTest, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant> &info) {
                           return std::string(info.param.name);
                         });

class CpuBackendErrorTest : public CpuBackendTest {};

TEST_P(CpuBackendErrorTest, KvExhaustionIsReportedNotCrashed) {
  std::unique_ptr<CpuBackend> cpu = backend(2, 4, /*pages=*/2);
  ASSERT_TRUE(cpu->reserve(10, 10).isOk());
  const std::vector<int32_t> tokens = ids(10);
  StatusOr<sampling::LogitsView> logits = cpu->forwardFull(tokens.data(), 10, 0, {0, 10});
  ASSERT_FALSE(logits.isOk());
  EXPECT_EQ(logits.status().message(), "KV cache exhausted: need 3 pages, 2 free");
  // Nothing leaked: a forward that fits still runs.
  EXPECT_TRUE(cpu->forwardFull(tokens.data(), 8, 0, {0, 8}).isOk());
}

TEST_P(CpuBackendErrorTest, BadInputsAreNamed) {
  std::unique_ptr<CpuBackend> cpu = backend();
  ASSERT_TRUE(cpu->reserve(8, 2).isOk());
  std::vector<int32_t> tokens = ids(8);
  EXPECT_EQ(cpu->forwardFull(tokens.data(), 8, 0, {0, 8}).status().message(),
            "forward: 8 logit rows exceed the reserved 2");
  EXPECT_EQ(cpu->forwardFull(tokens.data(), 8, 0, {6, 9}).status().message(),
            "forward: logit rows [6, 9) are outside the 8 tokens fed");
  tokens[3] = 48;
  EXPECT_EQ(cpu->forwardFull(tokens.data(), 8, 0, {0, 1}).status().message(),
            "forward: token id 48 is outside [0, 48)");
  EXPECT_EQ(cpu->forwardCached(tokens.data(), 8, 3, {0, 1}).status().message(),
            "cached forward: the KV cache holds 0 tokens, the caller expected 3 of 8");
  EXPECT_EQ(cpu->forward(sampling::ForwardSpec::window(tokens.data(), 8, 3, 5, {0, 1}))
                .status()
                .message(),
            "window forward: the KV cache holds 0 tokens, the caller expected all 8");
  tokens[3] = 1;
  ASSERT_TRUE(cpu->forwardFull(tokens.data(), 8, 8, {0, 0}).isOk());
  EXPECT_EQ(cpu->forward(sampling::ForwardSpec::window(tokens.data(), 8, 6, 9, {0, 1}))
                .status()
                .message(),
            "window forward: the fed window [6, 9) is outside the 8 cached tokens");
  EXPECT_EQ(cpu->forwardCached(tokens.data(), 8, 3, {0, 1}).status().message(),
            "cached forward: the KV cache holds 8 tokens, the caller expected 3 of 8");
  // A window refused before its kernels ran (here for its rows; in a packed run, for another
  // part's error) keeps the cache, which it did not write: the next window runs over it. (One
  // that fails once its kernels wrote forgets the sequence, as a failed full forward does.)
  EXPECT_EQ(cpu->forward(sampling::ForwardSpec::window(tokens.data(), 8, 5, 7, {0, 3}))
                .status()
                .message(),
            "forward: logit rows [0, 3) are outside the 2 tokens fed");
  EXPECT_EQ(cpu->kvCache().length(0), 8);
  EXPECT_TRUE(cpu->forward(sampling::ForwardSpec::window(tokens.data(), 8, 5, 7, {0, 1})).isOk());
  EXPECT_EQ(cpu->reserve(1000, 1).message(),
            "a sequence of 1000 tokens exceeds the session's maximum of 128");
}

INSTANTIATE_TEST_SUITE_P(Default, CpuBackendErrorTest, ::testing::Values(Variant{"llada_f32", {}}),
                         [](const ::testing::TestParamInfo<Variant> &info) {
                           return std::string(info.param.name);
                         });

} // namespace
} // namespace dlm::cpu
