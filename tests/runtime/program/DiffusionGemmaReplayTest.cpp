// Replays transformers 5.23's DiffusionGemma generate() traces (tests/reference/diffusion_gemma/
// fixtures/<name>/replay/, made from trace.npz by extract_replay.py) through the diffusion-gemma
// decode program (compiler/programs/policies/DiffusionGemma.cpp). A fake model returns the
// recorded raw logits of each step; the test hooks (ProgramTestHooks) feed transformers' random
// draws (initial canvases, multinomial samples, fresh renoise tokens) instead of dlm's counter RNG.
// Everything the program decides itself must then be what transformers decided: every step's
// float32 temperature bit for bit, argmax, accept mask, stop flag, renoised canvas, the stop step
// of every canvas and the committed canvases (docs/design/diffusion-gemma.md §6, §8).
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/program/DecodeProgram.h"
#include "tests/runtime/NpyArray.h"
#include "tests/runtime/program/DecodeTestSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace dlm::program {
namespace {

using ::dlm::testing::NpyArray;
using ::dlm::testing::readNpy;

uint32_t bits(float value) {
  uint32_t out;
  std::memcpy(&out, &value, sizeof(out));
  return out;
}

// ---- The fixture -----------------------------------------------------------------------------

struct Trace {
  int64_t promptLength = 0, canvas = 0, vocab = 0, steps = 0, canvases = 0;
  std::vector<int32_t> prompt, sequences;
  NpyArray canvasInit, committed, stepCanvas, stepN, temperature, rawLogits, decoderInput, sampled,
      argmax, entropy, accept, renoised, stop;

  int32_t token(const NpyArray &a, int64_t row, int64_t j) const {
    return a.at<int32_t>(row * canvas + j);
  }
  // The last step of its canvas: the next step starts another canvas, or there is none.
  bool lastOfCanvas(int64_t r) const {
    return r + 1 == steps || stepCanvas.at<int32_t>(r + 1) != stepCanvas.at<int32_t>(r);
  }
};

Status load(const std::string &dir, Trace &trace) {
  auto read = [&](const char *name, NpyArray &out) -> Status {
    StatusOr<NpyArray> array = readNpy(dir + "/replay/" + name + ".npy");
    if (!array)
      return array.status();
    out = std::move(*array);
    return Status::ok();
  };
  NpyArray prompt, sequences;
  DLM_RETURN_IF_ERROR(read("prompt_ids", prompt));
  DLM_RETURN_IF_ERROR(read("sequences", sequences));
  DLM_RETURN_IF_ERROR(read("canvas_init", trace.canvasInit));
  DLM_RETURN_IF_ERROR(read("committed", trace.committed));
  DLM_RETURN_IF_ERROR(read("step_canvas", trace.stepCanvas));
  DLM_RETURN_IF_ERROR(read("step_n", trace.stepN));
  DLM_RETURN_IF_ERROR(read("step_temperature", trace.temperature));
  DLM_RETURN_IF_ERROR(read("step_raw_logits", trace.rawLogits));
  DLM_RETURN_IF_ERROR(read("step_decoder_input_ids", trace.decoderInput));
  DLM_RETURN_IF_ERROR(read("step_sampled", trace.sampled));
  DLM_RETURN_IF_ERROR(read("step_argmax", trace.argmax));
  DLM_RETURN_IF_ERROR(read("step_entropy", trace.entropy));
  DLM_RETURN_IF_ERROR(read("step_accept", trace.accept));
  DLM_RETURN_IF_ERROR(read("step_renoised", trace.renoised));
  DLM_RETURN_IF_ERROR(read("step_stop", trace.stop));
  for (int64_t i = 0; i < prompt.size(); ++i)
    trace.prompt.push_back(prompt.at<int32_t>(i));
  for (int64_t i = 0; i < sequences.size(); ++i)
    trace.sequences.push_back(sequences.at<int32_t>(i));
  if (trace.rawLogits.shape.size() != 3 || trace.canvasInit.shape.size() != 2)
    return Status::error(dir + ": unexpected shapes");
  trace.promptLength = static_cast<int64_t>(trace.prompt.size());
  trace.steps = trace.rawLogits.shape[0];
  trace.canvas = trace.rawLogits.shape[1];
  trace.vocab = trace.rawLogits.shape[2];
  trace.canvases = trace.canvasInit.shape[0];
  return Status::ok();
}

// Returns step r's recorded raw logits to the r-th decoder forward and keeps what each was fed;
// checks each decoder forward's self-conditioning input (none on a canvas's first step, else the
// previous step's logits / T in float32: transformers' processed logits, which transformers then
// rounds to the model dtype — the same for an f32 model; dlm's forward reads them in float32)
// and records the encoder
// forwards (the prefill and the commits).
class ReplayModel : public sampling::DecodeModel {
public:
  explicit ReplayModel(const Trace &trace) : trace_(trace) {}

