// DiffusionGemma's forwards on the CPU against transformers 5.23's (the fixtures of
// tests/reference/diffusion_gemma/, docs/design/diffusion-gemma.md §8): dlmc compiles each fixture
// checkpoint; the prompt goes through the encoder function (causal, K/V kept), then the recorded
// canvas through the decoder function twice, without self-conditioning and with the recorded
// self-conditioning logits. Both decoder logits must match transformers' over the whole [C, V]
// tensor: relative error ||a - b|| / ||b|| <= 1e-4 for the float32 checkpoint. The bf16
// checkpoint is computed by transformers in bf16 throughout and by dlm in float32 over the bf16
// weights: dlm must be within 1e-4 of the float32 reading of that checkpoint (dg_reference.py in
// float32, f32_forwards.py), and within 5e-2 of transformers, the bf16 rounding that float32
// reading itself shows against transformers (0.040 without, 0.030 with self-conditioning).
//
// The same forwards run on the emulated CUDA device (cuda-emu, where the build has it): the
// fixtures compiled with --target all --precision f32, so the generated kernels compute in float32
// (embedding scale, weightless norms, proportional RoPE, windowed and scaled attention, GELU,
// layer scales, soft embedding, experts, soft-capped head) and are held to the same bounds.
#include "runtime/artifact/ArtifactReader.h"
#include "runtime/backend/BackendRegistry.h"
#include "runtime/model/ModelWeights.h"
#include "tests/runtime/NpyArray.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace dlm {
namespace {

using testing::NpyArray;
using testing::readNpy;

struct Fixture {
  const char *name;
  const char *backend; // "cpu" or "cuda-emu"
  double bound; // relative error of the whole logits tensor against transformers
  // replay/fwd_raw_{nosc,sc}_f32.npy and step_raw_logits_f32.npy exist: the float32 reading,
  // held to 1e-4.
  bool f32Reading;
  // Against transformers over the whole trace: bf16 rounding grows along it (the float32 reading
  // itself is up to 0.0999 from transformers on tiny_bf16's 19 steps).
  double traceBound;
};

constexpr double kFloat32Bound = 1e-4;

std::vector<float> floats(const NpyArray &a) {
  std::vector<float> out(static_cast<size_t>(a.size()));
  for (int64_t i = 0; i < a.size(); ++i)
    out[static_cast<size_t>(i)] = a.at<float>(i);
  return out;
}

double relativeError(const sampling::LogitsView &got, const NpyArray &want) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double b = want.at<float>(i), a = got.data[i];
    diff += (a - b) * (a - b);
    norm += b * b;
  }
  return std::sqrt(diff / norm);
}

class DiffusionGemmaForwardTest : public ::testing::TestWithParam<Fixture> {};

