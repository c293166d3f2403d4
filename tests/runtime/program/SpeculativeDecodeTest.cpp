// Speculative decoding records (spec_verify, narrow_logits, seq_truncate, seq_write, kv_trim) and
// the introspective-strided program, run by the interpreter on causal fake models whose
// predictions the test controls: a chain model that knows the next token and guesses the ones
// after a mask right or wrong as the test says, and fixed distributions for the statistics of the
// verifier.
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/program/DecodeProgram.h"
#include "runtime/sampling/CounterRng.h"
#include "tests/runtime/program/DecodeTestSupport.h"
#include "tests/runtime/sampling/FullCachedModel.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <string>

namespace dlm::sampling {
namespace {

constexpr int64_t kVocab = 14;
constexpr int32_t kMask = 13;

// The model's own next token: a permutation of 0..12 with one cycle through every token.
int32_t chainNext(int32_t token) { return static_cast<int32_t>((token + 5) % 13); }

// A causal model over a K/V cache it checks: the row of position i depends on tokens [0, i] only.
// A real token predicts chainNext of itself; a mask at distance d past the last real token x
// guesses chainNext^(d+1)(x), or something else where `wrong(position, d)` says so.
class ChainModel : public dlm::sampling::testing::FullCachedModel {
public:
  std::function<bool(int64_t, int64_t)> wrong = [](int64_t, int64_t) { return false; };
  float height = 6.0f;
  int64_t forwards = 0;

  int64_t vocabSize() const override { return kVocab; }
  Status reserve(int64_t, int64_t) override { return Status::ok(); }
  StatusOr<LogitsView> runFull(const int32_t *tokens, int64_t count, int64_t keep,
                               LogitRows rows) override {
    cache_.assign(tokens, tokens + keep);
    return fill(tokens, 0, count, rows);
  }
  StatusOr<LogitsView> runCached(const int32_t *tokens, int64_t count, int64_t keep,
                                 LogitRows rows) override {
    DLM_RETURN_IF_ERROR(checkCache(tokens, keep));
    return fill(tokens, keep, count, rows);
  }
  StatusOr<LogitsView> forward(const ForwardSpec &spec) override {
    if (spec.mode != ForwardSpec::Mode::append || !spec.function.empty() || spec.input)
      return FullCachedModel::forward(spec);
    DLM_RETURN_IF_ERROR(checkCache(spec.tokens, spec.keep));
    cache_.assign(spec.tokens, spec.tokens + spec.count);
    return fill(spec.tokens, spec.keep, spec.count, spec.rows);
  }
  Status trimCache(int64_t length) override {
    if (length < 0 || length > static_cast<int64_t>(cache_.size()))
      return Status::error("fake: trimming " + std::to_string(cache_.size()) + " to " +
                           std::to_string(length));
    cache_.resize(static_cast<size_t>(length));
    return Status::ok();
  }

private:
  // The cache must hold exactly the K/V of the tokens the forward says precede it.
  Status checkCache(const int32_t *tokens, int64_t keep) const {
    if (static_cast<int64_t>(cache_.size()) != keep ||
        !std::equal(cache_.begin(), cache_.end(), tokens))
      return Status::error("fake: the cache does not hold the forward's first " +
                           std::to_string(keep) + " tokens");
    return Status::ok();
  }

  int32_t predicted(const int32_t *tokens, int64_t position) const {
    int64_t last = position;
    while (last > 0 && tokens[last] == kMask)
      --last;
    int32_t token = tokens[last];
    const int64_t distance = position - last;
    for (int64_t d = 0; d <= distance; ++d)
      token = chainNext(token);
    if (distance > 0 && wrong(position, distance))
      token = static_cast<int32_t>((token + 1 + position % 5) % 13);
    return token;
  }

  LogitsView fill(const int32_t *tokens, int64_t first, int64_t count, LogitRows rows) {
    ++forwards;
    (void)count;
    buffer_.assign(static_cast<size_t>(rows.count() * kVocab), 0.0f);
    for (int64_t r = 0; r < rows.count(); ++r) {
      const int64_t position = first + rows.begin + r;
      float *row = buffer_.data() + r * kVocab;
      for (int64_t v = 0; v < kVocab; ++v)
        row[v] = static_cast<float>(rng::uniform(rng::mix64(static_cast<uint64_t>(position)), v));
      row[kMask] = -20.0f;
      row[predicted(tokens, position)] += height;
    }
    return LogitsView{buffer_.data(), rows.count(), kVocab};
  }

