// The cuda backend on the emulated driver and cuBLASLt, on tiny artifacts carrying generated f32
// kernels: full, cached and window forwards' logits within 1e-4 (relative to the
// largest logit) of the double-precision reference forward (tests/runtime/model/TinyModel.h) for
// each architectural variant; CUDA graph replays bit-identical to eager forwards; the KV cache
// left as the contract says; named errors for artifacts it cannot run. Cached and window
// forwards over a new canvas against the CPU backend on the same artifact (and whole
// generations: tests/runtime/e2e/check_cuda_emu_matches_cpu.py).
#include "runtime/cuda/CudaBackend.h"

#include "compiler/codegen/Kernels.h"
#include "compiler/codegen/ModelKernels.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cuda/emu/EmuDriver.h"
#include "runtime/engine/Engine.h"
#include "tests/runtime/model/TinyModel.h"
#include "tests/runtime/program/ShippedDecodeProgram.h"

#include "runtime/program/DecodeInterpreter.h"
#include "tests/runtime/sampling/legacy/LegacyDecoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include <unistd.h>

namespace dlm::cuda {
namespace {

using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;

constexpr int64_t kPageSize = 4;
// The block length the decoding kernels (sampler, accept, renoise) are generated for.
constexpr int64_t kLoopBlock = 4;

// The generated kernels a TinyModel needs, as an emulated-target record set (source only: the
// emulated driver compiles the source; no NVRTC needed), and the model's kernel program with
// each record naming its kernel, as dlmc compiles them (compiler/codegen/ModelKernels.cpp).
struct GeneratedKernels {
  std::vector<codegen::KernelSource> sources;
  artifact::KernelTarget program;
  artifact::KernelTarget target;
};

std::unique_ptr<GeneratedKernels> generateKernels(TinyModelOptions &o,
                                                  codegen::ElementType element) {
  auto kernels = std::make_unique<GeneratedKernels>();
  auto add = [&](StatusOr<codegen::KernelSource> source) {
    EXPECT_TRUE(source.isOk()) << source.status().message();
    if (source)
      kernels->sources.push_back(std::move(*source));
  };
  o.kernelTargets.clear();
  o.cpuRecords = true;
  const TinyModel plain(o);
  kernels->program = plain.cpuKernelTarget();
  codegen::ModelKernelOptions options;
  options.element = element;
  options.pageSize = kPageSize;
  StatusOr<std::vector<codegen::KernelSource>> forward =
      codegen::kernelsForProgram(kernels->program.kernels, plain.shapes(), options);
  EXPECT_TRUE(forward.isOk()) << forward.status().message();
  if (forward)
    kernels->sources = std::move(*forward);
  // The device block loop's kernels for both policies at blocks of kLoopBlock, as dlmc chooses
  // them (compiler/codegen/ModelKernels.cpp); loaded only when a loop runs.
  for (codegen::SamplerConfidence confidence :
       {codegen::SamplerConfidence::unitTemperature, codegen::SamplerConfidence::atTemperature}) {
    codegen::SamplerParams sampler;
    sampler.vocab = o.vocab;
    sampler.confidence = confidence;
    add(codegen::generateSampler(sampler));
  }
  for (auto [rule, masked] : {std::pair(codegen::AcceptRule::topK, true),
                              std::pair(codegen::AcceptRule::confidenceThreshold, true),
                              std::pair(codegen::AcceptRule::entropyBound, false)})
    add(codegen::generateAccept({kLoopBlock, rule, masked}));
  add(codegen::generateBlockLoopGate({kLoopBlock}));
  add(codegen::generateRenoise({o.vocab, codegen::NoiseKind::maskToken, false,
                                codegen::RenoiseCandidates::maskedOnly}));
  add(codegen::generateRenoise({o.vocab, codegen::NoiseKind::maskToken, false,
                                codegen::RenoiseCandidates::everyRejected}));
  add(codegen::generateRenoise({o.vocab, codegen::NoiseKind::uniform, false,
                                codegen::RenoiseCandidates::everyRejected}));
  kernels->target.target = "sm_90";
  for (const codegen::KernelSource &source : kernels->sources) {
    artifact::Kernel record;
    record.name = source.name;
    record.kind = source.kind;
    record.source = source.source;
    record.parameters = source.specialisation;
    record.parameters["block_threads"] = static_cast<int64_t>(source.blockThreads);
    kernels->target.kernels.push_back(std::move(record));
  }
  // The artifact carries the program and the kernels it names (and the decoding kernels).
  o.kernelTargets = {kernels->program, kernels->target};
  o.cpuRecords = false;
  return kernels;
}

struct Variant {
  const char *name;
  std::function<void(TinyModelOptions &)> change;
};

// Head dims of 16 and more: the attention kernel reads rows in 16-byte vectors.
TinyModelOptions baseOptions() {
  TinyModelOptions o;
  o.hidden = 32;
  o.heads = 4;
  o.kvHeads = 2;
  o.headDim = 16;
  o.intermediate = 48;
  return o;
}

std::vector<Variant> variants() {
  return {
      {"llada_f32", [](TinyModelOptions &) {}},
      {"llada_bf16_weights", [](TinyModelOptions &o) { o.bf16 = true; }},
      {"tied_mha",
       [](TinyModelOptions &o) {
         o.tied = true;
         o.kvHeads = 4;
       }},
      {"dream_bias_shift",
       [](TinyModelOptions &o) {
         o.qkvBias = true;
         o.logitShift = true;
         o.embeddingSize = 40;
       }},
      {"qwen3_qknorm_causal",
       [](TinyModelOptions &o) {
         o.qkNorm = true;
         o.causal = true;
         o.tied = true;
       }},
      {"llama_causal_gqa",
       [](TinyModelOptions &o) {
         o.causal = true;
         o.kvHeads = 1;
       }},
  };
}

// The emulated kernels are cached under the build tree (unless the caller chose a directory),
// so reruns do not recompile them.
void pointEmulatorCacheAtBuildTree() { ::setenv("DLM_EMU_CACHE_DIR", DLM_TEST_EMU_CACHE_DIR, 0); }

// `tiny` written to `dir`/`name`, opened, and a CudaBackend over it on the emulated driver (the
// reader and weights it reads from live as long as this).
struct StandaloneBackend {
  std::unique_ptr<artifact::ArtifactReader> reader;
  std::shared_ptr<const model::ModelWeights> weights;
  StatusOr<std::unique_ptr<CudaBackend>> backend = Status::error("not created");
};
std::unique_ptr<StandaloneBackend> createStandalone(const TinyModel &tiny, const TempDir &dir,
                                                    const std::string &name,
                                                    const BackendOptions &options) {
  pointEmulatorCacheAtBuildTree();
  auto result = std::make_unique<StandaloneBackend>();
  tiny.write(dir.file(name));
  StatusOr<artifact::ArtifactReader> reader = artifact::ArtifactReader::open(dir.file(name));
  EXPECT_TRUE(reader.isOk()) << reader.status().message();
  if (!reader)
    return result;
  result->reader = std::make_unique<artifact::ArtifactReader>(std::move(*reader));
  StatusOr<std::shared_ptr<const model::ModelWeights>> weights =
      model::ModelWeights::load(*result->reader);
  EXPECT_TRUE(weights.isOk()) << weights.status().message();
  StatusOr<std::shared_ptr<const CudaDriver>> driver = emu::emulatedCudaDriver();
  StatusOr<std::shared_ptr<const CublasLt>> lt = emu::emulatedCublasLt();
  EXPECT_TRUE(driver.isOk() && lt.isOk());
  if (!weights || !driver || !lt)
    return result;
  result->weights = *weights;
  result->backend =
      CudaBackend::create(*driver, *lt, *result->reader, result->weights, 128, options);
  return result;
}

class CudaBackendTest : public ::testing::TestWithParam<Variant> {
protected:
  void SetUp() override {
    pointEmulatorCacheAtBuildTree();
    TinyModelOptions options = baseOptions();
    GetParam().change(options);
    kernels = generateKernels(options, codegen::ElementType::f32);
    tiny = std::make_unique<TinyModel>(options);
    dlm::testing::LoadedTinyModel loaded = dlm::testing::writeAndLoad(*tiny, dir.file("tiny.dlm"));
    ASSERT_TRUE(loaded.weights);
    reader = std::move(loaded.reader);
    weights = loaded.weights;
  }

  BackendOptions backendOptions() const {
    BackendOptions options;
    options.threads = 2;
    options.kvPageTokens = kPageSize;
    options.batchInvariant = batchInvariant;
    options.profiler = profiler;
    return options;
  }
  bool batchInvariant = false;
  // Given to the backends created from here on (null: unprofiled).
  profile::Profiler *profiler = nullptr;

  std::unique_ptr<CudaBackend> cudaBackend(bool graphs, bool requireDeviceLoop = false,
                                           int64_t chunkSteps = 4) {
    StatusOr<std::shared_ptr<const CudaDriver>> driver = emu::emulatedCudaDriver();
    EXPECT_TRUE(driver.isOk()) << driver.status().message();
    StatusOr<std::shared_ptr<const CublasLt>> lt = emu::emulatedCublasLt();
    EXPECT_TRUE(lt.isOk()) << lt.status().message();
    if (!driver || !lt)
      return nullptr;
    CudaBackendSettings settings;
    settings.graphs = graphs;
    settings.requireDeviceLoop = requireDeviceLoop;
    settings.deviceLoopChunkSteps = chunkSteps;
    StatusOr<std::unique_ptr<CudaBackend>> created =
        CudaBackend::create(*driver, *lt, *reader, weights, tiny->options().maxPositions,
                            backendOptions(), settings);
    EXPECT_TRUE(created.isOk()) << created.status().message();
    return created ? std::move(*created) : nullptr;
  }

  // The CPU backend over the artifact's kernel program: the reference of the CUDA backend.
  std::unique_ptr<cpu::CpuBackend> cpuBackend() const {
    const artifact::KernelTarget *records = reader->findKernelTarget("cpu");
    EXPECT_NE(records, nullptr);
    if (!records)
      return nullptr;
    StatusOr<std::unique_ptr<cpu::CpuBackend>> created = cpu::CpuBackend::create(
        weights, records->kernels, tiny->options().maxPositions, backendOptions());
    EXPECT_TRUE(created.isOk()) << created.status().message();
    return created ? std::move(*created) : nullptr;
  }

