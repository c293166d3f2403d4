// The self-conditioning kernel on the emulated device, chained as a denoise step runs it: the
// sampler (with softmax statistics) over the rows' logits, then s = scale * softmax(z) @ E from
// those statistics, against the shared double reference (reference::selfConditionRow), which
// computes the whole softmax itself. Rows mix temperatures (greedy included) and sharpnesses;
// the row counts cover one and two row tiles, the widths partial column tiles; one trial has
// -inf logits; the output's padding columns must stay untouched.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

#include <limits>

namespace {

using namespace dlm;
using namespace dlm::cudatest;

// The emulated sampler that writes the statistics this self-conditioning kernel reads.
codegen::SamplerParams statisticsSampler(const codegen::SelfConditionParams &params) {
  for (const codegen::SamplerParams &sampler : samplerConfigs())
    if (sampler.softmaxStatistics && sampler.vocab == params.vocab &&
        sampler.softcap == params.softcap && sampler.logits == codegen::ElementType::f32)
      return sampler;
  ADD_FAILURE() << "samplerConfigs() has no f32 sampler with softmax statistics for vocab "
                << params.vocab << " softcap " << params.softcap;
  return {};
}

template <typename Element>
void checkSelfCondition(const codegen::SelfConditionParams &params, std::mt19937 &random,
                        int trial) {
  const codegen::SamplerParams samplerParams = statisticsSampler(params);
  ASSERT_GT(samplerParams.vocab, 0);
  const codegen::KernelSource sampler = *codegen::generateSampler(samplerParams);
  const codegen::KernelSource kernel = *codegen::generateSelfCondition(params);
  const int vocab = static_cast<int>(params.vocab);
  const int width = static_cast<int>(params.width);
  const int rows = trial == 0 ? randomInt(random, 65, 100) : randomInt(random, 1, 24);
  const long long rowStride = vocab + 4;
  const long long outStride = width + 3;

  const std::vector<float> temperature{0.8f, 0.f, 1.f, 0.4f};
  const int requests = static_cast<int>(temperature.size());
  std::vector<unsigned long long> seed(requests), id(requests);
  std::vector<long long> step(requests);
  for (int r = 0; r < requests; ++r) {
    seed[r] = random();
    id[r] = static_cast<unsigned long long>(r);
    step[r] = randomInt(random, 0, 40);
  }
  std::vector<int> rowRequest(rows), rowPosition(rows);
  std::vector<float> logits(static_cast<size_t>(rows * rowStride), 0.f);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int row = 0; row < rows; ++row) {
    rowRequest[row] = randomInt(random, 0, requests - 1);
    rowPosition[row] = randomInt(random, 0, 4000);
    const float sharpness = std::vector<float>{0.5f, 3.f, 12.f}[randomInt(random, 0, 2)];
    for (int v = 0; v < vocab; ++v)
      logits[row * rowStride + v] = trial == 2 && v % 5 == 1
                                        ? -std::numeric_limits<float>::infinity()
                                        : normal(random) * sharpness;
  }
  std::vector<float> exactTable;
  std::vector<Element> table;
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    table = randomBf16(random, static_cast<size_t>(vocab) * width, -1.f, 1.f, &exactTable);
  } else {
    exactTable.resize(static_cast<size_t>(vocab) * width);
    for (float &value : exactTable)
      value = std::uniform_real_distribution<float>(-1.f, 1.f)(random);
    table = exactTable;
  }
  const float scale = std::sqrt(static_cast<float>(width));

  // The sampler's outputs; only the statistics matter here.
  std::vector<int> sampled(rows), argmax(rows);
  std::vector<float> entropy(rows), confidence(rows), softmaxMax(rows), softmaxSum(rows);
  {
    const float *logitArg = logits.data();
    const int *requestArg = rowRequest.data(), *positionArg = rowPosition.data();
    const unsigned long long *seedArg = seed.data(), *idArg = id.data();
    const long long *stepArg = step.data();
    const float *temperatureArg = temperature.data();
    int *sampledArg = sampled.data(), *argmaxArg = argmax.data();
    float *entropyArg = entropy.data(), *confidenceArg = confidence.data();
    float *maxArg = softmaxMax.data(), *sumArg = softmaxSum.data();
    ASSERT_TRUE(emulatedDevice().launchArgs(
        sampler.name, emu::Dim3{static_cast<unsigned>(rows)}, emu::Dim3{sampler.blockThreads},
        logitArg, rowStride, rows, requestArg, positionArg, seedArg, idArg, stepArg,
        temperatureArg, -1, sampledArg, argmaxArg, entropyArg, confidenceArg, maxArg, sumArg));
  }

  const Element sentinel = storeAs<Element>(-12345.f);
  std::vector<Element> out(static_cast<size_t>(rows * outStride), sentinel);
  {
    const float *logitArg = logits.data();
    const int *requestArg = rowRequest.data();
    const float *temperatureArg = temperature.data();
    const float *maxArg = softmaxMax.data(), *sumArg = softmaxSum.data();
    const Element *tableArg = table.data();
    Element *outArg = out.data();
    const emu::Dim3 grid{static_cast<unsigned>((width + 127) / 128),
                         static_cast<unsigned>((rows + 63) / 64)};
    ASSERT_TRUE(emulatedDevice().launchArgs(kernel.name, grid, emu::Dim3{kernel.blockThreads},
                                            logitArg, rowStride, rows, requestArg,
                                            temperatureArg, maxArg, sumArg, tableArg, scale,
                                            outArg, outStride));
  }

  for (int row = 0; row < rows; ++row) {
    const double t = temperature[rowRequest[row]];
    const std::vector<double> want =
        reference::selfConditionRow(logits.data() + row * rowStride, vocab, t, params.softcap,
                                    exactTable.data(), width, scale);
    const std::string where = kernel.name + " row " + std::to_string(row) + " T " +
                              std::to_string(t);
    for (int h = 0; h < width; ++h)
      ASSERT_TRUE(near(loadFloat(out[row * outStride + h]), want[h], 2e-5 * scale,
                       storageRounding<Element>() + 1e-4,
                       where + " column " + std::to_string(h)));
    for (long long h = width; h < outStride; ++h)
      ASSERT_EQ(loadFloat(out[row * outStride + h]), loadFloat(sentinel))
          << where << ": wrote padding column " << h;
  }
}