  std::vector<std::vector<int32_t>> fed; // every decoder forward's tokens [0, count)
  struct Encoded {
    sampling::ForwardSpec::Mode mode;
    int64_t begin, end;
  };
  std::vector<Encoded> encoded;

  int64_t vocabSize() const override { return trace_.vocab; }
  Status reserve(int64_t, int64_t) override { return Status::ok(); }
  StatusOr<sampling::LogitsView> forward(const sampling::ForwardSpec &spec) override {
    using Mode = sampling::ForwardSpec::Mode;
    if (spec.function == "encode") {
      if (spec.rows.count() != 0 || spec.input || spec.mode == Mode::cached)
        return Status::error("replay: an encoder forward that is decoded, has an input or does "
                             "not keep its K/V");
      encoded.push_back({spec.mode, spec.mode == Mode::full ? 0 : spec.keep, spec.count});
      return sampling::LogitsView{logits(0), 0, trace_.vocab};
    }
    if (spec.function != "decode" || spec.mode != Mode::cached)
      return Status::error("replay: a forward other than encode or a cached decode");
    const int64_t step = static_cast<int64_t>(fed.size());
    if (step >= trace_.steps)
      return Status::error("replay: more decoded forwards than the trace's " +
                           std::to_string(trace_.steps) + " steps");
    if (spec.rows.count() != trace_.canvas)
      return Status::error("replay: a forward of " + std::to_string(spec.rows.count()) + " rows");
    checkInput(step, spec);
    fed.emplace_back(spec.tokens, spec.tokens + spec.count);
    return sampling::LogitsView{logits(step), trace_.canvas, trace_.vocab};
  }

private:
  void checkInput(int64_t step, const sampling::ForwardSpec &spec) const {
    const bool first = step == 0 || trace_.stepCanvas.at<int32_t>(step) !=
                                        trace_.stepCanvas.at<int32_t>(step - 1);
    if (first) {
      EXPECT_EQ(spec.input, nullptr) << "step " << step << ": self-conditioned first step";
      return;
    }
    ASSERT_NE(spec.input, nullptr) << "step " << step << ": no self-conditioning input";
    ASSERT_EQ(spec.inputWidth, trace_.vocab);
    const float temperature = trace_.temperature.at<float>(step - 1);
    const float *previous = logits(step - 1);
    for (int64_t i = 0; i < trace_.canvas * trace_.vocab; ++i)
      ASSERT_EQ(bits(spec.input[i]), bits(previous[i] / temperature))
          << "step " << step << ": input element " << i;
  }

  const float *logits(int64_t step) const {
    return reinterpret_cast<const float *>(trace_.rawLogits.bytes.data()) +
           step * trace_.canvas * trace_.vocab;
  }
  const Trace &trace_;
};

struct FixtureCase {
  const char *name;
  // From the fixture's generation_config.json.
  int64_t maxNewTokens;
  int64_t maxSteps;
  int64_t eos;
};

class DiffusionGemmaReplayTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(DiffusionGemmaReplayTest, EveryDecisionIsTransformers) {
  const FixtureCase &fixture = GetParam();
  Trace trace;
  const Status loaded =
      load(std::string(DLM_DIFFUSION_GEMMA_FIXTURES) + "/" + fixture.name, trace);
  ASSERT_TRUE(loaded.isOk()) << loaded.message();
  const int64_t C = trace.canvas;
  const int64_t P0 = trace.promptLength;