  std::vector<int32_t> tokens(int64_t count) const {
    std::vector<int32_t> ids(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      ids[i] = static_cast<int32_t>((i * 7 + 3) % tiny->options().vocab);
    return ids;
  }

  TempDir dir;
  std::unique_ptr<GeneratedKernels> kernels;
  std::unique_ptr<TinyModel> tiny;
  std::unique_ptr<artifact::ArtifactReader> reader;
  std::shared_ptr<const model::ModelWeights> weights;
};

std::vector<float> copy(const sampling::LogitsView &view) {
  return std::vector<float>(view.data, view.data + view.rows * view.vocab);
}

// max |a - b| / max |b|.
double relativeError(const std::vector<float> &a, const std::vector<float> &b) {
  double difference = 0, scale = 1e-30;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    difference = std::max(difference, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return difference / scale;
}

// Runs forwards[i] of `function` on sequences[i] of `alone` one at a time (the single-sequence
// path) and all at once on `packed`: the packed logits and captured rows are the forwards' own
// ones, in order, bit for bit, and every sequence's cache ends as alone.
void checkPacked(CudaBackend &alone, CudaBackend &packed,
                 const std::vector<kv::SequenceId> &sequences, std::string_view function,
                 const std::vector<sampling::ForwardSpec> &specs, const std::string &what) {
  std::vector<SequenceForward> forwards;
  std::vector<float> want, wantCaptured;
  for (size_t i = 0; i < specs.size(); ++i) {
    forwards.push_back({sequences[i], specs[i]});
    forwards.back().spec.function = function;
    StatusOr<sampling::LogitsView> out = alone.forwardBatch(function, {forwards.back()});
    ASSERT_TRUE(out.isOk()) << what << ": " << out.status().message();
    const std::vector<float> rows = copy(*out), captured = copy(alone.capturedRows());
    want.insert(want.end(), rows.begin(), rows.end());
    wantCaptured.insert(wantCaptured.end(), captured.begin(), captured.end());
  }
  StatusOr<sampling::LogitsView> got = packed.forwardBatch(function, forwards);
  ASSERT_TRUE(got.isOk()) << what << ": " << got.status().message();
  const std::vector<float> logits = copy(*got), captured = copy(packed.capturedRows());
  ASSERT_EQ(logits.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(logits[i], want[i]) << what << ": packed row " << i / static_cast<size_t>(got->vocab);
  ASSERT_EQ(captured.size(), wantCaptured.size()) << what;
  for (size_t i = 0; i < captured.size(); ++i)
    ASSERT_EQ(captured[i], wantCaptured[i]) << what << ": captured value " << i;
  for (kv::SequenceId s : sequences) {
    EXPECT_EQ(packed.kvCache().length(s), alone.kvCache().length(s)) << what;
    EXPECT_EQ(packed.kvCache().committedLength(s), alone.kvCache().committedLength(s)) << what;
  }
}

TEST_P(CudaBackendTest, FullAndCachedForwardsMatchTheReference) {
  std::unique_ptr<CudaBackend> gpu = cudaBackend(/*graphs=*/false);
  ASSERT_TRUE(gpu);
  EXPECT_EQ(gpu->name(), "cuda-emu");
  EXPECT_EQ(gpu->precision(), DeviceElement::f32);
  const int64_t count = 14, keep = 6;
  const std::vector<int32_t> ids = tokens(count);
  ASSERT_TRUE(gpu->reserve(count, count).isOk());

  const std::vector<double> reference = tiny->referenceLogits(ids);
  const std::vector<float> expected(reference.begin(), reference.end());
  StatusOr<sampling::LogitsView> full = gpu->forwardFull(ids.data(), count, keep, {0, count});
  ASSERT_TRUE(full.isOk()) << full.status().message();
  ASSERT_EQ(full->rows, count);
  ASSERT_EQ(full->vocab, tiny->options().vocab);
  EXPECT_LE(relativeError(copy(*full), expected), 1e-4);
  EXPECT_EQ(gpu->kvCache().length(0), keep);

  // Fed the same tokens, a cached forward over the kept prefix gives the full forward's rows from
  // `keep` on (the prefix's K/V came from that forward), for a row range at the canvas's start
  // and one inside it.
  const int64_t vocab = tiny->options().vocab;
  for (sampling::LogitRows rows :
       {sampling::LogitRows{0, count - keep}, sampling::LogitRows{2, 5}}) {
    StatusOr<sampling::LogitsView> cached = gpu->forwardCached(ids.data(), count, keep, rows);
    ASSERT_TRUE(cached.isOk()) << cached.status().message();
    ASSERT_EQ(cached->rows, rows.count());
    std::vector<float> want;
    for (int64_t r = rows.begin; r < rows.end; ++r) {
      // Row r of the fed canvas is position keep + r; with the shift, row 0 of a cached forward
      // predicts from its own position, unlike row keep of the full forward.
      if (tiny->options().logitShift && r == 0)
        continue;
      want.insert(want.end(), expected.begin() + (keep + r) * vocab,
                  expected.begin() + (keep + r + 1) * vocab);
    }
    std::vector<float> got = copy(*cached);
    if (tiny->options().logitShift && rows.begin == 0)
      got.erase(got.begin(), got.begin() + vocab);
    EXPECT_LE(relativeError(got, want), 1e-4) << "rows [" << rows.begin << ", " << rows.end << ")";
    // The cache is left as it was: the canvas's pages are released again.
    EXPECT_EQ(gpu->kvCache().length(0), keep);
  }
}

// Packed forwards over several sequences (docs/design/serving.md §2) on two backends over the
// same artifact: one runs each sequence's forwards alone (the single-sequence path, graphs
// included), the other packs them, three parts per run in different modes: full prefills of
// different lengths, then a cached block, an append and a cached canvas, then an extend, an
// append and another cached block. Every part's rows are bit-identical to its forward alone: the
// emulated cuBLASLt computes each output as one fixed-order dot product whatever the row count,
// and every generated kernel computes a row (attention: a part's rows) the same way whatever
// else is packed. Each sequence's cache ends as its mode leaves it, as alone.
TEST_P(CudaBackendTest, PackedSequencesGetTheirOwnBits) {
  using Mode = sampling::ForwardSpec::Mode;
  batchInvariant = true;
  std::unique_ptr<CudaBackend> alone = cudaBackend(/*graphs=*/true);
  std::unique_ptr<CudaBackend> packed = cudaBackend(/*graphs=*/true);
  ASSERT_TRUE(alone && packed);
  EXPECT_TRUE(packed->batchesSequences());
  ASSERT_TRUE(alone->reservePacked(48, 48).isOk());
  ASSERT_TRUE(packed->reservePacked(48, 48).isOk());
  std::vector<int32_t> a = tokens(14), b = tokens(13), c = tokens(12);
  std::rotate(b.begin(), b.begin() + 3, b.end());
  std::rotate(c.begin(), c.begin() + 5, c.end());
  std::vector<kv::SequenceId> sequences;
  for (int i = 0; i < 3; ++i) {
    StatusOr<kv::SequenceId> one = alone->createSequence(), other = packed->createSequence();
    ASSERT_TRUE(one && other);
    ASSERT_EQ(*one, *other);
    sequences.push_back(*one);
  }
  auto run = [&](const std::vector<sampling::ForwardSpec> &specs, const std::string &what) {
    checkPacked(*alone, *packed, sequences, "", specs, what);
  };
  run({sampling::ForwardSpec::of(Mode::full, a.data(), 11, 11, {0, 11}),
       sampling::ForwardSpec::of(Mode::full, b.data(), 7, 7, {0, 0}),
       sampling::ForwardSpec::of(Mode::full, c.data(), 6, 6, {5, 6})},
      "full prefills");
  run({sampling::ForwardSpec::of(Mode::cached, a.data(), 14, 11, {0, 3}),
       sampling::ForwardSpec::of(Mode::cached, b.data(), 13, 7, {0, 6}),
       sampling::ForwardSpec::of(Mode::append, c.data(), 9, 6, {2, 3})},
      "cached, cached, append");
  sampling::ForwardSpec extend = sampling::ForwardSpec::of(Mode::extend, a.data(), 14, 11, {0, 4});
  extend.first = 5;
  for (int64_t i = 7; i < 13; i += 2)
    b[i] = static_cast<int32_t>(tiny->options().maskTokenId);
  run({extend, sampling::ForwardSpec::of(Mode::cached, b.data(), 13, 7, {1, 5}),
       sampling::ForwardSpec::of(Mode::append, c.data(), 12, 9, {0, 3})},
      "extend, cached, append");
  EXPECT_EQ(packed->kvCache().length(sequences[0]), 11);
  EXPECT_EQ(packed->kvCache().length(sequences[1]), 7);
  EXPECT_EQ(packed->kvCache().length(sequences[2]), 12);
  // A mismatched cache length names the part and leaves the others as they were.
  StatusOr<sampling::LogitsView> bad = packed->forwardBatch(
      "", {{sequences[1], sampling::ForwardSpec::of(Mode::cached, b.data(), 13, 7, {0, 1})},
           {sequences[2], sampling::ForwardSpec::of(Mode::append, c.data(), 12, 9, {0, 1})}});
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("append forward: the KV cache holds 12 tokens"),
            std::string::npos)
      << bad.status().message();
  EXPECT_EQ(packed->kvCache().length(sequences[1]), 7);
  // The session's own sequence (0) was never touched, and a removed sequence frees its pages.
  EXPECT_EQ(packed->kvCache().length(0), 0);
  const int64_t free = packed->kvCache().freePages();
  ASSERT_TRUE(packed->removeSequence(sequences[2]).isOk());
  EXPECT_EQ(packed->kvCache().freePages(), free + 3);
}

// More parts than reservePacked sized the inputs for grow them; the run still gets every part's
// own rows.
TEST_P(CudaBackendTest, ManySmallPartsGrowThePackedInputs) {
  using Mode = sampling::ForwardSpec::Mode;
  std::unique_ptr<CudaBackend> gpu = cudaBackend(/*graphs=*/false);
  ASSERT_TRUE(gpu);
  ASSERT_TRUE(gpu->reservePacked(2, 2).isOk()); // room for 2 parts
  const std::vector<int32_t> ids = tokens(3);
  std::vector<SequenceForward> forwards;
  for (int i = 0; i < 3; ++i)
    forwards.push_back({*gpu->createSequence(),
                        sampling::ForwardSpec::of(Mode::full, ids.data() + i, 1, 1, {0, 1})});
  ASSERT_TRUE(gpu->reserve(3, 3).isOk()); // more rows; parts stay at 2
  StatusOr<sampling::LogitsView> got = gpu->forwardBatch("", forwards);
  ASSERT_TRUE(got.isOk()) << got.status().message();
  const std::vector<float> together = copy(*got);
  for (int i = 0; i < 3; ++i) {
    StatusOr<sampling::LogitsView> one = gpu->forwardBatch("", {forwards[i]});
    ASSERT_TRUE(one.isOk()) << one.status().message();
    const std::vector<float> row = copy(*one);
    EXPECT_LE(relativeError(std::vector<float>(together.begin() + i * row.size(),
                                               together.begin() + (i + 1) * row.size()),
                            row),
              1e-6)
        << "part " << i;
  }
}

// A new canvas over a kept prefix (what every denoising step with the prefix cache does) has no
// plain-forward reference in a bidirectional model: the CPU backend on the same artifact is it.
TEST_P(CudaBackendTest, CachedForwardsOverANewCanvasMatchTheCpuBackend) {
  std::unique_ptr<cpu::CpuBackend> cpu = cpuBackend();
  ASSERT_TRUE(cpu);
  std::unique_ptr<CudaBackend> gpu = cudaBackend(/*graphs=*/true);
  ASSERT_TRUE(gpu);
  const int64_t count = 15, keep = 7;
  std::vector<int32_t> ids = tokens(count);
  for (Backend *backend : {static_cast<Backend *>(cpu.get()), static_cast<Backend *>(gpu.get())}) {
    ASSERT_TRUE(backend->reserve(count, count).isOk());
    ASSERT_TRUE(backend->forwardFull(ids.data(), count, keep, {0, 0}).isOk());
  }
  for (int step = 0; step < 3; ++step) {
    for (int64_t i = keep + step; i < count; i += 2)
      ids[i] = static_cast<int32_t>(tiny->options().maskTokenId);
    const sampling::LogitRows rows{0, count - keep};
    StatusOr<sampling::LogitsView> expected = cpu->forwardCached(ids.data(), count, keep, rows);
    ASSERT_TRUE(expected.isOk()) << expected.status().message();
    const std::vector<float> want = copy(*expected);
    StatusOr<sampling::LogitsView> got = gpu->forwardCached(ids.data(), count, keep, rows);
    ASSERT_TRUE(got.isOk()) << got.status().message();
    EXPECT_LE(relativeError(copy(*got), want), 1e-4) << "step " << step;
  }
  EXPECT_EQ(gpu->graphStatistics().replays, 1);
}

// The dual cache's window forwards: over a cache of the same tokens, the reference's rows; over
// the cache of a block's first forward with a new canvas in the window (every later denoising
// step), the CPU backend's. The cache keeps the whole sequence, and the window's shape is
// captured once and replayed.
TEST_P(CudaBackendTest, WindowForwardsMatchTheReferenceAndTheCpuBackend) {
  std::unique_ptr<cpu::CpuBackend> cpu = cpuBackend();
  ASSERT_TRUE(cpu);
  std::unique_ptr<CudaBackend> gpu = cudaBackend(/*graphs=*/true);
  ASSERT_TRUE(gpu);
  const int64_t count = 15, feedBegin = 6, feedEnd = 11, vocab = tiny->options().vocab;
  const sampling::LogitRows rows{0, feedEnd - feedBegin};
  std::vector<int32_t> ids = tokens(count);
  for (Backend *backend : {static_cast<Backend *>(cpu.get()), static_cast<Backend *>(gpu.get())}) {
    ASSERT_TRUE(backend->reserve(count, count).isOk());
    ASSERT_TRUE(backend->forwardFull(ids.data(), count, count, {0, 0}).isOk());
  }
  StatusOr<sampling::LogitsView> same =
      gpu->forward(sampling::ForwardSpec::window(ids.data(), count, feedBegin, feedEnd, rows));
  ASSERT_TRUE(same.isOk()) << same.status().message();
  // With the shift, row 0 of a window predicts from its own position, unlike the full forward.
  const int64_t first = tiny->options().logitShift ? 1 : 0;
  const std::vector<double> reference = tiny->referenceLogits(ids);
  const std::vector<float> want(reference.begin() + (feedBegin + first) * vocab,
                                reference.begin() + feedEnd * vocab);
  const std::vector<float> got = copy(*same);
  EXPECT_LE(relativeError(std::vector<float>(got.begin() + first * vocab, got.end()), want), 1e-4);
  EXPECT_EQ(gpu->kvCache().length(0), count);

  for (int step = 0; step < 3; ++step) {
    for (int64_t i = feedBegin + step; i < feedEnd; i += 2)
      ids[i] = static_cast<int32_t>(tiny->options().maskTokenId);
    StatusOr<sampling::LogitsView> expected =
        cpu->forward(sampling::ForwardSpec::window(ids.data(), count, feedBegin, feedEnd, rows));
    ASSERT_TRUE(expected.isOk()) << expected.status().message();
    const std::vector<float> cpuLogits = copy(*expected);
    StatusOr<sampling::LogitsView> window =
        gpu->forward(sampling::ForwardSpec::window(ids.data(), count, feedBegin, feedEnd, rows));
    ASSERT_TRUE(window.isOk()) << window.status().message();
    EXPECT_LE(relativeError(copy(*window), cpuLogits), 1e-4) << "step " << step;
  }
  EXPECT_EQ(gpu->kvCache().length(0), count);
  EXPECT_EQ(gpu->graphStatistics().captures, 1);
  EXPECT_EQ(gpu->graphStatistics().replays, 2);
}

TEST_P(CudaBackendTest, GraphReplaysAreIdenticalToEagerForwards) {
  std::unique_ptr<CudaBackend> eager = cudaBackend(/*graphs=*/false);
  std::unique_ptr<CudaBackend> graphs = cudaBackend(/*graphs=*/true);
  ASSERT_TRUE(eager && graphs);
  const int64_t count = 12, keep = 4;
  std::vector<int32_t> ids = tokens(count);
  ASSERT_TRUE(eager->reserve(count, count).isOk());
  ASSERT_TRUE(graphs->reserve(count, count).isOk());
  for (CudaBackend *backend : {eager.get(), graphs.get()})
    ASSERT_TRUE(backend->forwardFull(ids.data(), count, keep, {0, 0}).isOk());
  // Denoising steps: the same shape with new tokens each time; eager the first time, captured
  // the second, replayed after.
  for (int step = 0; step < 4; ++step) {
    for (int64_t i = keep; i < count; ++i)
      ids[i] = static_cast<int32_t>((i * 5 + step * 11) % tiny->options().vocab);
    StatusOr<sampling::LogitsView> a = eager->forwardCached(ids.data(), count, keep, {1, 7});
    ASSERT_TRUE(a.isOk()) << a.status().message();
    const std::vector<float> eagerLogits = copy(*a);
    StatusOr<sampling::LogitsView> b = graphs->forwardCached(ids.data(), count, keep, {1, 7});
    ASSERT_TRUE(b.isOk()) << b.status().message();
    EXPECT_EQ(copy(*b), eagerLogits) << "step " << step;
  }
  EXPECT_EQ(eager->graphStatistics().captures, 0);
  EXPECT_EQ(graphs->graphStatistics().captures, 1);
  EXPECT_EQ(graphs->graphStatistics().replays, 2);
  EXPECT_EQ(graphs->kvCache().length(0), keep);
}

// A reserve() that grows the workspace moves every buffer: graphs captured before read the old
// addresses, so they must be dropped and recaptured, not replayed.
TEST_P(CudaBackendTest, GrowingTheWorkspaceRecapturesGraphs) {
  std::unique_ptr<CudaBackend> eager = cudaBackend(/*graphs=*/false);
  std::unique_ptr<CudaBackend> graphs = cudaBackend(/*graphs=*/true);
  ASSERT_TRUE(eager && graphs);
  const int64_t count = 10, keep = 4;
  const std::vector<int32_t> ids = tokens(count);
  auto step = [&](CudaBackend &backend) {
    StatusOr<sampling::LogitsView> logits = backend.forwardFull(ids.data(), count, keep, {0, 3});
    EXPECT_TRUE(logits.isOk()) << logits.status().message();
    return logits ? copy(*logits) : std::vector<float>{};
  };
  for (int64_t reserved : {count, 3 * count}) {
    ASSERT_TRUE(eager->reserve(reserved, reserved).isOk());
    ASSERT_TRUE(graphs->reserve(reserved, reserved).isOk());
    for (int repeat = 0; repeat < 3; ++repeat)
      EXPECT_EQ(step(*graphs), step(*eager)) << "reserved " << reserved << ", repeat " << repeat;
  }
  EXPECT_EQ(graphs->graphStatistics().captures, 2);
  EXPECT_EQ(graphs->graphStatistics().replays, 2);
}

// What a kernel event says besides its times: category, name, layer, tokens, GEMM N and K.
using KernelFields = std::tuple<int, std::string, int64_t, int64_t, int64_t, int64_t>;

std::vector<KernelFields> kernelFields(const profile::Profiler &profiler) {
  std::vector<KernelFields> fields;
  for (const profile::Event &e : profiler)
    if (profile::isKernel(e.category))
      fields.emplace_back(static_cast<int>(e.category), e.name, e.layer, e.tokens, e.outputs,
                          e.inputs);
  return fields;
}

// Profiled, the cuda backend records one event per record (a norm_linear that normalises and an
// lm_head with a norm: two, the norm first) with the CPU backend's category, name, layer, tokens
// and GEMM shape, in the same order, for full and cached forwards with and without logit rows.
// Each lies inside its forward on the calling thread's track, with a duration of at least zero.
// The forwards run eagerly (no graph captured though the shape repeats) and return the
// unprofiled backend's logits bit for bit.
TEST_P(CudaBackendTest, ProfiledForwardsTimeEveryRecordAsTheCpuBackend) {
  std::unique_ptr<CudaBackend> unprofiled = cudaBackend(/*graphs=*/true);
  profile::Profiler cpuProfile(1 << 14), gpuProfile(1 << 14);
  profiler = &cpuProfile;
  std::unique_ptr<cpu::CpuBackend> cpu = cpuBackend();
  profiler = &gpuProfile;
  std::unique_ptr<CudaBackend> gpu = cudaBackend(/*graphs=*/true);
  profiler = nullptr;
  ASSERT_TRUE(unprofiled && cpu && gpu);
  const int64_t count = 14, keep = 6;
  std::vector<int32_t> ids = tokens(count);
  std::vector<Backend *> backends{cpu.get(), gpu.get(), unprofiled.get()};
  for (Backend *backend : backends)
    ASSERT_TRUE(backend->reserve(count, count).isOk());
  auto forwardAll = [&](auto &&forward, const std::string &what) {
    std::vector<std::vector<float>> logits;
    for (Backend *backend : backends) {
      StatusOr<sampling::LogitsView> out = forward(*backend);
      ASSERT_TRUE(out.isOk()) << what << ": " << out.status().message();
      logits.push_back(copy(*out));
    }
    EXPECT_EQ(logits[1], logits[2]) << what << ": profiled logits differ";
  };
  forwardAll([&](Backend &b) { return b.forwardFull(ids.data(), count, keep, {0, 0}); },
             "full, no rows");
  for (int step = 0; step < 3; ++step) {
    ids[keep + step] = static_cast<int32_t>(tiny->options().maskTokenId);
    forwardAll([&](Backend &b) { return b.forwardCached(ids.data(), count, keep, {1, 7}); },
               "cached step " + std::to_string(step));
  }
  forwardAll([&](Backend &b) { return b.forwardFull(ids.data(), count, count, {0, count}); },
             "full, every row");

  const std::vector<KernelFields> want = kernelFields(cpuProfile), got = kernelFields(gpuProfile);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(got, want);
  int64_t gemms = 0;
  for (const KernelFields &f : got)
    if (std::get<0>(f) == static_cast<int>(profile::Category::gemm) ||
        std::get<0>(f) == static_cast<int>(profile::Category::lmHead)) {
      ++gemms;
      EXPECT_GT(std::get<4>(f), 0);
      EXPECT_GT(std::get<5>(f), 0);
    }
  EXPECT_GT(gemms, 0);
  EXPECT_EQ(gpuProfile.dropped(), 0u);
  EXPECT_EQ(gpu->graphStatistics().captures + gpu->graphStatistics().replays, 0);
  EXPECT_GT(unprofiled->graphStatistics().replays, 0);

  // A forward's kernels are recorded before it closes: each lies inside the next forward event.
  // The device clock's events round to about half a microsecond.
  const int64_t slack = 1000;
  std::vector<const profile::Event *> pending;
  int64_t forwards = 0;
  for (const profile::Event &e : gpuProfile) {
    EXPECT_EQ(e.track, profile::TrackKind::thread);
    EXPECT_EQ(e.trackId, 0u);
    EXPECT_GE(e.durationNs, 0) << e.name;
    if (profile::isKernel(e.category)) {
      pending.push_back(&e);
      continue;
    }
    ASSERT_EQ(e.category, profile::Category::forward);
    ++forwards;
    for (const profile::Event *k : pending) {
      EXPECT_GE(k->startNs + slack, e.startNs) << k->name;
      EXPECT_LE(k->startNs + k->durationNs, e.startNs + e.durationNs + slack) << k->name;
    }
    pending.clear();
  }
  EXPECT_EQ(forwards, 5);
  EXPECT_TRUE(pending.empty());
}

// A decoding setting for the device block loop.
struct LoopSetting {
  const char *name;
  std::function<void(sampling::DecodeRequest &)> change;
};

std::vector<LoopSetting> loopSettings() {
  using sampling::CacheMode;
  using sampling::Policy;
  auto lowConfidence = [](sampling::DecodeRequest &r) {
    r.knobs.policy = Policy::lowConfidence;
    r.knobs.steps = 6; // 2 per block: 2 tokens per step
  };
  auto entropyBound = [](sampling::DecodeRequest &r) {
    r.knobs.policy = Policy::entropyBound;
    r.knobs.maxSteps = 5;
  };
  return {
      {"greedy", lowConfidence},
      {"greedy_prefix",
       [=](sampling::DecodeRequest &r) {
         lowConfidence(r);
         r.cache = CacheMode::prefix;
       }},
      {"gumbel_prefix",
       [=](sampling::DecodeRequest &r) {
         lowConfidence(r);
         r.knobs.temperature = 0.8;
         r.cache = CacheMode::prefix;
       }},
      {"gumbel_more_steps_than_tokens",
       [=](sampling::DecodeRequest &r) {
         lowConfidence(r);
         r.knobs.steps = 18; // 6 per block of 4: the last two steps take nothing
         r.knobs.temperature = 1.3;
       }},
      {"threshold",
       [=](sampling::DecodeRequest &r) {
         lowConfidence(r);
         r.knobs.steps = 12;
         r.knobs.threshold = 0.02;
       }},
      {"threshold_gumbel_prefix",
       [=](sampling::DecodeRequest &r) {
         lowConfidence(r);
         r.knobs.steps = 12;
         r.knobs.threshold = 0.035;
         r.knobs.temperature = 0.5;
         r.cache = CacheMode::prefix;
       }},
      {"threshold_step_cap",
       [=](sampling::DecodeRequest &r) {
         lowConfidence(r);
         r.knobs.steps = 12;
         r.knobs.threshold = 0.5;
         r.knobs.temperature = 0.5;
         r.knobs.stepCap = 2; // the second step takes every candidate left (the top-k kernel)
       }},
      {"entropy_bound", entropyBound},
      {"entropy_bound_prefix_stable_argmax",
       [=](sampling::DecodeRequest &r) {
         entropyBound(r);
         r.cache = CacheMode::prefix;
         r.knobs.entropyBound = 2.0;
         r.knobs.confidenceThreshold = 10; // converged once the argmax is stable for a step
       }},
      {"entropy_bound_uniform_converging",
       [=](sampling::DecodeRequest &r) {
         entropyBound(r);
         r.knobs.noise = "uniform";
         r.knobs.stabilityThreshold = 0;
         r.knobs.confidenceThreshold = 10; // converged at every canvas's first step
       }},
  };
}

sampling::DecodeRequest loopRequest(const LoopSetting &setting, uint64_t seed) {
  sampling::DecodeRequest request;
  request.prompt = {5, 17, 2, 30, 8};
  request.knobs.genLength = 3 * kLoopBlock;
  request.knobs.blockLength = kLoopBlock;
  request.seed = seed;
  request.request = 3;
  setting.change(request);
  return request;
}

sampling::TokenFacts loopFacts(const TinyModelOptions &o) {
  sampling::TokenFacts facts;
  facts.maskTokenId = o.maskTokenId;
  facts.eosTokenIds = o.eosTokenIds;
  facts.logitShift = o.logitShift;
  return facts;
}

// The device block loop decides exactly as the host loop: the same ids, forwards and RNG steps
// as the CPU backend for both policies, greedy and sampled, with and without the prefix cache;
// chunks of 4 steps captured once per block configuration and replayed by a second request of
// the same shape; chunks of 1 and graphs off give the same tokens.
TEST_P(CudaBackendTest, DeviceBlockLoopDecodesExactlyLikeTheHostLoop) {
  std::unique_ptr<cpu::CpuBackend> cpu = cpuBackend();
  ASSERT_TRUE(cpu);
  const sampling::TokenFacts facts = loopFacts(tiny->options());
  for (const LoopSetting &setting : loopSettings()) {
    SCOPED_TRACE(setting.name);
    for (uint64_t seed : {uint64_t(11), uint64_t(12)}) {
      const sampling::DecodeRequest request = loopRequest(setting, seed);
      StatusOr<sampling::DecodeOutcome> expected =
          sampling::decode(*cpu, facts, request, nullptr);
      ASSERT_TRUE(expected.isOk()) << expected.status().message();
      // The early ends are exercised: a block whose masks run out before its steps do, a
      // converging canvas. (Whether a threshold ends a block early depends on the model.)
      const std::string name = setting.name;
      if (name == "gumbel_more_steps_than_tokens")
        EXPECT_LT(expected->decodeSteps, request.knobs.steps) << "seed " << seed;
      if (name.find("converging") != std::string::npos)
        EXPECT_LT(expected->decodeSteps, expected->blocks * request.knobs.maxSteps)
            << "seed " << seed;
      struct Run {
        bool graphs;
        int64_t chunk;
      };
      for (Run run : {Run{true, 4}, Run{true, 1}, Run{false, 4}}) {
        // Chunks of one step and eager chunks once per setting.
        if (seed != 11 && !(run.graphs && run.chunk == 4))
          continue;
        std::unique_ptr<CudaBackend> gpu = cudaBackend(run.graphs, /*requireDeviceLoop=*/true,
                                                       run.chunk);
        ASSERT_TRUE(gpu);
        for (int repeat = 0; repeat < 2; ++repeat) {
          const BlockLoopStatistics before = gpu->blockLoopStatistics();
          StatusOr<sampling::DecodeOutcome> got = sampling::decode(*gpu, facts, request, nullptr);
          ASSERT_TRUE(got.isOk()) << got.status().message();
          const BlockLoopStatistics &after = gpu->blockLoopStatistics();
          const std::string what = "seed " + std::to_string(seed) + ", chunk " +
                                   std::to_string(run.chunk) +
                                   (run.graphs ? ", graphs" : ", eager") + ", repeat " +
                                   std::to_string(repeat);
          EXPECT_EQ(got->outputIds, expected->outputIds) << what;
          EXPECT_EQ(got->forwards, expected->forwards) << what;
          EXPECT_EQ(got->decodeSteps, expected->decodeSteps) << what;
          // Every block ran on the device.
          EXPECT_EQ(after.blocks - before.blocks, expected->blocks) << what;
          EXPECT_EQ(after.stepsUsed - before.stepsUsed, expected->decodeSteps) << what;
          EXPECT_GE(after.stepsRun - before.stepsRun, after.stepsUsed - before.stepsUsed);
          const int64_t chunks = after.chunks - before.chunks;
          if (!run.graphs) {
            EXPECT_EQ(after.captures + after.replays, 0) << what;
          } else if (repeat == 0) {
            EXPECT_EQ(after.captures - before.captures, chunks) << what;
          } else {
            // The same request again: every chunk's graph is replayed, none captured.
            EXPECT_EQ(after.captures - before.captures, 0) << what;
            EXPECT_EQ(after.replays - before.replays, chunks) << what;
          }
        }
      }
    }
  }
}

// A loop setting as the decode program's request: the knobs its program declares.
program::ProgramRequest programRequest(const sampling::DecodeRequest &r) {
  program::ProgramRequest request;
  request.prompt = r.prompt;
  request.seed = r.seed;
  request.request = r.request;
  artifact::Attributes &k = request.knobs;
  const sampling::DecodingKnobs &knobs = r.knobs;
  k["gen_length"] = knobs.genLength;
  k["block_length"] = knobs.blockLength;
  k["temperature"] = knobs.temperature;
  k["cache"] = std::string(sampling::cacheModeName(r.cache));
  if (knobs.policy == sampling::Policy::lowConfidence) {
    k["steps"] = knobs.steps;
    if (knobs.threshold)
      k["threshold"] = *knobs.threshold;
    if (knobs.stepCap)
      k["step_cap"] = *knobs.stepCap;
    return request;
  }
  k["max_steps"] = knobs.maxSteps;
  k["t_min"] = knobs.tMin;
  k["t_max"] = knobs.tMax;
  k["stability_threshold"] = knobs.stabilityThreshold;
  k["entropy_bound"] = knobs.entropyBound;
  k["confidence_threshold"] = knobs.confidenceThreshold;
  if (!knobs.noise.empty())
    k["noise"] = knobs.noise;
  return request;
}

program::DecodeProgram loadDecodeProgram(const std::string &name) {
  StatusOr<program::DecodeProgram> loaded =
      program::DecodeProgram::load(program::testing::shippedDecodeProgram(name).records);
  EXPECT_TRUE(loaded.isOk()) << name << ": " << loaded.status().message();
  return loaded ? std::move(*loaded) : program::DecodeProgram();
}

// `request` decodes on the device exactly as on the host backend: the same ids, forwards and RNG
// steps, with every loop on the device.
void expectDeviceLoopsDecodeAsTheHost(const program::DecodeInterpreter &interpreter,
                                      sampling::DecodeModel &host, CudaBackend &gpu,
                                      const sampling::TokenFacts &facts,
                                      const program::ProgramRequest &request) {
  StatusOr<sampling::DecodeOutcome> expected = interpreter.run(host, facts, request, nullptr);
  ASSERT_TRUE(expected.isOk()) << expected.status().message();
  const BlockLoopStatistics before = gpu.blockLoopStatistics();
  StatusOr<sampling::DecodeOutcome> got = interpreter.run(gpu, facts, request, nullptr);
  ASSERT_TRUE(got.isOk()) << got.status().message();
  EXPECT_EQ(got->outputIds, expected->outputIds);
  EXPECT_EQ(got->forwards, expected->forwards);
  EXPECT_EQ(got->decodeSteps, expected->decodeSteps);
  const BlockLoopStatistics &after = gpu.blockLoopStatistics();
  EXPECT_EQ(after.blocks - before.blocks, expected->blocks);
  EXPECT_EQ(after.stepsUsed - before.stepsUsed, expected->decodeSteps);
}

// The decode interpreter hands every denoise loop of the policies' programs to the device loop
// as a plan of its records, and decodes exactly as its host loop on the CPU backend: the same
// ids, forwards and RNG steps.
TEST_P(CudaBackendTest, InterpreterRunsTheProgramsLoopsOnTheDevice) {
  std::unique_ptr<cpu::CpuBackend> cpu = cpuBackend();
  ASSERT_TRUE(cpu);
  const program::DecodeProgram lowConfidence = loadDecodeProgram("low-confidence.decode");
  const program::DecodeProgram entropyBound = loadDecodeProgram("entropy-bound.decode");
  const sampling::TokenFacts facts = loopFacts(tiny->options());
  std::unique_ptr<CudaBackend> gpu =
      cudaBackend(/*graphs=*/true, /*requireDeviceLoop=*/true, /*chunkSteps=*/0);
  ASSERT_TRUE(gpu);
  for (const LoopSetting &setting : loopSettings()) {
    SCOPED_TRACE(setting.name);
    const sampling::DecodeRequest legacy = loopRequest(setting, 11);
    const program::DecodeInterpreter interpreter(
        legacy.knobs.policy == sampling::Policy::lowConfidence ? lowConfidence : entropyBound);
    expectDeviceLoopsDecodeAsTheHost(interpreter, *cpu, *gpu, facts, programRequest(legacy));
  }
}

// The dual cache through the low-confidence program: the device loop (a full forward keeping
// the whole sequence, then window forwards over the block) decodes exactly as the host loop on
// the CPU backend: the same ids, forwards and RNG steps, every loop on the device.
TEST_P(CudaBackendTest, InterpreterRunsTheDualCacheOnTheDevice) {
  std::unique_ptr<cpu::CpuBackend> cpu = cpuBackend();
  ASSERT_TRUE(cpu);
  // The interpreter refers to its program.
  const program::DecodeProgram lowConfidence = loadDecodeProgram("low-confidence.decode");
  const program::DecodeInterpreter interpreter(lowConfidence);
  const sampling::TokenFacts facts = loopFacts(tiny->options());
  auto dual = [](sampling::DecodeRequest &r) {
    r.knobs.policy = sampling::Policy::lowConfidence;
    r.knobs.steps = 6;
    r.cache = sampling::CacheMode::dual;
  };
  const std::vector<LoopSetting> settings = {
      {"greedy_dual", dual},
      {"gumbel_dual",
       [=](sampling::DecodeRequest &r) {
         dual(r);
         r.knobs.temperature = 0.8;
       }},
      {"threshold_gumbel_dual",
       [=](sampling::DecodeRequest &r) {
         dual(r);
         r.knobs.steps = 12;
         r.knobs.threshold = 0.035;
         r.knobs.temperature = 0.5;
       }},
  };
  for (int64_t chunk : {int64_t(0), int64_t(1)}) {
    std::unique_ptr<CudaBackend> gpu =
        cudaBackend(/*graphs=*/chunk == 0, /*requireDeviceLoop=*/true, chunk);
    ASSERT_TRUE(gpu);
    for (const LoopSetting &setting : settings) {
      SCOPED_TRACE(std::string(setting.name) + ", chunk " + std::to_string(chunk));
      expectDeviceLoopsDecodeAsTheHost(interpreter, *cpu, *gpu, facts,
                                       programRequest(loopRequest(setting, 11)));
      // The cache as the host's window forwards leave it: the whole sequence.
      EXPECT_EQ(gpu->kvCache().length(0), cpu->kvCache().length(0));
    }
  }
}

// Without a chunk size in the settings the program's unroll factor (dlmc compile --unroll, the
// knob unroll_steps) sets the steps per graph: 4 steps per block in chunks of 3 take two chunks
// (the second holds the one step left under the cap), in chunks of 4 one.
TEST_P(CudaBackendTest, DeviceBlockLoopChunksAsTheProgramUnrolls) {
  const sampling::TokenFacts facts = loopFacts(tiny->options());
  sampling::DecodeRequest request = loopRequest(loopSettings()[0], 11);
  request.knobs.steps = 12; // 4 per block: 1 token per step, every step needed
  std::unique_ptr<cpu::CpuBackend> reference = cpuBackend();
  ASSERT_TRUE(reference);
  StatusOr<sampling::DecodeOutcome> expected =
      sampling::decode(*reference, facts, request, nullptr);
  ASSERT_TRUE(expected.isOk()) << expected.status().message();
  for (int64_t unroll : {3, 4}) {
    request.knobs.unrollSteps = unroll;
    std::unique_ptr<CudaBackend> gpu =
        cudaBackend(/*graphs=*/true, /*requireDeviceLoop=*/true, /*chunkSteps=*/0);
    ASSERT_TRUE(gpu);
    StatusOr<sampling::DecodeOutcome> got = sampling::decode(*gpu, facts, request, nullptr);
    ASSERT_TRUE(got.isOk()) << got.status().message();
    EXPECT_EQ(got->outputIds, expected->outputIds) << "unroll " << unroll;
    const BlockLoopStatistics &stats = gpu->blockLoopStatistics();
    EXPECT_EQ(stats.blocks, 3);
    EXPECT_EQ(stats.chunks, 3 * ((4 + unroll - 1) / unroll)) << "unroll " << unroll;
    EXPECT_EQ(stats.stepsRun, 12) << "unroll " << unroll;
    EXPECT_EQ(stats.stepsUsed, 12) << "unroll " << unroll;
  }
}

// Without the block's kernels (an artifact compiled for other blocks) the host loop runs, with
// the same result; when the device loop is required that is a named error.
TEST_P(CudaBackendTest, DeviceBlockLoopWithoutItsKernelsFallsBackOrNamesWhy) {
  const sampling::TokenFacts facts = loopFacts(tiny->options());
  sampling::DecodeRequest request = loopRequest(loopSettings()[0], 1);
  request.knobs.blockLength = 2 * kLoopBlock; // no accept kernel for blocks of 8
  request.knobs.genLength = 2 * kLoopBlock;
  request.knobs.steps = 4;
  std::unique_ptr<CudaBackend> optional = cudaBackend(/*graphs=*/true);
  ASSERT_TRUE(optional);
  StatusOr<sampling::DecodeOutcome> host = sampling::decode(*optional, facts, request, nullptr);
  ASSERT_TRUE(host.isOk()) << host.status().message();
  EXPECT_EQ(optional->blockLoopStatistics().blocks, 0);
  EXPECT_EQ(host->forwards, 4);

  std::unique_ptr<CudaBackend> required = cudaBackend(/*graphs=*/true, true);
  ASSERT_TRUE(required);
  StatusOr<sampling::DecodeOutcome> failed = sampling::decode(*required, facts, request, nullptr);
  ASSERT_FALSE(failed.isOk());
  EXPECT_NE(failed.status().message().find(
                "not supported yet: this block on the device loop: the artifact has no "
                "block_loop_gate kernel for this loop's blocks of 8"),
            std::string::npos)
      << failed.status().message();
}

// Profiled, the device loop is declined (its chunks run no host call between records to time
// them at): blocks decode from the host, to the tokens the unprofiled device loop decodes, with
// every forward's records timed; a required device loop names why it does not run.
TEST_P(CudaBackendTest, ProfiledBlocksDecodeFromTheHost) {
  const sampling::TokenFacts facts = loopFacts(tiny->options());
  const sampling::DecodeRequest request = loopRequest(loopSettings()[1], 11); // prefix cache
  std::unique_ptr<CudaBackend> device =
      cudaBackend(/*graphs=*/true, /*requireDeviceLoop=*/true);
  ASSERT_TRUE(device);
  StatusOr<sampling::DecodeOutcome> expected = sampling::decode(*device, facts, request, nullptr);
  ASSERT_TRUE(expected.isOk()) << expected.status().message();
  EXPECT_EQ(device->blockLoopStatistics().blocks, expected->blocks);

  profile::Profiler profile(1 << 14);
  profiler = &profile;
  std::unique_ptr<CudaBackend> profiled = cudaBackend(/*graphs=*/true);
  std::unique_ptr<CudaBackend> required = cudaBackend(/*graphs=*/true, true);
  profiler = nullptr;
  ASSERT_TRUE(profiled && required);
  StatusOr<sampling::DecodeOutcome> got = sampling::decode(*profiled, facts, request, nullptr);
  ASSERT_TRUE(got.isOk()) << got.status().message();
  EXPECT_EQ(got->outputIds, expected->outputIds);
  EXPECT_EQ(got->forwards, expected->forwards);
  EXPECT_EQ(profiled->blockLoopStatistics().blocks, 0);
  int64_t forwards = 0, attention = 0;
  for (const profile::Event &e : profile) {
    forwards += e.category == profile::Category::forward;
    attention += e.category == profile::Category::attention;
  }
  EXPECT_EQ(forwards, got->forwards);
  EXPECT_EQ(attention, got->forwards * tiny->options().layers);

  StatusOr<sampling::DecodeOutcome> failed = sampling::decode(*required, facts, request, nullptr);
  ASSERT_FALSE(failed.isOk());
  EXPECT_NE(failed.status().message().find("the backend is profiled"), std::string::npos)
      << failed.status().message();
}

// DFlash's data paths on the emulated device against the CPU backend: the default function
// captures its final hidden rows twice (capture), and a "draft" copy of it whose KV layers follow
// the model's reads forward_input rows in place of the embedding for the rows the input gives
// (select_input_rows), run as an extend over the cache the target filled.
class CudaSpeculativeTest : public CudaBackendTest {
protected:
  // The program with the capture before the lm_head and the draft function appended.
  static std::vector<artifact::Kernel> speculative(std::vector<artifact::Kernel> records,
                                                   int64_t layers, int64_t hidden) {
    auto integer = [](const artifact::Kernel &k, const char *key) {
      auto it = k.parameters.find(key);
      return it == k.parameters.end() ? int64_t{-1} : std::get<int64_t>(it->second);
    };
    int64_t next = 0, offset = 0;
    for (const artifact::Kernel &k : records) {
      next = std::max(next, integer(k, "result") + 1);
      if (integer(k, "offset") >= 0)
        offset = std::max(offset, integer(k, "offset") + integer(k, "width"));
    }
    offset = (offset + 15) / 16 * 16;
    artifact::Kernel head = records.back();
    const std::string x = std::get<std::string>(head.parameters.at("operands"));
    artifact::Kernel capture;
    capture.kind = "capture";
    capture.name = "capture";
    capture.parameters = {{"layer", int64_t{-1}}, {"operands", x + "," + x}};
    records.insert(records.end() - 1, capture);
    const int64_t embedding = integer(records.front(), "result");
    std::vector<artifact::Kernel> draft;
    for (size_t i = 0; i < records.size(); ++i) {
      artifact::Kernel k = records[i];
      k.parameters["function"] = std::string("draft");
      k.name = "draft." + k.name; // record names are unique across functions
      if (k.kind == "kv_store" || k.kind == "attention")
        k.parameters["layer"] = integer(k, "layer") + layers;
      if (i > 0 && k.kind != "capture") {
        // Later records read the selected rows where they read the embedding.
        std::string operands = std::get<std::string>(k.parameters.at("operands")), out;
        size_t start = 0;
        while (start <= operands.size()) {
          size_t comma = std::min(operands.find(',', start), operands.size());
          const std::string item = operands.substr(start, comma - start);
          out += (out.empty() ? "" : ",") +
                 (item == std::to_string(embedding) ? std::to_string(next + 1) : item);
          start = comma + 1;
        }
        k.parameters["operands"] = out;
      }
      draft.push_back(std::move(k));
      if (i > 0)
        continue;
      artifact::Kernel input;
      input.kind = "forward_input";
      input.name = "draft.context";
      input.parameters = {{"layer", int64_t{-1}}, {"result", next}, {"width", hidden},
                          {"offset", offset}, {"function", std::string("draft")}};
      artifact::Kernel select = input;
      select.kind = "select_input_rows";
      select.name = "draft.select";
      select.parameters["result"] = next + 1;
      select.parameters["offset"] = offset + (hidden + 15) / 16 * 16;
      select.parameters["operands"] = std::to_string(next) + "," + std::to_string(embedding);
      draft.push_back(input);
      draft.push_back(select);
    }
    // The draft captures nothing.
    draft.erase(std::find_if(draft.begin(), draft.end(),
                             [](const artifact::Kernel &k) { return k.kind == "capture"; }));
    records.insert(records.end(), draft.begin(), draft.end());
    return records;
  }

  void SetUp() override {
    pointEmulatorCacheAtBuildTree();
    TinyModelOptions options = baseOptions();
    GetParam().change(options);
    kernels = generateKernels(options, codegen::ElementType::f32);
    options.kernelTargets[0].kernels =
        speculative(options.kernelTargets[0].kernels, options.layers, options.hidden);
    tiny = std::make_unique<TinyModel>(options);
    dlm::testing::LoadedTinyModel loaded = dlm::testing::writeAndLoad(*tiny, dir.file("tiny.dlm"));
    ASSERT_TRUE(loaded.weights);
    reader = std::move(loaded.reader);
    weights = loaded.weights;
  }
};

TEST_P(CudaSpeculativeTest, CaptureForwardInputSelectAndExtendMatchTheCpuBackend) {
  std::unique_ptr<cpu::CpuBackend> cpu = cpuBackend();
  ASSERT_TRUE(cpu);
  std::unique_ptr<CudaBackend> gpu = cudaBackend(/*graphs=*/true);
  ASSERT_TRUE(gpu);
  const int64_t hidden = tiny->options().hidden;
  std::vector<int32_t> ids = tokens(14);
  using Mode = sampling::ForwardSpec::Mode;
  std::vector<float> context;
  auto both = [&](sampling::ForwardSpec spec, const std::string &what) {
    StatusOr<sampling::LogitsView> expected = cpu->forward(spec);
    ASSERT_TRUE(expected.isOk()) << what << ": " << expected.status().message();
    const std::vector<float> want = copy(*expected), wantCaptured = copy(cpu->capturedRows());
    StatusOr<sampling::LogitsView> got = gpu->forward(spec);
    ASSERT_TRUE(got.isOk()) << what << ": " << got.status().message();
    EXPECT_LE(relativeError(copy(*got), want), 1e-4) << what;
    EXPECT_EQ(gpu->capturedRows().rows, cpu->capturedRows().rows) << what;
    EXPECT_EQ(gpu->capturedRows().vocab, cpu->capturedRows().vocab) << what;
    EXPECT_LE(relativeError(copy(gpu->capturedRows()), wantCaptured), 1e-4) << what;
    EXPECT_EQ(gpu->kvCache().length(0), cpu->kvCache().length(0)) << what;
  };
  for (Backend *backend : {static_cast<Backend *>(cpu.get()), static_cast<Backend *>(gpu.get())})
    ASSERT_TRUE(backend->reserve(16, 16).isOk());
  // The target over [0, 10), every row captured ([10, 2H]).
  both(sampling::ForwardSpec::of(Mode::full, ids.data(), 10, 10, {9, 10}), "target");
  ASSERT_EQ(cpu->capturedRows().vocab, 2 * hidden);
  for (int64_t r = 0; r < 4; ++r)
    context.insert(context.end(), cpu->capturedRows().row(r), cpu->capturedRows().row(r) + hidden);
  // The drafter extends [0, 14) over the cached [0, 10) (its layers' first fill): 4 input rows,
  // then the embedding; then [3, 14), rewriting [3, 10) of its layers.
  sampling::ForwardSpec draft =
      sampling::ForwardSpec::of(Mode::extend, ids.data(), 14, 10, {10, 14});
  draft.function = "draft";
  draft.input = context.data();
  draft.inputWidth = hidden;
  draft.inputRows = 4;
  both(draft, "draft extend from 0");
  draft.first = 3;
  draft.rows = {7, 11};
  both(draft, "draft extend");
  EXPECT_EQ(gpu->kvCache().length(0), 10);
  EXPECT_EQ(gpu->capturedRows().data, nullptr);
  // Both functions over the cache the extend left: the drafter sees its rewritten layers.
  both(sampling::ForwardSpec::of(Mode::cached, ids.data(), 12, 10, {0, 2}), "target cached");
  sampling::ForwardSpec cached =
      sampling::ForwardSpec::of(Mode::cached, ids.data(), 12, 10, {0, 2});
  cached.function = "draft";
  both(cached, "draft cached");
  // A second extend of the same shape replays its graph.
  both(draft, "draft extend again");
}

// Speculative decoding's records packed: a target prefill of two sequences captures every fed
// row of both, in order; the drafter's extends over both (forward_input rows at each part's
// offset, select_input_rows splitting each part where its input ends) and cached forwards of
// either function give each part's rows bit for bit as alone.
TEST_P(CudaSpeculativeTest, PackedCaptureForwardInputAndExtendGetTheirOwnBits) {
  using Mode = sampling::ForwardSpec::Mode;
  batchInvariant = true;
  std::unique_ptr<CudaBackend> alone = cudaBackend(/*graphs=*/true);
  std::unique_ptr<CudaBackend> packed = cudaBackend(/*graphs=*/true);
  ASSERT_TRUE(alone && packed);
  ASSERT_TRUE(alone->reservePacked(32, 32).isOk());
  ASSERT_TRUE(packed->reservePacked(32, 32).isOk());
  const int64_t hidden = tiny->options().hidden;
  std::vector<int32_t> a = tokens(14), b = tokens(12);
  std::rotate(b.begin(), b.begin() + 4, b.end());
  std::vector<kv::SequenceId> sequences;
  for (int i = 0; i < 2; ++i) {
    StatusOr<kv::SequenceId> one = alone->createSequence(), other = packed->createSequence();
    ASSERT_TRUE(one && other);
    sequences.push_back(*one);
  }
  checkPacked(*alone, *packed, sequences, "",
              {sampling::ForwardSpec::of(Mode::full, a.data(), 10, 10, {9, 10}),
               sampling::ForwardSpec::of(Mode::full, b.data(), 8, 8, {0, 2})},
              "target prefills");
  // Context rows for the drafter: the first captured rows' first halves.
  const sampling::LogitsView captured = packed->capturedRows();
  ASSERT_EQ(captured.rows, 18);
  std::vector<float> contextA, contextB;
  for (int64_t r = 0; r < 4; ++r) {
    contextA.insert(contextA.end(), captured.row(r), captured.row(r) + hidden);
    contextB.insert(contextB.end(), captured.row(10 + r), captured.row(10 + r) + hidden);
  }
  auto draft = [&](std::vector<int32_t> &ids, int64_t count, int64_t keep, int64_t first,
                   sampling::LogitRows rows, std::vector<float> &context, int64_t inputRows) {
    sampling::ForwardSpec spec = sampling::ForwardSpec::of(Mode::extend, ids.data(), count, keep,
                                                           rows);
    spec.first = first;
    spec.input = context.data();
    spec.inputWidth = hidden;
    spec.inputRows = inputRows;
    return spec;
  };
  checkPacked(*alone, *packed, sequences, "draft",
              {draft(a, 14, 10, 0, {10, 14}, contextA, 4), draft(b, 12, 8, 0, {0, 3}, contextB, 3)},
              "draft extends from 0");
  checkPacked(*alone, *packed, sequences, "draft",
              {draft(a, 14, 10, 3, {7, 11}, contextA, 4), draft(b, 12, 8, 5, {0, 7}, contextB, 2)},
              "draft extends");
  checkPacked(*alone, *packed, sequences, "",
              {sampling::ForwardSpec::of(Mode::cached, a.data(), 12, 10, {0, 2}),
               sampling::ForwardSpec::of(Mode::cached, b.data(), 11, 8, {1, 3})},
              "target cached");
  checkPacked(*alone, *packed, sequences, "draft",
              {sampling::ForwardSpec::of(Mode::cached, a.data(), 12, 10, {0, 2}),
               sampling::ForwardSpec::of(Mode::cached, b.data(), 11, 8, {1, 3})},
              "draft cached");
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaSpeculativeTest,
                         ::testing::ValuesIn(std::vector<Variant>{variants()[0], variants()[4]}),
                         [](const ::testing::TestParamInfo<Variant> &info) {
                           return std::string(info.param.name);
                         });

INSTANTIATE_TEST_SUITE_P(Variants, CudaBackendTest, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant> &info) {
                           return std::string(info.param.name);
                         });

// The serving engine on the emulated device (docs/design/serving.md, issue 14): requests
// generate()d from several threads at once, with and without the prefix cache (cached blocks
// over a committed prefix) and at different step counts, decode exactly what each decodes alone
// on a one-request batch-invariant session of the same backend, and runs packed several of them.
// Each request alone on a one-request cuda-emu session, then all of them at once through an
// Engine on cuda-emu (the first `leading` ones before the others); outputs must be equal. Returns
// the engine's statistics; skips when the emulated device is not in this build.
std::optional<engine::SchedulerStats>
checkEngineDecodesAsAlone(TinyModelOptions options, int requests, int leading,
                          const std::function<GenerateRequest(int)> &request) {
  pointEmulatorCacheAtBuildTree();
  std::unique_ptr<GeneratedKernels> kernels = generateKernels(options, codegen::ElementType::f32);
  TempDir dir;
  TinyModel(options).write(dir.file("tiny.dlm"));
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(dir.file("tiny.dlm"));
  EXPECT_TRUE(model) << model.status().message();
  if (!model)
    return std::nullopt;
  SessionOptions single;
  single.backend = "cuda-emu";
  single.batchInvariant = true;
  single.threads = 2;
  single.kvPageTokens = kPageSize;
  StatusOr<std::unique_ptr<Session>> session = Session::create(*model, single);
  if (!session && session.status().message().find("unknown backend") != std::string::npos)
    return std::nullopt;
  EXPECT_TRUE(session) << session.status().message();
  if (!session)
    return std::nullopt;
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < requests; ++i) {
    StatusOr<GenerateResult> out = (*session)->generate(request(i));
    EXPECT_TRUE(out) << out.status().message();
    alone.push_back(out ? out->outputIds : std::vector<int32_t>{});
  }
  session->reset();