TEST(SelfConditionKernel, MatchesDoubleReferenceFromTheSamplersStatistics) {
  std::mt19937 random(2024);
  for (const codegen::SelfConditionParams &params : selfConditionConfigs()) {
    for (int trial = 0; trial < 3; ++trial) {
      SCOPED_TRACE(testing::Message() << "vocab " << params.vocab << " width " << params.width
                                      << " trial " << trial);
      if (params.element == codegen::ElementType::bf16)
        checkSelfCondition<__nv_bfloat16>(params, random, trial);
      else
        checkSelfCondition<float>(params, random, trial);
      if (HasFatalFailure())
        return;
    }
  }
}

// The reference itself on hand-computed rows: equal logits average the table rows; a row with
// one dominant logit picks that table row; a temperature of 0.5 squares the odds.
TEST(SelfConditionReference, HandComputedRows) {
  const std::vector<float> table{1.f, 2.f, 3.f, 4.f, 5.f, 6.f}; // [3 tokens, 2 columns]
  const std::vector<float> flat{0.5f, 0.5f, 0.5f};
  std::vector<double> s = reference::selfConditionRow(flat.data(), 3, 0.7, 0, table.data(), 2, 2.0);
  EXPECT_NEAR(s[0], 2.0 * 3.0, 1e-12);
  EXPECT_NEAR(s[1], 2.0 * 4.0, 1e-12);
  const std::vector<float> peaked{0.f, 60.f, 0.f};
  s = reference::selfConditionRow(peaked.data(), 3, 1.0, 0, table.data(), 2, 1.0);
  EXPECT_NEAR(s[0], 3.0, 1e-12);
  EXPECT_NEAR(s[1], 4.0, 1e-12);
  // softmax([0, log 3] / 0.5) = [1/10, 9/10] (odds 3 squared).
  const std::vector<float> two{0.f, static_cast<float>(std::log(3.0))};
  s = reference::selfConditionRow(two.data(), 2, 0.5, 0, table.data(), 2, 1.0);
  EXPECT_NEAR(s[0], 0.1 * 1.0 + 0.9 * 3.0, 1e-6);
  EXPECT_NEAR(s[1], 0.1 * 2.0 + 0.9 * 4.0, 1e-6);
}

TEST(SelfConditionKernel, RejectsShapesItCannotServe) {
  EXPECT_FALSE(codegen::generateSelfCondition({1, 64, 0.0, codegen::ElementType::f32}));
  EXPECT_FALSE(codegen::generateSelfCondition({1000, 0, 0.0, codegen::ElementType::f32}));
  StatusOr<codegen::KernelSource> negative =
      codegen::generateSelfCondition({1000, 64, -1.0, codegen::ElementType::f32});
  ASSERT_FALSE(negative);
  EXPECT_NE(negative.status().message().find("softcap"), std::string::npos);
}

} // namespace
