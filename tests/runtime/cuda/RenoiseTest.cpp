// Renoise and initial-canvas kernels on the emulated device: kept positions take the sample,
// rejected candidates take the mask or the counter RNG's uniform token (renoise stream at the
// request's step and position), non-candidates of a mask-absorbing canvas stay put.
#include "tests/runtime/cuda/CudaTestSupport.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"

namespace {

using namespace dlm;
using namespace dlm::cudatest;

TEST(RenoiseKernel, MatchesReference) {
  std::mt19937 random(3);
  const int mask = 77;
  for (const codegen::RenoiseParams &params : renoiseConfigs()) {
    const codegen::KernelSource kernel = *codegen::generateRenoise(params);
    for (int trial = 0; trial < 3; ++trial) {
      const int rows = randomInt(random, 1, 700);
      const int requests = 3;
      std::vector<unsigned long long> seed(requests), id(requests);
      std::vector<long long> step(requests);
      for (int r = 0; r < requests; ++r) {
        seed[r] = random();
        id[r] = static_cast<unsigned long long>(r * 17 + trial);
        step[r] = randomInt(random, 0, 100);
      }
      std::vector<unsigned char> keep(rows);
      std::vector<int> sampled(rows), canvas(rows), rowRequest(rows), rowPosition(rows);
      for (int i = 0; i < rows; ++i) {
        keep[i] = static_cast<unsigned char>(randomInt(random, 0, 1));
        sampled[i] = randomInt(random, 0, static_cast<int>(params.vocab) - 1);
        canvas[i] = randomInt(random, 0, 1) ? mask : randomInt(random, 0, 499);
        rowRequest[i] = randomInt(random, 0, requests - 1);
        rowPosition[i] = randomInt(random, 0, 100000);
      }
      const std::vector<int> before = canvas;
      const unsigned char *keepArg = keep.data();
      const int *sampledArg = sampled.data(), *requestArg = rowRequest.data(),
                *positionArg = rowPosition.data();
      int *canvasArg = canvas.data();
      const unsigned long long *seedArg = seed.data(), *idArg = id.data();
      const long long *stepArg = step.data();
      ASSERT_TRUE(emulatedDevice().launchArgs(
          kernel.name, emu::Dim3{static_cast<unsigned>((rows + 255) / 256)}, emu::Dim3{256}, rows,
          keepArg, sampledArg, canvasArg, requestArg, positionArg, seedArg, idArg, stepArg, mask));
      for (int i = 0; i < rows; ++i) {
        const int r = rowRequest[i];
        const uint64_t stream = params.initialCanvas ? 2 : 1;
        const uint64_t noiseKey = referenceKey(seed[r], id[r], stream, step[r], rowPosition[i]);
        const int noise = params.noise == codegen::NoiseKind::uniform
                              ? static_cast<int>(referenceMix64(noiseKey) %
                                                 static_cast<uint64_t>(params.vocab))
                              : mask;
        const bool candidate = params.noise == codegen::NoiseKind::uniform || before[i] == mask;
        int want = before[i];
        if (params.initialCanvas)
          want = noise;
        else if (keep[i])
          want = sampled[i];
        else if (candidate)
          want = noise;
        ASSERT_EQ(canvas[i], want) << kernel.name << " row " << i;
      }
    }
  }
}

} // namespace
