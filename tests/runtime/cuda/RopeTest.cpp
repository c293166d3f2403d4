// NeoX RoPE kernels on the emulated device against the shared double reference: full, partial and
// "proportional" rotary dims, large and ragged positions, several heads in a padded token row.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

namespace {

using namespace dlm;
using namespace dlm::cudatest;

template <typename Element>
void checkRope(const codegen::RopeParams &params, std::mt19937 &random) {
  const std::string name = kernelName(codegen::generateRope, params);
  const int headDim = static_cast<int>(params.headDim);
  reference::RopeSpec spec;
  spec.headDim = headDim;
  spec.rotaryDim = params.rotaryDim;
  spec.frequencyPairs = params.frequencyPairs;
  spec.frequencyDim = params.frequencyDim;
  spec.theta = params.theta;
  const int tokens = randomInt(random, 1, 7);
  const int heads = randomInt(random, 1, 5);
  const long long stride = heads * headDim + 8;
  std::vector<int> positions(tokens);
  for (int &position : positions)
    position = randomInt(random, 0, 1) ? randomInt(random, 0, 64) : randomInt(random, 0, 300000);

  std::vector<Element> x(static_cast<size_t>(tokens * stride));
  std::vector<float> before(x.size());
  std::uniform_real_distribution<float> value(-3.f, 3.f);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = storeAs<Element>(value(random));
    before[i] = loadFloat(x[i]);
  }
  Element *xArg = x.data();
  const int *positionArg = positions.data();
  ASSERT_TRUE(launched(emulatedDevice().launchArgs(name, emu::Dim3{static_cast<unsigned>(tokens)},
                                                   emu::Dim3{128}, xArg, stride, heads, tokens,
                                                   positionArg)));
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const long long base = t * stride + h * headDim;
      const std::vector<double> want =
          reference::ropeHead(before.data() + base, spec, positions[t]);
      for (int d = 0; d < headDim; ++d)
        ASSERT_TRUE(near(
            loadFloat(x[base + d]), want[d], 1e-5, 2 * storageRounding<Element>() + 1e-5,
            name + " token " + std::to_string(t) + " position " + std::to_string(positions[t]) +
                " head " + std::to_string(h) + " dim " + std::to_string(d)));
    }
    for (long long i = heads * headDim; i < stride; ++i)
      ASSERT_EQ(loadFloat(x[t * stride + i]), before[t * stride + i]) << "padding changed";
  }
}

TEST(RopeKernel, MatchesDoubleReference) {
  std::mt19937 random(23);
  for (const codegen::RopeParams &params : ropeConfigs()) {
    for (int trial = 0; trial < 3; ++trial) {
      SCOPED_TRACE(testing::Message() << "head_dim " << params.headDim << " trial " << trial);
      if (params.element == codegen::ElementType::bf16)
        checkRope<__nv_bfloat16>(params, random);
      else
        checkRope<float>(params, random);
    }
  }
}

} // namespace
