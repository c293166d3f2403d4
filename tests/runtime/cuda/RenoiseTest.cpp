// Renoise and initial-canvas kernels on the emulated device: kept positions take the sample,
// rejected candidates take the mask or the counter RNG's uniform token (renoise stream at the
// request's step and position). The candidate rule is the kernel's specialisation, independent
// of the noise: every rejected position (entropy-bound canvases, also re-masking) or only the
// masked ones (low-confidence blocks, whose unmasked tokens stay put).
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
    // Rejected positions that held a token and were given noise: the entropy-bound rule's
    // difference from the masked-only one, which must never do it.
    int tokensRenoised = 0;
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
      ASSERT_TRUE(launched(emulatedDevice().launchArgs(
          kernel.name, emu::Dim3{static_cast<unsigned>((rows + 255) / 256)}, emu::Dim3{256}, rows,
          keepArg, sampledArg, canvasArg, requestArg, positionArg, seedArg, idArg, stepArg, mask)));
      for (int i = 0; i < rows; ++i) {
        const int r = rowRequest[i];
        const int64_t noise = reference::noiseToken(
            referenceNoise(params.noise), params.initialCanvas, mask, params.vocab, seed[r], id[r],
            static_cast<uint64_t>(step[r]), static_cast<uint64_t>(rowPosition[i]));
        const reference::RenoiseCandidates candidates =
            params.candidates == codegen::RenoiseCandidates::everyRejected
                ? reference::RenoiseCandidates::everyPosition
                : reference::RenoiseCandidates::maskedOnly;
        const int64_t want = reference::renoisedToken(candidates, params.initialCanvas, keep[i],
                                                      sampled[i], before[i], mask, noise);
        ASSERT_EQ(canvas[i], want) << kernel.name << " row " << i;
        tokensRenoised += !params.initialCanvas && !keep[i] && before[i] != mask &&
                          canvas[i] != before[i];
      }
    }
    if (params.initialCanvas)
      continue;
    if (params.candidates == codegen::RenoiseCandidates::everyRejected)
      EXPECT_GT(tokensRenoised, 0) << kernel.name;
    else
      EXPECT_EQ(tokensRenoised, 0) << kernel.name;
  }
}

TEST(RenoiseKernel, MaskedOnlyNeedsMaskNoiseAndARenoiseStep) {
  StatusOr<codegen::KernelSource> kernel = codegen::generateRenoise(
      {500, codegen::NoiseKind::uniform, false, codegen::RenoiseCandidates::maskedOnly});
  ASSERT_FALSE(kernel);
  EXPECT_NE(kernel.status().message().find("masked-only candidates need mask noise"),
            std::string::npos)
      << kernel.status().message();
  kernel = codegen::generateRenoise(
      {500, codegen::NoiseKind::maskToken, true, codegen::RenoiseCandidates::maskedOnly});
  ASSERT_FALSE(kernel);
  EXPECT_NE(kernel.status().message().find("initial canvas is noise everywhere"),
            std::string::npos)
      << kernel.status().message();
}

} // namespace
