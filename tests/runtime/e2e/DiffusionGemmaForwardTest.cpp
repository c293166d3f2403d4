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
#include "runtime/artifact/ArtifactReader.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/model/ModelWeights.h"
#include "tests/runtime/NpyArray.h"

#include <gtest/gtest.h>

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
  double bound; // relative error of the whole logits tensor against transformers
  // replay/fwd_raw_{nosc,sc}_f32.npy exist: the float32 reading, held to 1e-4.
  bool f32Reading;
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
  const std::string artifactPath = ::testing::TempDir() + "/dg_" + fixture.name + ".dlm";
  const std::string command = std::string(DLM_DLMC) + " compile " + dir + " -o " + artifactPath;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  StatusOr<artifact::ArtifactReader> reader = artifact::ArtifactReader::open(artifactPath);
  ASSERT_TRUE(reader) << reader.status().message();
  StatusOr<std::shared_ptr<const model::ModelWeights>> weights =
      model::ModelWeights::load(*reader);
  ASSERT_TRUE(weights) << weights.status().message();
  BackendOptions options;
  options.threads = 1;
  options.maxSequenceLength = 64;
  StatusOr<std::unique_ptr<cpu::CpuBackend>> backend =
      cpu::CpuBackend::create(*weights, reader->findKernelTarget("cpu")->kernels,
                              reader->config().maxPositions, options);
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
    std::printf("%s: relative error against the float32 reading (%s) %.3g\n", fixture.name, name,
                error);
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
  std::printf("%s: relative error without self-conditioning %.3g, with %.3g (bound %.3g)\n",
              fixture.name, errorNoSc, errorSc, fixture.bound);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DiffusionGemmaForwardTest,
                         ::testing::Values(Fixture{"tiny_f32_swa", kFloat32Bound, false},
                                           Fixture{"tiny_bf16", 5e-2, true}),
                         [](const auto &info) { return std::string(info.param.name); });

} // namespace
} // namespace dlm
