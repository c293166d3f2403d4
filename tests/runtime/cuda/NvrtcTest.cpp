// Every generated kernel compiles with NVRTC: the production shapes for sm_80 and sm_90, the
// shapes the emulated suite runs for sm_90. The resource report of each is printed; a hot kernel
// that spills, uses a stack frame, or exceeds its shared-memory estimate fails. Also the compile
// service's error paths and the ptxas report parser.
#include "compiler/codegen/NvrtcCompiler.h"
#include "tests/runtime/cuda/EmuKernelConfigs.h"
#include "tests/runtime/cuda/ProductionKernelConfigs.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

namespace {

using namespace dlm;
using namespace dlm::cudatest;

template <typename Params>
std::vector<codegen::KernelSource>
generateAll(const std::vector<Params> &configs,
            StatusOr<codegen::KernelSource> (*generate)(const Params &)) {
  std::vector<codegen::KernelSource> kernels;
  for (const Params &params : configs) {
    StatusOr<codegen::KernelSource> kernel = generate(params);
    EXPECT_TRUE(kernel) << kernel.status().message();
    if (kernel)
      kernels.push_back(std::move(*kernel));
  }
  return kernels;
}

// Compiles each kernel for each target, two at a time (NVRTC programs are independent; the
// machines here have two cores), then checks and prints the reports in a stable order.
void compileAndCheck(const std::vector<codegen::KernelSource> &kernels,
                     const std::vector<std::string> &targets) {
  struct Job {
    const codegen::KernelSource *kernel;
    std::string target;
    StatusOr<codegen::CompiledKernel> result = Status::error("not compiled");
  };
  std::vector<Job> jobs;
  for (const codegen::KernelSource &kernel : kernels)
    for (const std::string &target : targets)
      jobs.push_back({&kernel, target});
  const codegen::NvrtcCompiler compiler;
  auto work = [&](size_t first) {
    for (size_t i = first; i < jobs.size(); i += 2)
      jobs[i].result =
          compiler.compile(jobs[i].kernel->source, jobs[i].kernel->name, jobs[i].target);
  };
  std::thread helper(work, 1);
  work(0);
  helper.join();

  for (const Job &job : jobs) {
    const codegen::KernelSource &kernel = *job.kernel;
    ASSERT_TRUE(job.result) << job.result.status().message();
    const codegen::CompiledKernel &compiled = *job.result;
    const artifact::KernelResources &r = compiled.resources;
    std::printf("  %-52s %s%s registers %3u  spill stores %u loads %u  stack %3u  smem %6u\n",
                kernel.name.c_str(), job.target.c_str(), kernel.hot ? " hot" : "    ", r.registers,
                r.spillStoreBytes, r.spillLoadBytes, r.stackBytes, r.sharedMemoryBytes);
    EXPECT_GT(compiled.cubin.size(), 4u);
    EXPECT_EQ(std::string(compiled.cubin.begin(), compiled.cubin.begin() + 4), "\x7f"
                                                                               "ELF")
        << kernel.name << ": the cubin is not an ELF image";
    EXPECT_NE(compiled.ptx.find(".entry " + kernel.name), std::string::npos) << kernel.name;
    EXPECT_LE(r.registers, 255u) << kernel.name;
    EXPECT_LE(r.sharedMemoryBytes, kernel.sharedMemoryBytes)
        << kernel.name << ": more shared memory than the generator accounted for";
    if (kernel.hot) {
      EXPECT_EQ(r.spillStoreBytes, 0u) << kernel.name << " (hot) spills on " << job.target;
      EXPECT_EQ(r.spillLoadBytes, 0u) << kernel.name << " (hot) spills on " << job.target;
      EXPECT_EQ(r.stackBytes, 0u) << kernel.name << " (hot) uses local memory on " << job.target;
      // 128-thread attention blocks must keep enough blocks resident: 65536 registers per SM.
      EXPECT_LE(r.registers * kernel.blockThreads, 65536u / 2)
          << kernel.name << ": fewer than two blocks fit in an SM's registers";
    }
  }
}

const std::vector<std::string> kBothTargets = {"sm_80", "sm_90"};
const std::vector<std::string> kSm90 = {"sm_90"};

TEST(NvrtcCompile, AttentionAtModelShapes) {
  compileAndCheck(generateAll(productionAttentionConfigs(), codegen::generateAttention),
                  kBothTargets);
}

TEST(NvrtcCompile, SamplerAcceptGateRenoiseAtModelShapes) {
  std::vector<codegen::KernelSource> kernels =
      generateAll(productionSamplerConfigs(), codegen::generateSampler);
  for (auto &kernel : generateAll(productionAcceptConfigs(), codegen::generateAccept))
    kernels.push_back(std::move(kernel));
  for (auto &kernel : generateAll(productionRenoiseConfigs(), codegen::generateRenoise))
    kernels.push_back(std::move(kernel));
  for (auto &kernel :
       generateAll(productionBlockLoopGateConfigs(), codegen::generateBlockLoopGate))
    kernels.push_back(std::move(kernel));
  compileAndCheck(kernels, kBothTargets);
}

TEST(NvrtcCompile, NormRopeActivationAtModelShapes) {
  std::vector<codegen::KernelSource> kernels =
      generateAll(productionRmsNormConfigs(), codegen::generateRmsNorm);
  for (auto &kernel : generateAll(productionRopeConfigs(), codegen::generateRope))
    kernels.push_back(std::move(kernel));
  for (auto &kernel :
       generateAll(productionGatedActivationConfigs(), codegen::generateGatedActivation))
    kernels.push_back(std::move(kernel));
  compileAndCheck(kernels, kBothTargets);
}

TEST(NvrtcCompile, EmbeddingKvStoreNarrowWeightsAtModelShapes) {
  std::vector<codegen::KernelSource> kernels =
      generateAll(productionEmbeddingConfigs(), codegen::generateEmbedding);
  for (auto &kernel : generateAll(productionKvStoreConfigs(), codegen::generateKvStore))
    kernels.push_back(std::move(kernel));
  for (auto &kernel : generateAll(productionWidenWeightConfigs(), codegen::generateWidenWeight))
    kernels.push_back(std::move(kernel));
  for (auto &kernel : generateAll(productionQuantizeRowsConfigs(), codegen::generateQuantizeRows))
    kernels.push_back(std::move(kernel));
  compileAndCheck(kernels, kBothTargets);
}

// Every kernel a DiffusionGemma program launches, at its model's and its fixtures' shapes.
TEST(NvrtcCompile, DiffusionGemmaKernelsAtModelShapes) {
  std::vector<codegen::KernelSource> kernels =
      generateAll(diffusionGemmaAttentionConfigs(), codegen::generateAttention);
  auto append = [&](std::vector<codegen::KernelSource> more) {
    for (auto &kernel : more)
      kernels.push_back(std::move(kernel));
  };
  append(generateAll(diffusionGemmaEmbeddingConfigs(), codegen::generateEmbedding));
  append(generateAll(diffusionGemmaSoftEmbeddingConfigs(), codegen::generateSoftEmbedding));
  append(generateAll(diffusionGemmaRmsNormConfigs(), codegen::generateRmsNorm));
  append(generateAll(diffusionGemmaRopeConfigs(), codegen::generateRope));
  append(generateAll(diffusionGemmaGatedActivationConfigs(), codegen::generateGatedActivation));
  append(generateAll(diffusionGemmaScaleConfigs(), codegen::generateScale));
  append(generateAll(diffusionGemmaAddConfigs(), codegen::generateAdd));
  append(generateAll(diffusionGemmaSoftcapConfigs(), codegen::generateSoftcap));
  append(generateAll(diffusionGemmaMoeConfigs(), codegen::generateMoeRoute));
  append(generateAll(diffusionGemmaMoeConfigs(), codegen::generateMoePlan));
  append(generateAll(diffusionGemmaMoeConfigs(), codegen::generateMoeCombine));
  for (const codegen::MoeParams &moe : diffusionGemmaMoeConfigs())
    for (bool gated : {true, false}) {
      StatusOr<codegen::KernelSource> kernel = codegen::generateMoeExperts(moe, gated);
      ASSERT_TRUE(kernel) << kernel.status().message();
      kernels.push_back(std::move(*kernel));
    }
  compileAndCheck(kernels, kBothTargets);
}

TEST(NvrtcCompile, EmulatedSuiteKernels) {
  std::vector<codegen::KernelSource> kernels =
      generateAll(attentionConfigs(), codegen::generateAttention);
  auto append = [&](std::vector<codegen::KernelSource> more) {
    for (auto &kernel : more)
      kernels.push_back(std::move(kernel));
  };
  append(generateAll(rmsNormConfigs(), codegen::generateRmsNorm));
  append(generateAll(ropeConfigs(), codegen::generateRope));
  append(generateAll(gatedActivationConfigs(), codegen::generateGatedActivation));
  append(generateAll(samplerConfigs(), codegen::generateSampler));
  append(generateAll(acceptConfigs(), codegen::generateAccept));
  append(generateAll(renoiseConfigs(), codegen::generateRenoise));
  append(generateAll(embeddingConfigs(), codegen::generateEmbedding));
  append(generateAll(kvStoreConfigs(), codegen::generateKvStore));
  append(generateAll(softEmbeddingConfigs(), codegen::generateSoftEmbedding));
  append(generateAll(moeConfigs(), codegen::generateMoeRoute));
  append(generateAll(moeConfigs(), codegen::generateMoePlan));
  append(generateAll(moeConfigs(), codegen::generateMoeCombine));
  for (const codegen::MoeParams &moe : moeConfigs())
    for (bool gated : {true, false}) {
      StatusOr<codegen::KernelSource> kernel = codegen::generateMoeExperts(moe, gated);
      ASSERT_TRUE(kernel) << kernel.status().message();
      kernels.push_back(std::move(*kernel));
    }
  compileAndCheck(kernels, kSm90);
}

TEST(NvrtcCompiler, CompileErrorReturnsTheLog) {
  const codegen::NvrtcCompiler compiler;
  StatusOr<codegen::CompiledKernel> result = compiler.compile(
      "extern \"C\" __global__ void broken(int *x) { x[0] = undefined_name; }", "broken", "sm_90");
  ASSERT_FALSE(result);
  EXPECT_NE(result.status().message().find("undefined_name"), std::string::npos)
      << result.status().message();
  EXPECT_NE(result.status().message().find("broken for sm_90"), std::string::npos)
      << result.status().message();
}

TEST(NvrtcCompiler, BadTargetIsNamed) {
  const codegen::NvrtcCompiler compiler;
  StatusOr<codegen::CompiledKernel> result =
      compiler.compile("extern \"C\" __global__ void k() {}", "k", "compute_90");
  ASSERT_FALSE(result);
  EXPECT_NE(result.status().message().find("compute_90"), std::string::npos);
  result = compiler.compile("extern \"C\" __global__ void k() {}", "k", "sm_9");
  ASSERT_FALSE(result);
}

TEST(NvrtcCompiler, MissingEntryIsNamed) {
  const codegen::NvrtcCompiler compiler;
  StatusOr<codegen::CompiledKernel> result = compiler.compile(
      "extern \"C\" __global__ void present(int *x) { x[0] = 1; }", "absent", "sm_80");
  ASSERT_FALSE(result);
  EXPECT_NE(result.status().message().find("absent"), std::string::npos)
      << result.status().message();
}

TEST(NvrtcCompiler, SupportsTheTargetsDlmShips) {
  const std::vector<std::string> targets = codegen::NvrtcCompiler::supportedTargets();
  EXPECT_NE(std::find(targets.begin(), targets.end(), "sm_80"), targets.end());
  EXPECT_NE(std::find(targets.begin(), targets.end(), "sm_90"), targets.end());
  EXPECT_NE(codegen::NvrtcCompiler::version(), "unknown");
}

TEST(PtxasReport, ParsesTheEntryFunctionsBlock) {
  const char *log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'kernel_two' for 'sm_90'\n"
      "ptxas info    : Function properties for kernel_two\n"
      "ptxas         .     40 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 96 registers, used 1 barriers, 40 bytes cumulative stack size, "
      "12544 bytes smem\n"
      "ptxas info    : Compile time = 33.053 ms\n"
      "ptxas info    : Function properties for __internal_trig_reduction_slowpathd\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
  StatusOr<artifact::KernelResources> report = codegen::parsePtxasReport(log, "kernel_two");
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->registers, 96u);
  EXPECT_EQ(report->stackBytes, 40u);
  EXPECT_EQ(report->spillStoreBytes, 8u);
  EXPECT_EQ(report->spillLoadBytes, 12u);
  EXPECT_EQ(report->sharedMemoryBytes, 12544u);
  EXPECT_FALSE(codegen::parsePtxasReport(log, "kernel"));
  EXPECT_FALSE(codegen::parsePtxasReport("", "kernel_two"));
}

} // namespace
