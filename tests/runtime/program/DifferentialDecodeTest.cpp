// The decode interpreter running the programs dlmc embeds (compiler/programs/decode/) against
// the policy loops of runtime/sampling (sampling::decode, the oracle) on the same fake model
// with pseudo-random logits: over a grid of policies, knobs, cache modes and model facts, both
// must give the same outcome, the same forwards (every call's kind, count, keep, rows and fed
// tokens), the same reserve and the same committed blocks; a request both reject must fail with
// the same message.
#include "runtime/profile/Profiler.h"
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/sampling/CounterRng.h"
#include "tests/runtime/program/DecodeTestSupport.h"
#include "tests/runtime/sampling/legacy/LegacyDecoding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>

namespace dlm::program {
namespace {

using sampling::DecodeOutcome;
using sampling::DecodeRequest;
using sampling::LogitRows;
using sampling::LogitsView;
using sampling::Policy;
using sampling::TokenFacts;
using testing::kEos;
using testing::kMask;
using testing::kVocab;
using testing::RandomModel;

// The fixture `name`, loaded; an empty program (which fails every comparison) when it does not
// load.
DecodeProgram loadInput(const std::string &name) {
  StatusOr<DecodeProgramText> text = parseDecodeProgram(testing::readDecodeProgramText(name));
  if (!text) {
    ADD_FAILURE() << name << ": " << text.status().message();
    return DecodeProgram();
  }
  StatusOr<DecodeProgram> program = DecodeProgram::load(text->records);
  if (!program) {
    ADD_FAILURE() << name << ": " << program.status().message();
    return DecodeProgram();
  }
  return std::move(*program);
}

// One request, expressed both as the oracle's DecodeRequest and as the program's knobs.
struct Case {
  Policy policy = Policy::lowConfidence;
  int64_t gen = 8, block = 4, steps = 4; // steps: steps (low-confidence) or max_steps
  std::optional<double> threshold;
  std::optional<int64_t> stepCap;
  bool prefix = false;
  bool shift = false;
  bool eos = false;
  bool hasMask = true;
  double temperature = 0;        // low-confidence
  double tMin = 0.4, tMax = 0.8; // entropy-bound
  int64_t stability = 1;
  std::string noise; // empty: the policy's default
  double entropyBound = 0.1;
  double confidenceThreshold = 0.005;
  bool capture = false;
  uint64_t seed = 0;
  std::vector<int32_t> prompt = {1, 5, 2};

  std::string describe() const {
    std::ostringstream out;
    out << (policy == Policy::lowConfidence ? "low-confidence" : "entropy-bound") << " gen=" << gen
        << " block=" << block << " steps=" << steps
        << " threshold=" << (threshold ? std::to_string(*threshold) : "none")
        << " step_cap=" << (stepCap ? std::to_string(*stepCap) : "none")
        << " cache=" << (prefix ? "prefix" : "none") << " shift=" << shift << " eos=" << eos
        << " mask=" << hasMask << " T=" << temperature << " t=[" << tMin << "," << tMax
        << "] stability=" << stability << " noise=" << (noise.empty() ? "default" : noise)
        << " bound=" << entropyBound << " confident=" << confidenceThreshold
        << " capture=" << capture << " seed=" << seed << " prompt=" << prompt.size();
    return out.str();
  }

  TokenFacts facts() const {
    TokenFacts f;
    f.maskTokenId = hasMask ? kMask : -1;
    if (eos)
      f.eosTokenIds = {kEos};
    f.logitShift = shift;
    return f;
  }

  DecodeRequest oracleRequest() const {
    DecodeRequest r;
    r.prompt = prompt;
    r.seed = seed;
    r.request = seed * 31 + 7;
    r.cache = prefix ? sampling::CacheMode::prefix : sampling::CacheMode::none;
    r.captureFirstLogits = capture;
    sampling::DecodingKnobs &k = r.knobs;
    k.policy = policy;
    k.genLength = gen;
    k.blockLength = block;
    k.steps = steps;
    k.maxSteps = steps;
    k.threshold = threshold;
    k.stepCap = stepCap;
    k.temperature = temperature;
    k.tMin = tMin;
    k.tMax = tMax;
    k.stabilityThreshold = stability;
    k.noise = noise;
    k.entropyBound = entropyBound;
    k.confidenceThreshold = confidenceThreshold;
    return r;
  }