  StatusOr<DecodeProgramText> text =
      parseDecodeProgram(testing::readDecodeProgramText("diffusion-gemma.decode"));
  ASSERT_TRUE(text.isOk()) << text.status().message();
  StatusOr<DecodeProgram> program = DecodeProgram::load(text->records, {});
  ASSERT_TRUE(program.isOk()) << program.status().message();

  // The trace row of the step being run: one `sample` record per step.
  int64_t r = -1;
  int64_t samples = 0, accepts = 0, renoises = 0, commits = 0;
  auto column = [&](int64_t row, int64_t position) {
    return position - P0 - static_cast<int64_t>(trace.stepCanvas.at<int32_t>(row)) * C;
  };
  ProgramTestHooks hooks;
  hooks.noiseToken = [&](int64_t, int64_t position) {
    const int64_t k = (position - P0) / C;
    return trace.token(trace.canvasInit, k, (position - P0) % C);
  };
  hooks.sampledToken = [&](int64_t step, int64_t position) {
    EXPECT_EQ(step, r + 1) << "the sample's RNG step is the trace's step";
    return trace.token(trace.sampled, step, column(step, position));
  };
  hooks.renoiseToken = [&](int64_t step, int64_t position) {
    const int64_t j = column(step, position);
    EXPECT_FALSE(trace.accept.at<uint8_t>(step * C + j))
        << "step " << step << " renoises accepted position " << j;
    return trace.token(trace.renoised, step, j);
  };
  hooks.afterRecord = [&](std::string_view kind, const RegisterView &regs) {
    if (kind == "sample") {
      ++r;
      ++samples;
      ASSERT_LT(r, trace.steps);
      const double T = regs.real("T");
      const float want = trace.temperature.at<float>(r);
      EXPECT_EQ(static_cast<double>(static_cast<float>(T)), T) << "step " << r << ": T not f32";
      EXPECT_EQ(bits(static_cast<float>(T)), bits(want))
          << "step " << r << ": temperature " << T << " vs transformers' " << want;
      const std::vector<int32_t> &argmax = regs.tokens("argmax");
      const std::vector<double> &entropy = regs.reals("entropy");
      ASSERT_EQ(static_cast<int64_t>(argmax.size()), C);
      for (int64_t j = 0; j < C; ++j) {
        EXPECT_EQ(argmax[j], trace.token(trace.argmax, r, j)) << "step " << r << " argmax " << j;
        // Not bit for bit: torch's float32 logsumexp (vectorised exp, log and sum) can round to
        // the neighbour of the float32 dlm picks, one ulp of the largest z (3.8e-6 for |z| in
        // [32, 64)), which moves the entropy by as much. The decisions above and below are exact.
        const double h = trace.entropy.at<float>(r * C + j);
        EXPECT_NEAR(entropy[j], h, 8e-6 + 1e-5 * std::abs(h)) << "step " << r << " entropy " << j;
      }
    } else if (kind == "accept") {
      ++accepts;
      const std::vector<uint8_t> &accepted = regs.flags("accepted");
      ASSERT_EQ(static_cast<int64_t>(accepted.size()), C);
      for (int64_t j = 0; j < C; ++j)
        EXPECT_EQ(accepted[j] != 0, trace.accept.at<uint8_t>(r * C + j) != 0)
            << "step " << r << " accept " << j;
      EXPECT_EQ(regs.boolean("converged"), trace.stop.at<uint8_t>(r) != 0)
          << "step " << r << ": stable & confident";
    } else if (kind == "gate") {
      EXPECT_EQ(regs.boolean("done"), trace.lastOfCanvas(r)) << "step " << r << ": canvas ends";
    } else if (kind == "renoise") {
      ++renoises;
      const std::vector<int32_t> canvas = regs.window();
      ASSERT_EQ(static_cast<int64_t>(canvas.size()), C);
      // A canvas's last step leaves its argmax, the committed canvas; transformers' renoise of
      // that step is drawn but never used.
      const bool last = trace.lastOfCanvas(r);
      const int64_t k = trace.stepCanvas.at<int32_t>(r);
      for (int64_t j = 0; j < C; ++j)
        EXPECT_EQ(canvas[j], last ? trace.token(trace.committed, k, j)
                                  : trace.token(trace.renoised, r, j))
            << "step " << r << (last ? " committed " : " renoised ") << j;
    } else if (kind == "commit") {
      ++commits;
    }
  };