TEST_P(DiffusionGemmaForwardTest, DecoderLogitsMatchTransformers) {
  const Fixture fixture = GetParam();
  const std::string dir = std::string(DLM_DIFFUSION_GEMMA_FIXTURES) + "/" + fixture.name;
  const std::string backendName = fixture.backend;
  const bool cpu = backendName == "cpu";
  const std::string artifactPath =
      ::testing::TempDir() + "/dg_" + fixture.name + "_" + backendName + ".dlm";
  // The device kernels at float32, comparable with the CPU's float32 computation.
  const std::string command = std::string(DLM_DLMC) + " compile " + dir + " -o " + artifactPath +
                              (cpu ? "" : " --target all --precision f32");
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
#ifdef DLM_TEST_EMU_CACHE_DIR
  ::setenv("DLM_EMU_CACHE_DIR", DLM_TEST_EMU_CACHE_DIR, 0);
#endif

  StatusOr<artifact::ArtifactReader> reader = artifact::ArtifactReader::open(artifactPath);
  ASSERT_TRUE(reader) << reader.status().message();
  StatusOr<std::shared_ptr<const model::ModelWeights>> weights =
      model::ModelWeights::load(*reader);
  ASSERT_TRUE(weights) << weights.status().message();
  BackendOptions options;
  options.threads = 1;
  options.maxSequenceLength = 64;
  options.kvPageTokens = 16; // the page size dlmc generates the device kernels for
  const BackendSource source{*reader, [&] { return *weights; }, options};
  StatusOr<std::unique_ptr<Backend>> backend =
      BackendRegistry::builtin().create(backendName, source);
  ASSERT_TRUE(backend) << backend.status().message();

  StatusOr<NpyArray> prompt = readNpy(dir + "/replay/prompt_ids.npy"),
                     canvas = readNpy(dir + "/replay/fwd_canvas.npy"),
                     rawNoSc = readNpy(dir + "/replay/fwd_raw_nosc.npy"),
                     scLogits = readNpy(dir + "/replay/fwd_sc_logits.npy"),
                     rawSc = readNpy(dir + "/replay/fwd_raw_sc.npy");
  for (auto *array : {&prompt, &canvas, &rawNoSc, &scLogits, &rawSc})
    ASSERT_TRUE(*array) << array->status().message();
  const int64_t promptLength = prompt->size(), canvasLength = canvas->size();
  const int64_t vocab = rawNoSc->shape.back();
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < promptLength; ++i)
    tokens.push_back(prompt->at<int32_t>(i));
  for (int64_t i = 0; i < canvasLength; ++i)
    tokens.push_back(canvas->at<int32_t>(i));
  const int64_t total = promptLength + canvasLength;
  ASSERT_TRUE((*backend)->reserve(total, canvasLength).isOk());

  using Mode = sampling::ForwardSpec::Mode;
  sampling::ForwardSpec encode =
      sampling::ForwardSpec::of(Mode::full, tokens.data(), promptLength, promptLength, {0, 0});
  encode.function = "encode";
  StatusOr<sampling::LogitsView> encoded = (*backend)->forward(encode);
  ASSERT_TRUE(encoded) << encoded.status().message();

  sampling::ForwardSpec decode = sampling::ForwardSpec::of(Mode::cached, tokens.data(), total,
                                                           promptLength, {0, canvasLength});
  decode.function = "decode";
  StatusOr<sampling::LogitsView> noSc = (*backend)->forward(decode);
  ASSERT_TRUE(noSc) << noSc.status().message();
  ASSERT_EQ(noSc->rows * noSc->vocab, rawNoSc->size());
  const double errorNoSc = relativeError(*noSc, *rawNoSc);
  EXPECT_LE(errorNoSc, fixture.bound) << "first decoder forward, no self-conditioning";
  auto checkF32Reading = [&](const sampling::LogitsView &got, const char *name) {
    if (!fixture.f32Reading)
      return;
    StatusOr<NpyArray> reading = readNpy(dir + "/replay/" + name + ".npy");
    ASSERT_TRUE(reading) << reading.status().message();
    const double error = relativeError(got, *reading);
    EXPECT_LE(error, kFloat32Bound) << name;
    std::printf("%s on %s: relative error against the float32 reading (%s) %.3g\n",
                fixture.name, fixture.backend, name, error);
  };
  checkF32Reading(*noSc, "fwd_raw_nosc_f32");

  const std::vector<float> sc = floats(*scLogits);
  decode.input = sc.data();
  decode.inputWidth = vocab;
  StatusOr<sampling::LogitsView> withSc = (*backend)->forward(decode);
  ASSERT_TRUE(withSc) << withSc.status().message();
  const double errorSc = relativeError(*withSc, *rawSc);
  EXPECT_LE(errorSc, fixture.bound) << "decoder forward with self-conditioning";
  checkF32Reading(*withSc, "fwd_raw_sc_f32");
  std::printf("%s on %s: relative error without self-conditioning %.3g, with %.3g (bound %.3g)\n",
              fixture.name, fixture.backend, errorNoSc, errorSc, fixture.bound);
}

std::vector<Fixture> fixtures() {
  std::vector<Fixture> all = {Fixture{"tiny_f32_swa", "cpu", kFloat32Bound, false, kFloat32Bound},
                              Fixture{"tiny_bf16", "cpu", 5e-2, true, 0.15}};
#ifdef DLM_TEST_EMU_CACHE_DIR
  all.push_back(Fixture{"tiny_f32_swa", "cuda-emu", kFloat32Bound, false, kFloat32Bound});
  all.push_back(Fixture{"tiny_bf16", "cuda-emu", 5e-2, true, 0.15});
#endif
  return all;
}

