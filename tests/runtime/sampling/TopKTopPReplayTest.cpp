// sampling::topKTopPFilter against transformers 5.23's own warpers: for every step of the
// sampled runs recorded in tests/reference/autoregressive/fixtures (temperature with top-p, top-k
// alone, all three), the tokens dlm keeps from the raw logits must be exactly the tokens
// transformers left finite, and the token transformers drew must be one of them.
#include "runtime/sampling/SamplingMath.h"
#include "tests/runtime/NpyArray.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace dlm::sampling {
namespace {

using ::dlm::testing::NpyArray;
using ::dlm::testing::readNpy;

class TopKTopPReplayTest : public ::testing::TestWithParam<const char *> {};

TEST_P(TopKTopPReplayTest, KeepsWhatTransformersKeeps) {
  const std::string dir = std::string(DLM_AUTOREGRESSIVE_FIXTURES) + "/" + GetParam();
  std::ifstream file(dir + "/trace.json");
  ASSERT_TRUE(file) << dir;
  const nlohmann::json trace = nlohmann::json::parse(file);
  const nlohmann::json &runs = trace.at("sampled");
  ASSERT_FALSE(runs.empty());
  int64_t steps = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const nlohmann::json &run = runs[k];
    const double temperature = run.at("temperature").get<double>();
    const int64_t topK = run.at("top_k").get<int64_t>();
    const double topP = run.at("top_p").get<double>();
    const std::vector<int> drawn = run.at("new_ids").get<std::vector<int>>();
    const std::string prefix = dir + "/replay/sample" + std::to_string(k);
    StatusOr<NpyArray> logits = readNpy(prefix + "_step_logits.npy"),
                       scores = readNpy(prefix + "_step_scores.npy");
    ASSERT_TRUE(logits) << logits.status().message();
    ASSERT_TRUE(scores) << scores.status().message();
    ASSERT_EQ(logits->shape.size(), 2u);
    const int64_t rows = logits->shape[0], vocab = logits->shape[1];
    ASSERT_EQ(static_cast<int64_t>(drawn.size()), rows);
    std::vector<float> row(static_cast<size_t>(vocab));
    std::vector<uint8_t> allowed;
    std::vector<int32_t> order;
    for (int64_t s = 0; s < rows; ++s, ++steps) {
      for (int64_t v = 0; v < vocab; ++v)
        row[static_cast<size_t>(v)] = logits->at<float>(s * vocab + v);
      topKTopPFilter(row.data(), vocab, temperature, topK, topP, kNoExcludedToken, allowed,
                     order);
      for (int64_t v = 0; v < vocab; ++v)
        EXPECT_EQ(allowed[static_cast<size_t>(v)] != 0,
                  std::isfinite(scores->at<float>(s * vocab + v)))
            << "run " << k << " (T " << temperature << ", top_k " << topK << ", top_p " << topP
            << ") step " << s << " token " << v;
      EXPECT_TRUE(allowed[static_cast<size_t>(drawn[static_cast<size_t>(s)])])
          << "run " << k << " step " << s << ": transformers drew a token dlm removes";
    }
  }
  std::printf("%s: %lld sampled steps, the same kept tokens\n", GetParam(),
              static_cast<long long>(steps));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TopKTopPReplayTest,
                         ::testing::Values("qwen3_tiny", "llama_tiny", "qwen2_tiny"),
                         [](const auto &info) { return std::string(info.param); });

} // namespace
} // namespace dlm::sampling