  engine::EngineOptions engineOptions;
  engineOptions.session = single;
  engineOptions.session.kvPages = 64;
  engineOptions.tokensPerForward = 64;
  StatusOr<std::unique_ptr<engine::Engine>> served = engine::Engine::create(*model, engineOptions);
  EXPECT_TRUE(served) << served.status().message();
  if (!served)
    return std::nullopt;
  std::vector<std::vector<int32_t>> together(requests);
  std::vector<std::string> errors(requests);
  auto run = [&](int i) {
    StatusOr<GenerateResult> out = (*served)->generate(request(i));
    if (out)
      together[i] = out->outputIds;
    else
      errors[i] = out.status().message();
  };
  for (int i = 0; i < leading; ++i)
    run(i);
  std::vector<std::thread> threads;
  for (int i = leading; i < requests; ++i)
    threads.emplace_back(run, i);
  for (std::thread &t : threads)
    t.join();
  for (int i = 0; i < requests; ++i) {
    EXPECT_EQ(errors[i], "") << "request " << i;
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
  }
  return (*served)->stats();
}

TEST(CudaEngine, ConcurrentRequestsDecodeAsAlone) {
  std::optional<engine::SchedulerStats> stats =
      checkEngineDecodesAsAlone(baseOptions(), 6, 0, [](int i) {
        GenerateRequest r;
        for (int t = 0; t < 2 + 3 * (i % 4); ++t)
          r.promptIds.push_back(static_cast<int32_t>(2 + (i * 7 + t * 3) % 30));
        r.knobs["gen_length"] = int64_t(8);
        r.knobs["block_length"] = int64_t(4);
        r.knobs["steps"] = int64_t(i % 3 == 0 ? 4 : 8);
        if (i % 2)
          r.knobs["cache"] = std::string("prefix");
        r.seed = static_cast<uint64_t>(i);
        return r;
      });
  if (!stats)
    GTEST_SKIP() << "the emulated CUDA device is not in this build";
  EXPECT_GT(stats->mostPerRun, 1);
  EXPECT_EQ(stats->prefixTokensReused, 0) << "a bidirectional model shares no prefix pages";
}

// A causal model's prefills adopt the pages an earlier request published (the first three of
// every prompt), on the device's KV pool.
TEST(CudaEngine, SharedPromptPrefixesAreAdoptedAndDecodeAsAlone) {
  TinyModelOptions options = baseOptions();
  options.causal = true;
  options.policy = "autoregressive";
  std::optional<engine::SchedulerStats> stats =
      checkEngineDecodesAsAlone(options, 4, 1, [](int i) {
        GenerateRequest r;
        for (int t = 0; t < 12; ++t)
          r.promptIds.push_back(static_cast<int32_t>(2 + (t * 7) % 30));
        for (int t = 0; t < 1 + i; ++t)
          r.promptIds.push_back(static_cast<int32_t>(3 + (i * 5 + t) % 29));
        r.knobs["max_new_tokens"] = int64_t(4);
        r.seed = static_cast<uint64_t>(i);
        return r;
      });
  if (!stats)
    GTEST_SKIP() << "the emulated CUDA device is not in this build";
  EXPECT_GE(stats->prefixTokensReused, 12 * 3);
}

// An artifact truncated by another program while a cuda-emu session uses it (issue 15, faults):
// kernel modules load when first needed (the device loop's kernels at the first generation), and
// they load from the copy the backend made at open, not from the mapping, which would raise
// SIGBUS now.
TEST(CudaArtifactFault, TruncatedAfterTheSessionOpenedKeepsGenerating) {
  pointEmulatorCacheAtBuildTree();
  TinyModelOptions options = baseOptions();
  std::unique_ptr<GeneratedKernels> kernels = generateKernels(options, codegen::ElementType::f32);
  TempDir dir;
  const std::string path = dir.file("tiny.dlm");
  TinyModel(options).write(path);
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(path);
  ASSERT_TRUE(model) << model.status().message();
  SessionOptions cuda;
  cuda.backend = "cuda-emu";
  cuda.threads = 2;
  cuda.kvPageTokens = kPageSize;
  StatusOr<std::unique_ptr<Session>> session = Session::create(*model, cuda);
  if (!session && session.status().message().find("unknown backend") != std::string::npos)
    GTEST_SKIP() << "the emulated CUDA device is not in this build";
  ASSERT_TRUE(session) << session.status().message();
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  GenerateRequest request;
  request.promptIds = {3, 4, 5};
  request.knobs["gen_length"] = int64_t(8);
  request.knobs["block_length"] = int64_t(4);
  request.knobs["steps"] = int64_t(8);
  StatusOr<GenerateResult> out = (*session)->generate(request);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(out->outputIds.size(), 8u);
}

// Kernel target choice for a real device: its own cubin, else the nearest lower PTX, else an
// error naming what the artifact has.
TEST(KernelTargetChoice, CubinThenNearestLowerPtxThenANamedError) {
  const uint8_t cubin[] = {1, 2, 3};
  auto target = [&](const char *name, bool withCubin, bool withPtx) {
    artifact::KernelTarget t;
    t.target = name;
    artifact::Kernel k;
    k.name = "dlm_rms_norm";
    k.kind = "rms_norm";
    if (withCubin)
      k.cubin = {cubin, sizeof(cubin)};
    if (withPtx)
      k.ptx = ".version 8.0";
    k.source = "extern \"C\" __global__ void dlm_rms_norm() {}";
    t.kernels.push_back(k);
    return t;
  };
  artifact::KernelTarget cpu;
  cpu.target = "cpu";
  const std::vector<artifact::KernelTarget> targets = {
      cpu, target("sm_80", true, true), target("sm_90", true, false)};

  StatusOr<KernelTargetChoice> exact = chooseKernelTarget(targets, 90);
  ASSERT_TRUE(exact.isOk()) << exact.status().message();
  EXPECT_EQ(exact->target->target, "sm_90");
  EXPECT_EQ(exact->code, KernelCode::cubin);

  // sm_89 and sm_100: no cubin of their own; sm_80's PTX is the nearest lower (sm_90 has none).
  for (int architecture : {89, 100}) {
    StatusOr<KernelTargetChoice> jit = chooseKernelTarget(targets, architecture);
    ASSERT_TRUE(jit.isOk()) << jit.status().message();
    EXPECT_EQ(jit->target->target, "sm_80");
    EXPECT_EQ(jit->code, KernelCode::ptx);
    EXPECT_EQ(jit->description,
              "sm_80 (PTX, JIT-compiled for sm_" + std::to_string(architecture) + ")");
  }

  StatusOr<KernelTargetChoice> old = chooseKernelTarget(targets, 75);
  ASSERT_FALSE(old.isOk());
  EXPECT_EQ(old.status().message(), "artifact has no kernels for sm_75 (it has sm_80, sm_90); "
                                    "recompile with dlmc compile --target cuda");

  StatusOr<KernelTargetChoice> emulated = chooseKernelTarget(targets, kEmulatedArchitecture);
  ASSERT_TRUE(emulated.isOk());
  EXPECT_EQ(emulated->code, KernelCode::source);

  StatusOr<KernelTargetChoice> none = chooseKernelTarget({cpu}, 90);
  ASSERT_FALSE(none.isOk());
  EXPECT_EQ(none.status().message(),
            "artifact has no CUDA kernels; compile it with --target cuda or all");

  // Kernels generated before their arguments last changed are refused, not launched.
  EXPECT_TRUE(checkKernelArguments({1, artifact::kSchemaMinor}).isOk());
  Status older = checkKernelArguments({1, 7});
  ASSERT_FALSE(older.isOk());
  EXPECT_EQ(older.message(), "artifact schema 1.7: its CUDA kernels take the arguments of an "
                             "older dlmc (they changed in 1.8); recompile it with this dlmc");
}

// At bf16 device precision (weights, activations and K/V pages rounded to bf16, fp32
// accumulation) the forward stays close to the reference: bf16 has 8 bits of mantissa, so the
// bound is a few percent of the largest logit, not f32's 1e-4.
TEST(CudaBackendBf16, ForwardStaysNearTheReference) {
  TempDir dir;
  TinyModelOptions options = baseOptions();
  options.qkvBias = true;
  options.logitShift = true;
  std::unique_ptr<GeneratedKernels> kernels = generateKernels(options, codegen::ElementType::bf16);
  TinyModel tiny(options);
  BackendOptions backendOptions;
  backendOptions.kvPageTokens = kPageSize;
  std::unique_ptr<StandaloneBackend> created =
      createStandalone(tiny, dir, "bf16.dlm", backendOptions);
  StatusOr<std::unique_ptr<CudaBackend>> &backend = created->backend;
  ASSERT_TRUE(backend.isOk()) << backend.status().message();
  EXPECT_EQ((*backend)->precision(), DeviceElement::bf16);
  const int64_t count = 10;
  std::vector<int32_t> ids(count);
  for (int64_t i = 0; i < count; ++i)
    ids[i] = static_cast<int32_t>((i * 7 + 3) % options.vocab);
  ASSERT_TRUE((*backend)->reserve(count, count).isOk());
  StatusOr<sampling::LogitsView> logits = (*backend)->forwardFull(ids.data(), count, 4, {0, count});
  ASSERT_TRUE(logits.isOk()) << logits.status().message();
  const std::vector<double> reference = tiny.referenceLogits(ids);
  const double error =
      relativeError(copy(*logits), std::vector<float>(reference.begin(), reference.end()));
  EXPECT_LE(error, 3e-2);
  EXPECT_GT(error, 0.0); // it really ran in bf16
}

TEST(CudaBackendErrors, ArtifactWithoutCudaKernelsIsANamedError) {
  TempDir dir;
  TinyModel tiny(baseOptions());
  std::unique_ptr<StandaloneBackend> created =
      createStandalone(tiny, dir, "cpu.dlm", BackendOptions{});
  const StatusOr<std::unique_ptr<CudaBackend>> &backend = created->backend;
  ASSERT_FALSE(backend.isOk());
  EXPECT_EQ(backend.status().message(),
            "artifact has no CUDA kernels; compile it with --target cuda or all");
}

TEST(CudaBackendErrors, APageSizeOtherThanTheKernelsIsNotSupportedYet) {
  TempDir dir;
  TinyModelOptions options = baseOptions();
  std::unique_ptr<GeneratedKernels> kernels = generateKernels(options, codegen::ElementType::f32);
  TinyModel tiny(options);
  BackendOptions backendOptions;
  backendOptions.kvPageTokens = 2 * kPageSize;
  std::unique_ptr<StandaloneBackend> created =
      createStandalone(tiny, dir, "paged.dlm", backendOptions);
  const StatusOr<std::unique_ptr<CudaBackend>> &backend = created->backend;
  ASSERT_FALSE(backend.isOk());
  EXPECT_EQ(backend.status().message(),
            "not supported yet: a KV page of 8 tokens on the cuda backend, whose kernels were "
            "generated for pages of 4 (the page size is fixed when dlmc compiles them)");
}

// What the backend cannot run is refused by name when it binds the program (supports()).
TEST(CudaBackendErrors, SupportsNamesTheRecordsItCannotRun) {
  TempDir dir;
  TinyModelOptions options = baseOptions();
  std::unique_ptr<GeneratedKernels> kernels = generateKernels(options, codegen::ElementType::f32);
  TinyModel tiny(options);
  BackendOptions backendOptions;
  backendOptions.kvPageTokens = kPageSize;
  std::unique_ptr<StandaloneBackend> created =
      createStandalone(tiny, dir, "supports.dlm", backendOptions);
  ASSERT_TRUE(created->backend.isOk()) << created->backend.status().message();
  const CudaBackend &backend = **created->backend;
  program::ProgramRecord norm;
  norm.fullName = "layers.0.attn_norm";
  spec::kernels::RmsNormParams normParams;
  normParams.weight.name = "layers.0.attn_norm";
  norm.params = normParams;
  EXPECT_EQ(backend.supports(norm).message(),
            "kernel record 'layers.0.attn_norm' names no CUDA kernel; recompile with dlmc "
            "compile --target cuda");
  norm.cudaKernel = "dlm_rms_norm_w32_f32";
  EXPECT_TRUE(backend.supports(norm).isOk());
  program::ProgramRecord linear;
  linear.params = spec::kernels::LinearParams{}; // a cuBLASLt GEMM: no kernel of its own
  EXPECT_TRUE(backend.supports(linear).isOk());
  // DiffusionGemma's functions, kinds and parameters run (their kernels are checked against the
  // record when the program is bound); a record without a kernel is still named.
  linear.function = "decode";
  linear.fullName = "layers.0.q_proj";
  EXPECT_TRUE(backend.supports(linear).isOk());
  for (const spec::kernels::KernelParams &params :
       {spec::kernels::KernelParams{spec::kernels::AddParams{}},
        {spec::kernels::MoeParams{}},
        {spec::kernels::ScaleParams{}},
        {spec::kernels::GeluMulParams{}},
        {spec::kernels::SoftEmbeddingParams{}}}) {
    program::ProgramRecord record;
    record.params = params;
    record.fullName = "layers.0.x";
    EXPECT_EQ(backend.supports(record).message(),
              "kernel record 'layers.0.x' names no CUDA kernel; recompile with dlmc compile "
              "--target cuda");
    record.cudaKernel = "k";
    EXPECT_TRUE(backend.supports(record).isOk());
  }
  norm.params = spec::kernels::RmsNormParams{};
  EXPECT_TRUE(backend.supports(norm).isOk());
  program::ProgramRecord rope;
  rope.fullName = "layers.0.rope";
  rope.cudaKernel = "k";
  spec::kernels::RopeParams ropeParams;
  ropeParams.headDim = 16;
  ropeParams.rotatedPairs = 0;
  rope.params = ropeParams;
  EXPECT_EQ(backend.supports(rope).message(),
            "not supported yet: a rope record that rotates no pair (record 'layers.0.rope') on "
            "cuda");
  program::ProgramRecord head;
  head.fullName = "lm_head";
  spec::kernels::LmHeadParams headParams;
  headParams.softcap = 30;
  head.params = headParams;
  head.cudaKernel = "dlm_softcap_30";
  EXPECT_TRUE(backend.supports(head).isOk());
}

TEST(CudaBackendErrors, MissingKernelNamesWhatTheArtifactHas) {
  TempDir dir;
  TinyModelOptions options = baseOptions();
  std::unique_ptr<GeneratedKernels> kernels = generateKernels(options, codegen::ElementType::f32);
  // Drop the kv_store kernel.
  auto &records = kernels->target.kernels;
  records.erase(std::remove_if(records.begin(), records.end(),
                               [](const artifact::Kernel &k) { return k.kind == "kv_store"; }),
                records.end());
  options.kernelTargets = {kernels->program, kernels->target};
  TinyModel tiny(options);
  std::unique_ptr<StandaloneBackend> created =
      createStandalone(tiny, dir, "partial.dlm", BackendOptions{});
  const StatusOr<std::unique_ptr<CudaBackend>> &backend = created->backend;
  ASSERT_FALSE(backend.isOk());
  EXPECT_EQ(backend.status().message().rfind("artifact has no kernel dlm_kv_store_", 0), 0u)
      << backend.status().message();
}

// The declared launcher runs a kernel only as its generator declared it: a kernel whose declared
// launch is gone, or names a parameter the record does not have, is refused at load by name.
TEST(CudaBackendErrors, AKernelsDeclaredLaunchMustFitItsRecord) {
  auto loadWith = [](const std::function<void(artifact::Attributes &)> &edit) {
    TempDir dir;
    TinyModelOptions options = baseOptions();
    std::unique_ptr<GeneratedKernels> kernels = generateKernels(options, codegen::ElementType::f32);
    for (artifact::Kernel &k : kernels->target.kernels)
      if (k.kind == "embedding")
        edit(k.parameters);
    options.kernelTargets = {kernels->program, kernels->target};
    TinyModel tiny(options);
    BackendOptions backendOptions;
    backendOptions.kvPageTokens = kPageSize;
    std::unique_ptr<StandaloneBackend> created =
        createStandalone(tiny, dir, "declared.dlm", backendOptions);
    return created->backend.isOk() ? std::string() : created->backend.status().message();
  };
  EXPECT_EQ(loadWith([](artifact::Attributes &) {}), "");
  const std::string none =
      loadWith([](artifact::Attributes &a) { a.erase(std::string(spec::kernels::kLaunchGrid)); });
  EXPECT_NE(none.find("its kernel declares no launch; recompile with dlmc compile --target cuda"),
            std::string::npos)
      << none;
  const std::string parameter = loadWith([](artifact::Attributes &a) {
    a[std::string(spec::kernels::kLaunchArguments)] =
        std::string("tokens,rows,weight:table,weight_rows:weight,result,result_stride");
  });
  EXPECT_NE(parameter.find("its kernel reads parameter 'table', which the record has not as a "
                           "weight"),
            std::string::npos)
      << parameter;
}

} // namespace
} // namespace dlm::cuda