// Every decoder forward of transformers' generate() run, on dlm's forwards: the prompt encoded,
// each canvas committed (append mode, the encoder over the committed canvas) before the next one
// starts, every step's decoder input as transformers fed it, self-conditioned on the previous
// step's recorded logits / T (none on a canvas's first step). This covers the commit, the decoder
// over a cache longer than the sliding window, and the self-conditioning of later steps.
TEST_P(DiffusionGemmaForwardTest, EveryStepOfTheTraceMatchesTransformers) {
  const Fixture fixture = GetParam();
  const std::string dir = std::string(DLM_DIFFUSION_GEMMA_FIXTURES) + "/" + fixture.name;
  const std::string backendName = fixture.backend;
  const std::string artifactPath =
      ::testing::TempDir() + "/dg_trace_" + fixture.name + "_" + backendName + ".dlm";
  const std::string command = std::string(DLM_DLMC) + " compile " + dir + " -o " + artifactPath +
                              (backendName == "cpu" ? "" : " --target all --precision f32");
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  StatusOr<artifact::ArtifactReader> reader = artifact::ArtifactReader::open(artifactPath);
  ASSERT_TRUE(reader) << reader.status().message();
  StatusOr<std::shared_ptr<const model::ModelWeights>> weights =
      model::ModelWeights::load(*reader);
  ASSERT_TRUE(weights) << weights.status().message();
  BackendOptions options;
  options.threads = 1;
  options.maxSequenceLength = 64;
  options.kvPageTokens = 16;
  const BackendSource source{*reader, [&] { return *weights; }, options};
  StatusOr<std::unique_ptr<Backend>> backend =
      BackendRegistry::builtin().create(backendName, source);
  ASSERT_TRUE(backend) << backend.status().message();

  auto read = [&](const char *name) {
    StatusOr<NpyArray> array = readNpy(dir + "/replay/" + name + ".npy");
    EXPECT_TRUE(array) << array.status().message();
    return array ? std::move(*array) : NpyArray{};
  };
  const NpyArray prompt = read("prompt_ids"), committed = read("committed"),
                 stepCanvas = read("step_canvas"), inputs = read("step_decoder_input_ids"),
                 raw = read("step_raw_logits"), temperature = read("step_temperature");
  const NpyArray reading = fixture.f32Reading ? read("step_raw_logits_f32") : NpyArray{};
  ASSERT_EQ(raw.shape.size(), 3u);
  const int64_t steps = raw.shape[0], C = raw.shape[1], V = raw.shape[2];
  const int64_t P0 = prompt.size();
  std::vector<int32_t> sequence;
  for (int64_t i = 0; i < P0; ++i)
    sequence.push_back(prompt.at<int32_t>(i));
  ASSERT_TRUE((*backend)->reserve(P0 + committed.shape[0] * C, C).isOk());

  using Mode = sampling::ForwardSpec::Mode;
  sampling::ForwardSpec encode =
      sampling::ForwardSpec::of(Mode::full, sequence.data(), P0, P0, {0, 0});
  encode.function = "encode";
  ASSERT_TRUE((*backend)->forward(encode));

  int64_t canvas = 0;
  double worst = 0;
  std::vector<float> previous(static_cast<size_t>(C * V));
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t k = stepCanvas.at<int32_t>(s);
    const bool firstOfCanvas = s == 0 || k != canvas;
    if (k != canvas) {
      // The commit of canvas k - 1: its argmax tokens through the encoder, kept in the cache.
      ASSERT_EQ(k, canvas + 1);
      sequence.resize(static_cast<size_t>(P0 + canvas * C));
      for (int64_t j = 0; j < C; ++j)
        sequence.push_back(committed.at<int32_t>(canvas * C + j));
      sampling::ForwardSpec commit = sampling::ForwardSpec::of(
          Mode::append, sequence.data(), P0 + k * C, P0 + canvas * C, {0, 0});
      commit.function = "encode";
      ASSERT_TRUE((*backend)->forward(commit)) << "commit of canvas " << canvas;
      canvas = k;
    }
    sequence.resize(static_cast<size_t>(P0 + k * C));
    for (int64_t j = 0; j < C; ++j)
      sequence.push_back(inputs.at<int32_t>(s * C + j));
    sampling::ForwardSpec decode = sampling::ForwardSpec::of(
        Mode::cached, sequence.data(), P0 + (k + 1) * C, P0 + k * C, {0, C});
    decode.function = "decode";
    if (!firstOfCanvas) {
      const float T = temperature.at<float>(s - 1);
      for (int64_t i = 0; i < C * V; ++i)
        previous[static_cast<size_t>(i)] = raw.at<float>((s - 1) * C * V + i) / T;
      decode.input = previous.data();
      decode.inputWidth = V;
    }
    StatusOr<sampling::LogitsView> logits = (*backend)->forward(decode);
    ASSERT_TRUE(logits) << "step " << s << ": " << logits.status().message();
    ASSERT_EQ(logits->rows * logits->vocab, C * V);
    auto errorAgainst = [&](const NpyArray &want) {
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < C * V; ++i) {
        const double b = want.at<float>(s * C * V + i), a = logits->data[i];
        diff += (a - b) * (a - b);
        norm += b * b;
      }
      return std::sqrt(diff / norm);
    };
    const double error = errorAgainst(raw);
    worst = std::max(worst, error);
    EXPECT_LE(error, fixture.traceBound) << "step " << s << " (canvas " << k << ")";
    if (fixture.f32Reading)
      EXPECT_LE(errorAgainst(reading), kFloat32Bound)
          << "step " << s << " (canvas " << k << ") against the float32 reading";
  }
  std::printf("%s on %s: %lld steps over %lld canvases, worst relative error %.3g (bound %.3g)\n",
              fixture.name, fixture.backend, static_cast<long long>(steps),
              static_cast<long long>(canvas + 1), worst, fixture.traceBound);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DiffusionGemmaForwardTest, ::testing::ValuesIn(fixtures()),
                         [](const auto &info) {
                           std::string name = std::string(info.param.name) + "_" +
                                              info.param.backend;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

} // namespace
} // namespace dlm
