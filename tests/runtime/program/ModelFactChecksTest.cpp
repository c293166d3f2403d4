// The checks a model decides alone (runtime/program/ModelFactChecks.h): a leading check over the
// model's facts and constants fails on a model that fails it, in the program's words; one that
// reads a knob, the prompt or the sequence, or follows a record of another kind, is the
// request's to fail. And the shipped programs: each refuses exactly the models its checks name.
#include "runtime/program/ModelFactChecks.h"
#include "tests/runtime/program/ShippedDecodeProgram.h"

#include <gtest/gtest.h>

namespace dlm::program {
namespace {

constexpr int64_t kVocab = 64;

sampling::TokenFacts factsOf(int64_t mask, int64_t attentionBlock) {
  sampling::TokenFacts facts;
  facts.maskTokenId = mask;
  facts.attentionBlock = attentionBlock;
  return facts;
}

// "ok", or the message checkModelFacts fails with.
std::string factCheck(const std::string &text, const sampling::TokenFacts &facts) {
  StatusOr<DecodeProgramText> parsed = parseDecodeProgram(text);
  EXPECT_TRUE(parsed) << parsed.status().message();
  StatusOr<DecodeProgram> loaded = DecodeProgram::load(parsed->records);
  EXPECT_TRUE(loaded) << loaded.status().message();
  if (!loaded)
    return "not loaded";
  Status checked = checkModelFacts(*loaded, facts, kVocab);
  return checked.isOk() ? "ok" : checked.message();
}

const char *kBlockRule = "knob:steps type=int default=4\n"
                         "eq a=@attention_block b=0 -> out=%plain\n"
                         "check cond=%plain message=\"not for block {}\" arg0=@attention_block\n"
                         "finish steps=$steps\n";

TEST(ModelFactChecks, ACheckOfTheModelsFactsFailsOnTheModelThatFailsIt) {
  EXPECT_EQ(factCheck(kBlockRule, factsOf(3, 0)), "ok");
  EXPECT_EQ(factCheck(kBlockRule, factsOf(3, 32)), "not for block 32");
}

TEST(ModelFactChecks, ValuesComputedFromFactsAndConstantsAreKnown) {
  const std::string text = "set a=1 -> out=%one\n"
                           "add a=@mask b=%one -> out=%next\n"
                           "lt a=%next b=@vocab -> out=%fits\n"
                           "check cond=%fits message=\"mask {} + 1 is past the vocabulary\" "
                           "arg0=@mask\n"
                           "finish steps=0\n";
  EXPECT_EQ(factCheck(text, factsOf(10, 0)), "ok");
  EXPECT_EQ(factCheck(text, factsOf(kVocab - 1, 0)), "mask 63 + 1 is past the vocabulary");
}

TEST(ModelFactChecks, AKnobThePromptOrTheSequenceLeavesTheCheckToTheRequest) {
  // Each condition would fail here (steps defaults to 0, the prompt is empty), but a request
  // could pass it.
  for (const std::string check :
       {"gt a=$steps b=0 -> out=%c\n", "gt a=@prompt_len b=0 -> out=%c\n",
        "gt a=@seq_len b=0 -> out=%c\n", "and a=%plain b=%stepsSet -> out=%c\n"}) {
    const std::string text = "knob:steps type=int default=0\n"
                             "eq a=@attention_block b=0 -> out=%plain\n"
                             "gt a=$steps b=0 -> out=%stepsSet\n" +
                             check + "check cond=%c message=\"refused\"\nfinish steps=0\n";
    EXPECT_EQ(factCheck(text, factsOf(3, 32)), "ok") << check;
  }
  // A message argument the request gives leaves the check unevaluated too.
  EXPECT_EQ(factCheck("knob:steps type=int default=0\n"
                      "eq a=@attention_block b=0 -> out=%plain\n"
                      "check cond=%plain message=\"{} steps\" arg0=$steps\nfinish steps=0\n",
                      factsOf(3, 32)),
            "ok");
}

TEST(ModelFactChecks, OnlyTheLeadingScalarRecordsRun) {
  const std::string text = "reserve tokens=4 rows=4\n"
                           "eq a=@attention_block b=0 -> out=%plain\n"
                           "check cond=%plain message=\"refused\"\n"
                           "finish steps=0\n";
  EXPECT_EQ(factCheck(text, factsOf(3, 32)), "ok");
}

// The shipped programs' own checks: block-refinement decodes block-causal models only, the
// programs that lay blocks from the prompt's end refuse them, and the diffusion programs need a
// mask token (DFlash its drafter's). No left-to-right program reads @attention_block (that they
// need a causal model is dlmc's rule of the model's attention, not a fact they check).
TEST(ModelFactChecks, ShippedProgramsRefuseTheModelsTheirChecksName) {
  const sampling::TokenFacts plain = factsOf(kVocab - 1, 0), blockCausal = factsOf(kVocab - 1, 32),
                             noMask = factsOf(-1, 0);
  auto verdict = [](const std::string &policy, const sampling::TokenFacts &facts) {
    const DecodeProgramText text = testing::shippedDecodeProgram(policy);
    StatusOr<DecodeProgram> loaded = DecodeProgram::load(text.records);
    EXPECT_TRUE(loaded) << policy << ": " << loaded.status().message();
    if (!loaded)
      return std::string("not loaded");
    Status checked = checkModelFacts(*loaded, facts, kVocab);
    return checked.isOk() ? std::string("ok") : checked.message();
  };
  for (const char *policy : {"low-confidence", "entropy-bound", "diffusion-gemma"}) {
    EXPECT_EQ(verdict(policy, plain), "ok") << policy;
    EXPECT_EQ(verdict(policy, blockCausal),
              "not supported yet: the " + std::string(policy) +
                  " policy on a block-causal model (its blocks start at position 0: "
                  "block-refinement decodes it)");
  }
  EXPECT_EQ(verdict("block-refinement", blockCausal), "ok");
  EXPECT_EQ(verdict("block-refinement", plain),
            "the block-refinement policy decodes a block-causal model (LLaDA2, SDAR); this one "
            "is not");
  EXPECT_EQ(verdict("low-confidence", noMask),
            "the low-confidence policy needs a mask token; the model has none");
  // DFlash takes its mask token from the drafter.
  EXPECT_EQ(verdict("dflash", noMask),
            "DFlash decoding needs the drafter's mask token (dlmc compile TARGET --draft DRAFT)");
  for (const char *policy : {"autoregressive", "dflash"})
    EXPECT_EQ(verdict(policy, blockCausal), "ok") << policy;
  EXPECT_EQ(verdict("autoregressive", noMask), "ok");
}

} // namespace
} // namespace dlm::program