  std::vector<int32_t> cache_;
  std::vector<float> buffer_;
};

StatusOr<program::DecodeProgram> loadProgram(const std::string &text) {
  StatusOr<program::DecodeProgramText> parsed = program::parseDecodeProgram(text);
  if (!parsed)
    return parsed.status();
  return program::DecodeProgram::load(parsed->records, {});
}

struct DecodeRun {
  std::vector<int32_t> output;
  int64_t forwards = 0;
};

DecodeRun decode(ChainModel &model, const std::string &policy, artifact::Attributes knobs,
           std::vector<int64_t> eos = {}, uint64_t seed = 0) {
  StatusOr<program::DecodeProgram> program =
      loadProgram(program::testing::readDecodeProgramText(policy + ".decode"));
  EXPECT_TRUE(program) << program.status().message();
  TokenFacts facts;
  facts.maskTokenId = kMask;
  facts.eosTokenIds = std::move(eos);
  program::ProgramRequest request;
  request.prompt = {4, 9, 2};
  request.knobs = std::move(knobs);
  request.seed = seed;
  StatusOr<DecodeOutcome> out = program::DecodeInterpreter(*program).run(model, facts, request, {});
  EXPECT_TRUE(out) << out.status().message();
  return out ? DecodeRun{out->outputIds, out->forwards} : DecodeRun{};
}

std::vector<int32_t> chainFrom(int32_t token, int64_t count) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < count; ++i)
    out.push_back(token = chainNext(token));
  return out;
}

// Greedy introspective strided decoding gives the model's greedy autoregressive tokens whatever
// its guesses after a mask are: all right (every draft passes), all wrong (every round rejects
// its first draft) or a mix (rejections at every depth).
TEST(IntrospectiveStrided, GreedyEqualsAutoregressiveWhateverTheDraftsAre) {
  const std::vector<std::function<bool(int64_t, int64_t)>> guesses = {
      [](int64_t, int64_t) { return false; },
      [](int64_t, int64_t) { return true; },
      [](int64_t p, int64_t d) { return rng::mix64(static_cast<uint64_t>(p * 31 + d)) % 3 == 0; },
      [](int64_t, int64_t d) { return d >= 3; },
  };
  for (int64_t stride : {2, 3, 4, 6})
    for (int64_t newTokens : {1, 7, 24})
      for (size_t g = 0; g < guesses.size(); ++g) {
        SCOPED_TRACE("stride " + std::to_string(stride) + ", " + std::to_string(newTokens) +
                     " tokens, guesses " + std::to_string(g));
        ChainModel model;
        model.wrong = guesses[g];
        DecodeRun run = decode(model, "introspective-strided",
                         {{"stride", stride}, {"max_new_tokens", newTokens}});
        EXPECT_EQ(run.output, chainFrom(2, newTokens));
        ChainModel reference;
        EXPECT_EQ(decode(reference, "autoregressive", {{"max_new_tokens", newTokens}}).output,
                  run.output);
      }
}

// With every guess right a verify forward gives N tokens: prefill, one cold start (t0, clean),
// then N per forward.
TEST(IntrospectiveStrided, RightGuessesGiveStrideTokensPerForward) {
  ChainModel model;
  DecodeRun run = decode(model, "introspective-strided", {{"stride", 4}, {"max_new_tokens", 26}});
  EXPECT_EQ(run.output, chainFrom(2, 26));
  // 2 tokens from the prefill and the cold start, then 24 in 6 verify forwards.
  EXPECT_EQ(run.forwards, 2 + 6);
  ChainModel wrong;
  wrong.wrong = [](int64_t, int64_t) { return true; };
  // Every verify rejects its first draft and emits the correction; a cold start emits one token.
  EXPECT_EQ(decode(wrong, "introspective-strided", {{"stride", 4}, {"max_new_tokens", 26}})
                .forwards,
            26);
}

// An EOS inside an accepted round ends the output right after it, as autoregressive decoding.
TEST(IntrospectiveStrided, StopsAtTheFirstEosInsideARound) {
  const std::vector<int32_t> chain = chainFrom(2, 30);
  for (int64_t at : {0, 1, 5, 9}) {
    ChainModel model;
    const int64_t eos = chain[static_cast<size_t>(at)];
    std::vector<int32_t> expected(chain.begin(), chain.begin() + at + 1);
    EXPECT_EQ(decode(model, "introspective-strided", {{"stride", 4}, {"max_new_tokens", 30}},
                     {eos})
                  .output,
              expected)
        << "EOS " << eos;
  }
}