  sampling::TokenFacts facts;
  facts.eosTokenIds = {fixture.eos};
  ProgramRequest request;
  request.prompt = trace.prompt;
  request.knobs["canvas_length"] = C;
  request.knobs["max_new_tokens"] = fixture.maxNewTokens;
  request.knobs["max_steps"] = fixture.maxSteps;
  request.testHooks = &hooks;
  ReplayModel model(trace);
  StatusOr<sampling::DecodeOutcome> outcome =
      DecodeInterpreter(*program).run(model, facts, request, {});
  ASSERT_TRUE(outcome.isOk()) << outcome.status().message();

  EXPECT_EQ(samples, trace.steps);
  EXPECT_EQ(accepts, trace.steps);
  EXPECT_EQ(renoises, trace.steps);
  EXPECT_EQ(commits, trace.canvases);
  EXPECT_EQ(outcome->decodeSteps, trace.steps);
  EXPECT_EQ(outcome->blocks, trace.canvases);
  // Every forward is fed prompt ++ committed canvases ++ the step's canvas.
  ASSERT_EQ(static_cast<int64_t>(model.fed.size()), trace.steps);
  for (int64_t s = 0; s < trace.steps; ++s) {
    const std::vector<int32_t> &fed = model.fed[static_cast<size_t>(s)];
    const int64_t begin = static_cast<int64_t>(fed.size()) - C;
    ASSERT_EQ(begin, P0 + trace.stepCanvas.at<int32_t>(s) * C);
    for (int64_t p = 0; p < begin; ++p)
      EXPECT_EQ(fed[p], trace.sequences[p]) << "step " << s << " prefix " << p;
    for (int64_t j = 0; j < C; ++j)
      EXPECT_EQ(fed[begin + j], trace.token(trace.decoderInput, s, j))
          << "step " << s << " canvas " << j;
  }
  // The encoder runs over the prompt, then re-encodes every canvas but the last one generated
  // (transformers commits canvas k at the start of canvas k + 1).
  ASSERT_EQ(static_cast<int64_t>(model.encoded.size()), trace.canvases);
  EXPECT_EQ(model.encoded[0].mode, sampling::ForwardSpec::Mode::full);
  EXPECT_EQ(model.encoded[0].begin, 0);
  EXPECT_EQ(model.encoded[0].end, P0);
  for (int64_t k = 1; k < trace.canvases; ++k) {
    const auto &commit = model.encoded[static_cast<size_t>(k)];
    EXPECT_EQ(commit.mode, sampling::ForwardSpec::Mode::append) << "commit " << k;
    EXPECT_EQ(commit.begin, P0 + (k - 1) * C) << "commit " << k;
    EXPECT_EQ(commit.end, P0 + k * C) << "commit " << k;
  }
  // transformers pads after the first EOS; dlm's output stops there.
  std::vector<int32_t> expected(trace.sequences.begin() + P0, trace.sequences.end());
  for (size_t i = 0; i < expected.size(); ++i)
    if (expected[i] == fixture.eos) {
      expected.resize(i + 1);
      break;
    }
  EXPECT_EQ(outcome->outputIds, expected);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DiffusionGemmaReplayTest,
                         ::testing::Values(FixtureCase{"tiny_f32_swa", 24, 16, 114},
                                           FixtureCase{"tiny_bf16", 16, 12, 1}),
                         [](const ::testing::TestParamInfo<FixtureCase> &info) {
                           return std::string(info.param.name);
                         });

} // namespace
} // namespace dlm::program