  ProgramRequest programRequest() const {
    ProgramRequest r;
    r.prompt = prompt;
    r.seed = seed;
    r.request = seed * 31 + 7;
    r.captureFirstLogits = capture;
    artifact::Attributes &k = r.knobs;
    k["gen_length"] = gen;
    k["block_length"] = block;
    k["temperature"] = temperature;
    k["cache"] = std::string(prefix ? "prefix" : "none");
    if (policy == Policy::lowConfidence) {
      k["steps"] = steps;
      if (threshold)
        k["threshold"] = *threshold;
      if (stepCap)
        k["step_cap"] = *stepCap;
    } else {
      k["max_steps"] = steps;
      k["t_min"] = tMin;
      k["t_max"] = tMax;
      k["stability_threshold"] = stability;
      k["entropy_bound"] = entropyBound;
      k["confidence_threshold"] = confidenceThreshold;
      if (!noise.empty())
        k["noise"] = noise;
    }
    return r;
  }
};

struct Block {
  int64_t index;
  std::vector<int32_t> ids;
  bool last;
  bool operator==(const Block &o) const {
    return index == o.index && ids == o.ids && last == o.last;
  }
};

struct Decoded {
  StatusOr<DecodeOutcome> outcome = Status::error("not run");
  std::vector<RandomModel::Call> calls;
  std::vector<std::pair<int64_t, int64_t>> reserves;
  std::vector<Block> blocks;
};

sampling::BlockCallback recordBlocks(std::vector<Block> &blocks) {
  return [&blocks](const sampling::CommittedBlock &b) {
    blocks.push_back({b.index, std::vector<int32_t>(b.ids, b.ids + b.count), b.last});
  };
}

Decoded runOracle(const Case &c) {
  Decoded run;
  RandomModel model(c.seed);
  const TokenFacts facts = c.facts();
  run.outcome = sampling::decode(model, facts, c.oracleRequest(), recordBlocks(run.blocks));
  run.calls = std::move(model.calls);
  run.reserves = std::move(model.reserves);
  return run;
}

Decoded runProgram(const DecodeProgram &program, const Case &c) {
  Decoded run;
  RandomModel model(c.seed);
  const TokenFacts facts = c.facts();
  run.outcome =
      DecodeInterpreter(program).run(model, facts, c.programRequest(), recordBlocks(run.blocks));
  run.calls = std::move(model.calls);
  run.reserves = std::move(model.reserves);
  return run;
}

// What the grid reaches, so that a test that stopped exercising a decision fails.
struct Coverage {
  int runs = 0;
  int earlyEos = 0;         // stopped before the last block
  int parallelSteps = 0;    // fewer decoded forwards than generated tokens (low-confidence)
  int earlyConvergence = 0; // fewer steps than blocks * max_steps (entropy-bound)
  int captured = 0;
};

void expectSame(const DecodeProgram &program, const Case &c, Coverage &coverage) {
  SCOPED_TRACE(c.describe());
  const Decoded expected = runOracle(c);
  const Decoded actual = runProgram(program, c);
  ASSERT_EQ(expected.outcome.isOk(), actual.outcome.isOk())
      << "oracle: " << expected.outcome.status().message()
      << "\nprogram: " << actual.outcome.status().message();
  if (!expected.outcome) {
    EXPECT_EQ(expected.outcome.status().message(), actual.outcome.status().message());
    return;
  }
  const DecodeOutcome &e = *expected.outcome;
  const DecodeOutcome &a = *actual.outcome;
  EXPECT_EQ(e.outputIds, a.outputIds);
  EXPECT_EQ(e.forwards, a.forwards);
  EXPECT_EQ(e.decodeSteps, a.decodeSteps);
  EXPECT_EQ(e.blocks, a.blocks);
  EXPECT_EQ(e.firstLogitRows, a.firstLogitRows);
  EXPECT_EQ(e.firstLogits, a.firstLogits);
  EXPECT_EQ(expected.reserves, actual.reserves);
  EXPECT_EQ(expected.blocks.size(), actual.blocks.size());
  EXPECT_TRUE(expected.blocks == actual.blocks);
  ASSERT_EQ(expected.calls.size(), actual.calls.size());
  for (size_t i = 0; i < expected.calls.size(); ++i)
    ASSERT_TRUE(expected.calls[i] == actual.calls[i]) << "forward " << i << " differs";

  ++coverage.runs;
  coverage.earlyEos += e.blocks < c.gen / c.block;
  coverage.parallelSteps += c.policy == Policy::lowConfidence &&
                            e.decodeSteps < e.blocks * c.block && e.blocks == c.gen / c.block;
  coverage.earlyConvergence +=
      c.policy == Policy::entropyBound && e.decodeSteps < e.blocks * c.steps;
  coverage.captured += e.firstLogitRows > 0;
}

struct Shape {
  int64_t gen, block, steps;
};

// block_length < steps / blocks ({8, 4, 16}), one step per block ({12, 4, 3}), one block, ...
constexpr Shape kShapes[] = {{8, 4, 8}, {16, 4, 8}, {8, 4, 16}, {12, 4, 3}, {8, 8, 8}, {6, 2, 6}};

TEST(DifferentialDecodeTest, LowConfidenceProgramDecodesAsTheLoop) {
  const DecodeProgram program = loadInput("low-confidence.decode");
  Coverage coverage;
  for (int mode = 0; mode < 3; ++mode) // fixed count, threshold, threshold + step_cap
    for (int prefix = 0; prefix < 2; ++prefix)
      for (int shift = 0; shift < 2; ++shift)
        for (double temperature : {0.0, 0.7})
          for (const Shape &shape : kShapes)
            for (int eos = 0; eos < 2; ++eos)
              for (uint64_t seed : {1u, 2u, 3u}) {
                Case c;
                c.gen = shape.gen;
                c.block = shape.block;
                c.steps = shape.steps;
                if (mode > 0)
                  c.threshold = seed == 1 ? 0.3 : seed == 2 ? 0.8 : 0.95;
                if (mode == 2)
                  c.stepCap = static_cast<int64_t>(seed * 2 - 1); // 1, 3, 5 (past a block of 4)
                c.prefix = prefix;
                c.shift = shift;
                c.temperature = temperature;
                c.eos = eos;
                c.seed = seed + 10 * static_cast<uint64_t>(mode);
                c.capture = seed == 2;
                if (seed == 3)
                  c.prompt = {4};
                expectSame(program, c, coverage);
                if (HasFatalFailure() || HasNonfatalFailure())
                  return;
              }
  EXPECT_EQ(coverage.runs, 3 * 2 * 2 * 2 * 6 * 2 * 3);
  EXPECT_GT(coverage.earlyEos, 0);
  EXPECT_GT(coverage.parallelSteps, 0);
  EXPECT_GT(coverage.captured, 0);
}

TEST(DifferentialDecodeTest, EntropyBoundProgramDecodesAsTheLoop) {
  const DecodeProgram program = loadInput("entropy-bound.decode");
  Coverage coverage;
  int settings = 0;
  // Noise: mask, uniform, the default on a model with and without a mask token.
  const std::pair<std::string, bool> noises[] = {
      {"mask", true}, {"uniform", true}, {"", true}, {"", false}};
  for (int prefix = 0; prefix < 2; ++prefix)
    for (int shift = 0; shift < 2; ++shift)
      for (int hot = 0; hot < 2; ++hot)
        for (int64_t stability : {0, 1, 2})
          for (const auto &[noise, hasMask] : noises)
            for (const Shape &shape : kShapes)
              for (int eos = 0; eos < 2; ++eos) {
                Case c;
                c.policy = Policy::entropyBound;
                c.gen = shape.gen;
                c.block = shape.block;
                c.steps = shape.steps / 2 + 1; // max_steps 5, 5, 9, 2, 5, 4
                c.prefix = prefix;
                c.shift = shift;
                if (hot) {
                  c.tMin = 0.7;
                  c.tMax = 1.3;
                }
                c.stability = stability;
                c.noise = noise;
                c.hasMask = hasMask;
                c.eos = eos;
                c.seed = static_cast<uint64_t>(++settings);
                // A looser budget and convergence test on every other setting.
                if (settings % 2) {
                  c.entropyBound = 1.5;
                  c.confidenceThreshold = 0.4;
                }
                c.capture = settings % 3 == 0;
                if (settings % 5 == 0)
                  c.prompt = {4}; // with a shift, the first prefix forward has zero tokens
                expectSame(program, c, coverage);
                if (HasFatalFailure() || HasNonfatalFailure())
                  return;
              }
  EXPECT_EQ(coverage.runs, 2 * 2 * 2 * 3 * 4 * 6 * 2);
  EXPECT_GT(coverage.earlyEos, 0);
  EXPECT_GT(coverage.earlyConvergence, 0);
  EXPECT_GT(coverage.captured, 0);
}

TEST(DifferentialDecodeTest, RejectedRequestsFailWithTheSameMessage) {
  const DecodeProgram lowConfidence = loadInput("low-confidence.decode");
  const DecodeProgram entropyBound = loadInput("entropy-bound.decode");
  Coverage coverage;
  std::vector<Case> cases;
  auto add = [&](Policy policy, const std::function<void(Case &)> &change) {
    Case c;
    c.policy = policy;
    change(c);
    cases.push_back(c);
  };
  for (Policy policy : {Policy::lowConfidence, Policy::entropyBound}) {
    add(policy, [](Case &c) { c.prompt.clear(); });
    add(policy, [](Case &c) { c.prompt = {1, static_cast<int32_t>(kVocab)}; });
    add(policy, [](Case &c) { c.prompt = {-1}; });
    add(policy, [](Case &c) { c.gen = 10; });
    add(policy, [](Case &c) { c.block = 0; });
    add(policy, [](Case &c) { c.gen = -4; });
    add(policy, [](Case &c) { c.temperature = -0.5; });
  }
  add(Policy::lowConfidence, [](Case &c) {
    c.steps = 3;
    c.gen = 8;
  });
  add(Policy::lowConfidence, [](Case &c) { c.steps = 0; });
  add(Policy::lowConfidence, [](Case &c) { c.hasMask = false; });
  add(Policy::entropyBound, [](Case &c) { c.steps = 0; });
  add(Policy::entropyBound, [](Case &c) { c.entropyBound = 0; });
  add(Policy::entropyBound, [](Case &c) { c.tMin = 0; });
  add(Policy::entropyBound, [](Case &c) { c.tMax = -1; });
  add(Policy::entropyBound, [](Case &c) { c.stability = -1; });
  add(Policy::entropyBound, [](Case &c) {
    c.noise = "mask";
    c.hasMask = false;
  });
  for (const Case &c : cases) {
    const DecodeProgram &program = c.policy == Policy::lowConfidence ? lowConfidence : entropyBound;
    expectSame(program, c, coverage);
    const Decoded run = runProgram(program, c);
    EXPECT_FALSE(run.outcome.isOk()) << c.describe();
    EXPECT_TRUE(run.calls.empty()) << c.describe();
  }
  EXPECT_EQ(coverage.runs, 0);
}

// Knob errors name the knob as sampling::resolveKnobs does.
TEST(DifferentialDecodeTest, KnobErrorsMatchDecodingKnobs) {
  const DecodeProgram lowConfidence = loadInput("low-confidence.decode");
  const DecodeProgram entropyBound = loadInput("entropy-bound.decode");
  using artifact::Attributes;
  const std::pair<Policy, Attributes> cases[] = {
      {Policy::lowConfidence, {{"stepz", int64_t{3}}}},
      {Policy::lowConfidence, {{"steps", std::string("many")}}},
      {Policy::lowConfidence, {{"steps", 2.5}}},
      {Policy::lowConfidence, {{"threshold", std::string("high")}}},
      {Policy::lowConfidence, {{"threshold", true}}},
      {Policy::lowConfidence, {{"step_cap", int64_t{0}}}},
      {Policy::lowConfidence, {{"step_cap", std::string("x")}}},
      {Policy::lowConfidence, {{"temperature", std::string("warm")}}},
      {Policy::lowConfidence, {{"gen_length", false}}},
      {Policy::entropyBound, {{"noise", std::string("gaussian")}}},
      {Policy::entropyBound, {{"noise", int64_t{1}}}},
      {Policy::entropyBound, {{"max_steps", std::string("x")}}},
      {Policy::entropyBound, {{"t_min", std::string("x")}}},
  };
  for (const auto &[policy, overrides] : cases) {
    StatusOr<sampling::DecodingKnobs> expected = sampling::resolveKnobs("", {}, overrides);
    ASSERT_FALSE(expected.isOk());
    ProgramRequest request;
    request.prompt = {1};
    request.knobs = overrides;
    RandomModel model(1);
    StatusOr<DecodeOutcome> actual =
        DecodeInterpreter(policy == Policy::lowConfidence ? lowConfidence : entropyBound)
            .run(model, Case().facts(), request, {});
    ASSERT_FALSE(actual.isOk());
    // The program's "unknown knob" goes on to list the knobs it takes.
    const std::string &message = actual.status().message();
    EXPECT_EQ(expected.status().message(),
              message.substr(0, message.find(" (its knobs:")));
  }
  // The cache mode, a request field of sampling::decode, is a knob of the programs.
  ProgramRequest request;
  request.prompt = {1};
  request.knobs["cache"] = std::string("triple");
  RandomModel model(1);
  StatusOr<DecodeOutcome> actual =
      DecodeInterpreter(lowConfidence).run(model, Case().facts(), request, {});
  ASSERT_FALSE(actual.isOk());
  EXPECT_EQ(actual.status().message(), sampling::parseCacheMode("triple").status().message());
}

// "none" unsets an optional knob: a stored threshold turned off per request decodes with the
// fixed count, as sampling::resolveKnobs does.
TEST(DifferentialDecodeTest, NoneUnsetsAStoredThreshold) {
  const artifact::Attributes stored = {{"threshold", 0.5}, {"steps", int64_t{4}}};
  StatusOr<DecodeProgramText> text =
      parseDecodeProgram(testing::readDecodeProgramText("low-confidence.decode"));
  ASSERT_TRUE(text.isOk());
  StatusOr<DecodeProgram> program = DecodeProgram::load(text->records, stored);
  ASSERT_TRUE(program.isOk()) << program.status().message();
  for (bool unset : {false, true}) {
    artifact::Attributes overrides = {{"gen_length", int64_t{8}}, {"block_length", int64_t{4}}};
    if (unset)
      overrides["threshold"] = std::string("none");
    StatusOr<sampling::DecodingKnobs> knobs = sampling::resolveKnobs("", stored, overrides);
    ASSERT_TRUE(knobs.isOk());
    EXPECT_EQ(knobs->threshold.has_value(), !unset);
    DecodeRequest oracle;
    oracle.prompt = {1, 2};
    oracle.knobs = *knobs;
    oracle.seed = 5;
    ProgramRequest request;
    request.prompt = {1, 2};
    request.knobs = overrides;
    request.seed = 5;
    RandomModel expectedModel(5), actualModel(5);
    const TokenFacts facts = Case().facts();
    StatusOr<DecodeOutcome> expected = sampling::decode(expectedModel, facts, oracle, {});
    StatusOr<DecodeOutcome> actual =
        DecodeInterpreter(*program).run(actualModel, facts, request, {});
    ASSERT_TRUE(expected.isOk() && actual.isOk());
    EXPECT_EQ(expected->outputIds, actual->outputIds);
    EXPECT_EQ(expected->forwards, actual->forwards);
    EXPECT_TRUE(expectedModel.calls == actualModel.calls);
  }
}

// The profile has the same scopes in the same order: request, blocks (canvases), steps, forwards.
TEST(DifferentialDecodeTest, ProfilesHaveTheSameScopes) {
  const DecodeProgram lowConfidence = loadInput("low-confidence.decode");
  const DecodeProgram entropyBound = loadInput("entropy-bound.decode");
  using Scope = std::tuple<std::string, profile::Category, uint64_t, int64_t, int64_t, int64_t>;
  auto scopes = [](const profile::Profiler &profiler) {
    std::vector<Scope> out;
    for (const profile::Event &e : profiler)
      out.emplace_back(e.name, e.category, e.trackId, e.layer, e.tokens, e.index);
    return out;
  };
  for (Policy policy : {Policy::lowConfidence, Policy::entropyBound}) {
    Case c;
    c.policy = policy;
    c.gen = 16;
    c.block = 4;
    c.steps = 8;
    c.prefix = true;
    c.eos = true;
    c.seed = 4;
    SCOPED_TRACE(c.describe());
    profile::Profiler expected(4096), actual(4096);
    DecodeRequest oracle = c.oracleRequest();
    oracle.profiler = &expected;
    ProgramRequest request = c.programRequest();
    request.profiler = &actual;
    RandomModel expectedModel(c.seed), actualModel(c.seed);
    ASSERT_TRUE(sampling::decode(expectedModel, c.facts(), oracle, {}).isOk());
    ASSERT_TRUE(DecodeInterpreter(policy == Policy::lowConfidence ? lowConfidence : entropyBound)
                    .run(actualModel, c.facts(), request, {})
                    .isOk());
    EXPECT_GT(expected.size(), 4u);
    EXPECT_EQ(scopes(expected), scopes(actual));
  }
}

} // namespace
} // namespace dlm::program