// Sampled: every draft passes when verify_alpha <= 0 (N tokens per verify), and the tokens are
// the model's peaks often enough to show they come from its rows.
TEST(IntrospectiveStrided, SampledRunsAndAlphaZeroAcceptsEveryDraft) {
  ChainModel model;
  model.wrong = [](int64_t, int64_t) { return true; };
  DecodeRun run = decode(model, "introspective-strided",
                   {{"stride", 3}, {"max_new_tokens", 20}, {"temperature", 0.7},
                    {"verify_alpha", 0.0}},
                   {}, 5);
  ASSERT_EQ(run.output.size(), 20u);
  // Prefill and cold start give 2, then 3 per verify: 6 verifies.
  EXPECT_EQ(run.forwards, 2 + 6);
  for (int32_t token : run.output)
    EXPECT_NE(token, kMask);
}

// The authors' lossy relaxations. verify_num_specs = 1 tests only the first draft: with every
// guess wrong, the second and third drafts are accepted untested, so the output leaves the
// model's greedy chain, and a verify gives stride tokens whenever the first draft passes.
TEST(IntrospectiveStrided, VerifyNumSpecsAcceptsTheUntestedDrafts) {
  ChainModel model;
  // Guesses one past a real token are right, further ones wrong.
  model.wrong = [](int64_t, int64_t d) { return d >= 2; };
  DecodeRun run = decode(model, "introspective-strided",
                         {{"stride", 4}, {"max_new_tokens", 20}, {"verify_num_specs", 1}});
  ASSERT_EQ(run.output.size(), 20u);
  EXPECT_NE(run.output, chainFrom(2, 20));
  ChainModel exact;
  exact.wrong = model.wrong;
  EXPECT_EQ(decode(exact, "introspective-strided", {{"stride", 4}, {"max_new_tokens", 20}}).output,
            chainFrom(2, 20));
  EXPECT_LT(run.forwards, decode(exact, "introspective-strided",
                                 {{"stride", 4}, {"max_new_tokens", 20}})
                              .forwards);
}

// fast_verify with top 1 is greedy verification; with every wrong guess still among the model's
// top 14 logits (the whole vocabulary) it accepts everything.
TEST(IntrospectiveStrided, FastVerifyAcceptsDraftsAmongTheTopLogits) {
  ChainModel model;
  model.wrong = [](int64_t p, int64_t d) { return rng::mix64(static_cast<uint64_t>(p * 7 + d)) % 2; };
  EXPECT_EQ(decode(model, "introspective-strided",
                   {{"stride", 3}, {"max_new_tokens", 18}, {"fast_verify", true},
                    {"fast_verify_topk", 1}})
                .output,
            chainFrom(2, 18));
  ChainModel loose;
  loose.wrong = [](int64_t, int64_t) { return true; };
  DecodeRun run = decode(loose, "introspective-strided",
                         {{"stride", 3}, {"max_new_tokens", 18}, {"fast_verify", true},
                          {"fast_verify_topk", kVocab}});
  EXPECT_NE(run.output, chainFrom(2, 18));
  // Prefill and cold start give 2 tokens, then 3 per verify.
  EXPECT_EQ(run.forwards, 2 + 6);
}

TEST(IntrospectiveStrided, RefusesAModelWithoutAMaskToken) {
  StatusOr<program::DecodeProgram> program =
      loadProgram(program::testing::readDecodeProgramText("introspective-strided.decode"));
  ASSERT_TRUE(program) << program.status().message();
  ChainModel model;
  TokenFacts facts;
  program::ProgramRequest request;
  request.prompt = {4};
  StatusOr<DecodeOutcome> out = program::DecodeInterpreter(*program).run(model, facts, request, {});
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("needs a model with a mask token"), std::string::npos)
      << out.status().message();
}

// ---- spec_verify's statistics -----------------------------------------------------------------

constexpr int64_t kSmallVocab = 5;

// Fixed distributions: the default function (the target) and `draft` give rows whose logits do
// not depend on the tokens, so p and q are known.
class FixedModel : public dlm::sampling::testing::FullCachedModel {
public:
  std::array<float, kSmallVocab> target = {2.0f, 1.0f, 0.5f, -1.0f, 0.0f};
  std::array<float, kSmallVocab> draft = {0.0f, 2.5f, -0.5f, 1.0f, 0.0f};

