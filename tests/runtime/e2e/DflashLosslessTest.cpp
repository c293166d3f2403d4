// DFlash sampling is lossless (issue 13 item 4): on the transformers-made fixture pair
// (tests/reference/dflash/fixtures: the target and the trained drafter), the first three sampled
// tokens have the same distribution under the dflash program as under plain autoregressive
// sampling of the target, over thousands of seeds; a verifier whose correction ignores the draft's
// distribution (ProgramTestHooks::verifyWithoutResidual) fails the same test. The seeds are fixed,
// so the outcome is too.
#include "runtime/artifact/ArtifactReader.h"
#include "runtime/backend/BackendRegistry.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/program/DecodeInterpreter.h"
#include "runtime/program/DecodeProgram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace dlm {
namespace {

constexpr int kSeeds = 8000;
const std::vector<int32_t> kPrompt = {46, 108, 52, 187, 252, 18, 56, 39};

class DflashLosslessTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    const std::string fixtures = DLM_DFLASH_FIXTURES;
    path_ = ::testing::TempDir() + "/dflash_lossless.dlm";
    const std::string command = std::string(DLM_DLMC) + " compile " + fixtures + "/target" +
                                " --draft " + fixtures + "/dflash_explicit -o " + path_;
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }

  void SetUp() override {
    StatusOr<artifact::ArtifactReader> reader = artifact::ArtifactReader::open(path_);
    ASSERT_TRUE(reader) << reader.status().message();
    reader_.emplace(std::move(*reader));
    StatusOr<std::shared_ptr<const model::ModelWeights>> weights =
        model::ModelWeights::load(*reader_);
    ASSERT_TRUE(weights) << weights.status().message();
    BackendOptions options;
    options.threads = 1;
    options.maxSequenceLength = 64;
    const BackendSource source{*reader_, [&] { return *weights; }, options};
    StatusOr<std::unique_ptr<Backend>> backend = BackendRegistry::builtin().create("cpu", source);
    ASSERT_TRUE(backend) << backend.status().message();
    backend_ = std::move(*backend);
    facts_.maskTokenId = reader_->config().maskTokenId;
  }

  // (t1, t2, t3) as one key per seed, or an empty map after a failure.
  std::map<int64_t, int> sample(const std::string &policy, bool withoutResidual) {
    const artifact::DecodingProgram *found = nullptr;
    for (const artifact::DecodingProgram &p : reader_->decodePrograms())
      if (p.policy == policy)
        found = &p;
    EXPECT_NE(found, nullptr) << policy;
    if (!found)
      return {};
    StatusOr<program::DecodeProgram> loaded = program::DecodeProgram::load(found->ops, found->knobs);
    EXPECT_TRUE(loaded) << loaded.status().message();
    program::ProgramTestHooks hooks;
    hooks.verifyWithoutResidual = withoutResidual;
    std::map<int64_t, int> counts;
    for (int seed = 0; seed < kSeeds; ++seed) {
      program::ProgramRequest request;
      request.prompt = kPrompt;
      request.knobs = {{"max_new_tokens", int64_t(3)}, {"temperature", 1.0}, {"top_k", int64_t(4)}};
      request.seed = static_cast<uint64_t>(seed);
      request.testHooks = &hooks;
      StatusOr<sampling::DecodeOutcome> out =
          program::DecodeInterpreter(*loaded).run(*backend_, facts_, request, {});
      EXPECT_TRUE(out) << out.status().message();
      if (!out || out->outputIds.size() != 3)
        return {};
      int64_t key = 0;
      for (int32_t id : out->outputIds)
        key = key * 1000 + id;
      ++counts[key];
    }
    return counts;
  }

  static std::string path_;
  std::optional<artifact::ArtifactReader> reader_;
  std::unique_ptr<Backend> backend_;
  sampling::TokenFacts facts_;
};

std::string DflashLosslessTest::path_;

struct Statistic {
  double value = 0;
  double critical = 0; // at significance 0.001
};

// The two-sample chi-square of equal-sized samples over their joint outcomes, outcomes seen fewer
// than 10 times in both together pooled into one; the critical value by Wilson-Hilferty.
Statistic twoSampleChiSquare(const std::map<int64_t, int> &a, const std::map<int64_t, int> &b) {
  std::map<int64_t, std::pair<int, int>> joint;
  for (const auto &[key, n] : a)
    joint[key].first += n;
  for (const auto &[key, n] : b)
    joint[key].second += n;
  std::vector<std::pair<int, int>> bins;
  std::pair<int, int> pooled{0, 0};
  for (const auto &[key, counts] : joint) {
    if (counts.first + counts.second < 10) {
      pooled.first += counts.first;
      pooled.second += counts.second;
    } else {
      bins.push_back(counts);
    }
  }
  if (pooled.first + pooled.second > 0)
    bins.push_back(pooled);
  Statistic s;
  for (const auto &[x, y] : bins)
    s.value += static_cast<double>((x - y) * (x - y)) / (x + y);
  const double df = static_cast<double>(bins.size()) - 1;
  const double z = 3.0902; // the standard normal's 0.999 quantile
  const double h = 2.0 / (9.0 * df);
  s.critical = df * std::pow(1.0 - h + z * std::sqrt(h), 3.0);
  return s;
}

TEST_F(DflashLosslessTest, SampledTokensHaveTheTargetsDistribution) {
  const std::map<int64_t, int> dflash = sample("dflash", false);
  const std::map<int64_t, int> autoregressive = sample("autoregressive", false);
  ASSERT_FALSE(dflash.empty());
  ASSERT_FALSE(autoregressive.empty());
  const Statistic s = twoSampleChiSquare(dflash, autoregressive);
  RecordProperty("chi_square", std::to_string(s.value));
  RecordProperty("critical", std::to_string(s.critical));
  EXPECT_LT(s.value, s.critical);
}

TEST_F(DflashLosslessTest, WithoutTheResidualTheyDoNot) {
  const std::map<int64_t, int> broken = sample("dflash", true);
  const std::map<int64_t, int> autoregressive = sample("autoregressive", false);
  ASSERT_FALSE(broken.empty());
  const Statistic s = twoSampleChiSquare(broken, autoregressive);
  RecordProperty("chi_square", std::to_string(s.value));
  RecordProperty("critical", std::to_string(s.critical));
  EXPECT_GT(s.value, s.critical);
}

} // namespace
} // namespace dlm
