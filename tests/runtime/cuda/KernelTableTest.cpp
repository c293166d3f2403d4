// Generated kernels through NVRTC into an artifact and back: the reader returns the very cubin
// and PTX bytes, the CUDA source, the resource report and the launch facts the compiler
// recorded.
#include "compiler/codegen/KernelCompilation.h"
#include "compiler/codegen/Kernels.h"
#include "runtime/artifact/ArtifactReader.h"
#include "runtime/artifact/ArtifactWriter.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <unistd.h>

namespace {

using namespace dlm;

TEST(KernelTable, CompiledKernelsRoundTripThroughAnArtifact) {
  std::vector<codegen::KernelSource> kernels;
  kernels.push_back(*codegen::generateRmsNorm({256}));
  kernels.push_back(*codegen::generateRenoise({1000, codegen::NoiseKind::uniform, false}));
  kernels.push_back(*codegen::generateEmbedding({64, codegen::ElementType::f32}));
  kernels.push_back(*codegen::generateKvStore({32, 16, codegen::ElementType::f32}));
  const codegen::NvrtcCompiler compiler;
  // The table owns what its records point at: the kernels it was given may go away.
  std::vector<codegen::KernelSource> given = kernels;
  StatusOr<codegen::KernelTable> table = codegen::compileKernels(given, compiler);
  given.clear();
  ASSERT_TRUE(table) << table.status().message();
  ASSERT_EQ(table->targets.size(), 2u);
  EXPECT_EQ(table->targets[0].target, "sm_80");
  EXPECT_EQ(table->targets[1].target, "sm_90");

  artifact::ArtifactContents contents;
  contents.producer = "KernelTableTest";
  contents.config.architecture = "test";
  contents.kernelTargets = table->targets;
  const std::string path =
      ::testing::TempDir() + "kernel_table_" + std::to_string(::getpid()) + ".dlm";
  ASSERT_TRUE(artifact::writeArtifact(path, contents));
  StatusOr<artifact::ArtifactReader> reader = artifact::ArtifactReader::open(path);
  ASSERT_TRUE(reader) << reader.status().message();
  const std::vector<artifact::KernelTarget> &read = reader->kernelTargets();
  ASSERT_EQ(read.size(), 2u);
  for (size_t t = 0; t < read.size(); ++t) {
    ASSERT_EQ(read[t].kernels.size(), kernels.size());
    for (size_t k = 0; k < kernels.size(); ++k) {
      const artifact::Kernel &got = read[t].kernels[k];
      const artifact::Kernel &want = table->targets[t].kernels[k];
      EXPECT_EQ(got.name, kernels[k].name);
      EXPECT_EQ(got.kind, kernels[k].kind);
      EXPECT_EQ(std::string(got.cubin.begin(), got.cubin.end()),
                std::string(want.cubin.begin(), want.cubin.end()));
      EXPECT_EQ(got.ptx, want.ptx);
      EXPECT_EQ(got.source, kernels[k].source);
      EXPECT_EQ(got.resources, want.resources);
      EXPECT_EQ(std::get<int64_t>(got.parameters.at("block_threads")),
                static_cast<int64_t>(kernels[k].blockThreads));
      EXPECT_EQ(std::get<bool>(got.parameters.at("hot")), kernels[k].hot);
    }
  }
  std::remove(path.c_str());
}

} // namespace