  int64_t vocabSize() const override { return kSmallVocab; }
  Status reserve(int64_t, int64_t) override { return Status::ok(); }
  StatusOr<LogitsView> runFull(const int32_t *, int64_t, int64_t, LogitRows rows) override {
    return fill(target, rows.count());
  }
  StatusOr<LogitsView> runCached(const int32_t *, int64_t, int64_t, LogitRows) override {
    return Status::error("fake: no cached forwards");
  }
  StatusOr<LogitsView> forward(const ForwardSpec &spec) override {
    if (spec.function == "draft")
      return fill(draft, spec.rows.count());
    return FullCachedModel::forward(spec);
  }

private:
  LogitsView fill(const std::array<float, kSmallVocab> &row, int64_t rows) {
    buffer_.clear();
    for (int64_t r = 0; r < rows; ++r)
      buffer_.insert(buffer_.end(), row.begin(), row.end());
    return LogitsView{buffer_.data(), rows, kSmallVocab};
  }
  std::vector<float> buffer_;
};

// Two drafts drawn from q, verified against p: the first emitted token (the first draft when it
// passes, else the correction) must be distributed as p.
constexpr const char *kVerifyProgram = R"(program verify-two-drafts
knob:temperature type=real default=1.0
add a=@prompt_len b=3 -> out=%total
reserve tokens=%total rows=3
add a=@prompt_len b=2 -> out=%end
seq_extend count=2 fill=token token=0
window begin=@prompt_len end=%end
forward mode=full function=draft count=%end keep=0 row_begin=@prompt_len row_end=%end
sample kind=gumbel_max temperature=$temperature excluded=-1 step=0 candidates=all -> token=%drafts confidence=%confidence
seq_write tokens=%drafts
hold_logits temperature=$temperature -> out=%q
sub a=@prompt_len b=1 -> out=%last
forward mode=full count=%end keep=0 row_begin=%last row_end=%end
spec_verify temperature=$temperature step=0 draft_logits=%q -> accepted=%accepted token=%token
add a=@prompt_len b=%accepted -> out=%cut
seq_truncate length=%cut
seq_extend count=1 fill=token token=%token
finish steps=1
)";

std::array<double, kSmallVocab> softmax(const std::array<float, kSmallVocab> &logits) {
  std::array<double, kSmallVocab> p{};
  double sum = 0;
  for (int64_t v = 0; v < kSmallVocab; ++v)
    sum += p[v] = std::exp(static_cast<double>(logits[v]));
  for (double &x : p)
    x /= sum;
  return p;
}

// Pearson's statistic of the first output token over `seeds` runs against p.
double chiSquare(bool withoutResidual, int seeds) {
  StatusOr<program::DecodeProgram> program = loadProgram(kVerifyProgram);
  EXPECT_TRUE(program) << program.status().message();
  FixedModel model;
  program::ProgramTestHooks hooks;
  hooks.verifyWithoutResidual = withoutResidual;
  std::array<int, kSmallVocab> counts{};
  for (int seed = 0; seed < seeds; ++seed) {
    program::ProgramRequest request;
    request.prompt = {1, 2};
    request.seed = static_cast<uint64_t>(seed);
    request.testHooks = &hooks;
    StatusOr<DecodeOutcome> out =
        program::DecodeInterpreter(*program).run(model, TokenFacts{}, request, {});
    EXPECT_TRUE(out) << out.status().message();
    if (!out)
      return 1e9;
    ++counts[static_cast<size_t>(out->outputIds.at(0))];
  }
  const std::array<double, kSmallVocab> p = softmax(model.target);
  double statistic = 0;
  for (int64_t v = 0; v < kSmallVocab; ++v) {
    const double expected = p[v] * seeds;
    statistic += (counts[v] - expected) * (counts[v] - expected) / expected;
  }
  return statistic;
}

// The chi-square critical value for 4 degrees of freedom at significance 0.001. The seeds are
// fixed, so the outcome is too: the test cannot flake, and the broken verifier (its correction
// drawn from p instead of max(0, p - q)) is far outside.
constexpr double kChiSquare4Df001 = 18.47;

TEST(SpecVerify, FirstTokenIsDistributedAsTheTarget) {
  const double statistic = chiSquare(false, 6000);
  RecordProperty("chi_square", std::to_string(statistic));
  EXPECT_LT(statistic, kChiSquare4Df001);
}

TEST(SpecVerify, WithoutTheResidualTheFirstTokenIsNot) {
  const double statistic = chiSquare(true, 6000);
  RecordProperty("chi_square", std::to_string(statistic));
  EXPECT_GT(statistic, 10 * kChiSquare4Df001);
}

} // namespace
} // namespace dlm::sampling
