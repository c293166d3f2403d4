// The writer refuses contents the reader would reject, reports I/O errors with the system's
// reason, and never leaves a partial artifact (or a temporary file) behind.
#include "ArtifactTestSupport.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <csignal>

namespace dlm::artifact {
namespace {

using ::testing::HasSubstr;
using testing::SampleArtifact;
using testing::ScratchDirectory;

class ArtifactWriterTest : public ::testing::Test {
protected:
  // Writes `sample.contents` and expects an error containing `expected`, with nothing left in
  // the directory.
  void expectWriteError(const std::string &expected) {
    const std::string path = scratch.file("model.dlm");
    Status status = writeArtifact(path, sample.contents);
    ASSERT_FALSE(status.isOk());
    EXPECT_THAT(status.message(), HasSubstr("artifact '" + path + "': "));
    EXPECT_THAT(status.message(), HasSubstr(expected));
    EXPECT_TRUE(scratch.entries().empty()) << "left behind: " << scratch.entries().front();
  }

  ScratchDirectory scratch;
  SampleArtifact sample;
};

TEST_F(ArtifactWriterTest, RejectsSizeNotMatchingShape) {
  sample.contents.weights[0].shape = {8, 5};
  expectWriteError(
      "weight 'model.embed_tokens.weight' holds 64 bytes but shape [8, 5] of bf16 needs 80");
}

TEST_F(ArtifactWriterTest, RejectsUnknownDtype) {
  sample.contents.weights[1].dtype = DType::invalid;
  expectWriteError("weight 'model.layers.0.self_attn.q_proj.weight' has unknown dtype 0");
}

TEST_F(ArtifactWriterTest, RejectsNegativeDimension) {
  sample.contents.weights[2].shape = {-7};
  expectWriteError("weight 'model.norm.weight' has a negative dimension in shape [-7]");
}

TEST_F(ArtifactWriterTest, RejectsDuplicateWeightNames) {
  sample.contents.weights[1].name = sample.contents.weights[0].name;
  expectWriteError("weight 'model.embed_tokens.weight' appears twice");
}

TEST_F(ArtifactWriterTest, RejectsEmptyWeightName) {
  sample.contents.weights[3].name.clear();
  expectWriteError("a weight has an empty name");
}

TEST_F(ArtifactWriterTest, RejectsWeightWithoutData) {
  sample.contents.weights[2].data = nullptr;
  expectWriteError("weight 'model.norm.weight' has 14 bytes but no data");
}

TEST_F(ArtifactWriterTest, RejectsMissingArchitecture) {
  sample.contents.config.architecture.clear();
  expectWriteError("the model config has no architecture name");
}

TEST_F(ArtifactWriterTest, RejectsUnknownAttentionMask) {
  sample.contents.config.attentionMask = static_cast<AttentionMaskKind>(42);
  expectWriteError("the model config has unknown attention mask kind 42");
}

TEST_F(ArtifactWriterTest, RejectsDuplicateKernelTargetsAndKernels) {
  sample.contents.kernelTargets[1].target = "sm_90";
  expectWriteError("kernel target 'sm_90' appears twice");
  sample.contents.kernelTargets[1].target = "sm_80";
  sample.contents.kernelTargets[0].kernels[1].name = "dlm_matmul_bf16";
  expectWriteError("kernel 'dlm_matmul_bf16' for target 'sm_90' appears twice");
}

TEST_F(ArtifactWriterTest, RejectsEmptyAttributeKey) {
  sample.contents.program.knobs[""] = int64_t{1};
  expectWriteError("the decoding program has an attribute with an empty key");
}

TEST_F(ArtifactWriterTest, RejectsDecodeProgramsARequestCouldNotTellApart) {
  sample.contents.decodePrograms[1].policy = "low-confidence";
  expectWriteError("two decode programs are named 'low-confidence'");
  sample.contents.decodePrograms[1].policy = "low_confidence"; // a request selects both alike
  expectWriteError("two decode programs are named 'low_confidence'");
  sample.contents.decodePrograms[1].policy = "";
  expectWriteError("a decode program has no policy name");
  sample.contents.decodePrograms[1].policy = "entropy-bound";
  sample.contents.decodePrograms[1].ops[0].kind = "";
  expectWriteError("decode program 'entropy-bound': record 0 has no kind");
}

TEST_F(ArtifactWriterTest, RejectsMetadataBeyondTheFlatbufferLimitBeforeReadingIt) {
  // Never dereferenced: the size check comes first.
  static const uint8_t placeholder = 0;
  sample.contents.kernelTargets[0].kernels[0].cubin = ByteView{&placeholder, size_t{3} << 30};
  expectWriteError("a flatbuffer can hold; weights are stored outside it");
}

TEST_F(ArtifactWriterTest, ReportsMissingDirectory) {
  const std::string path = scratch.file("no-such-dir/model.dlm");
  Status status = writeArtifact(path, sample.contents);
  ASSERT_FALSE(status.isOk());
  EXPECT_THAT(status.message(), HasSubstr("artifact '" + path + "': cannot create temporary file"));
  EXPECT_THAT(status.message(), HasSubstr("No such file or directory"));
}

TEST_F(ArtifactWriterTest, FailedWriteKeepsTheOldArtifactAndLeavesNoTemporaryFile) {
  const std::string path = scratch.file("model.dlm");
  ASSERT_TRUE(writeArtifact(path, sample.contents).isOk());
  const std::vector<uint8_t> before = testing::readBytes(path);

  // The disk fills halfway through the file: a file size limit (ulimit -f) makes write(2) fail
  // with EFBIG once the metadata is written (SIGXFSZ ignored, as a shell's ulimit leaves it
  // fatal only for processes that do not).
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  void (*savedHandler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = static_cast<rlim_t>(before.size() - 8);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  Status status = writeArtifact(path, sample.contents);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, savedHandler);

  ASSERT_FALSE(status.isOk());
  EXPECT_THAT(status.message(), HasSubstr("cannot write weight '"));
  EXPECT_THAT(status.message(), HasSubstr("File too large"));
  EXPECT_EQ(testing::readBytes(path), before);
  EXPECT_EQ(scratch.entries(), std::vector<std::string>{"model.dlm"});
}

TEST_F(ArtifactWriterTest, ReplacesAnExistingArtifact) {
  const std::string path = scratch.file("model.dlm");
  ASSERT_TRUE(writeArtifact(path, sample.contents).isOk());
  sample.contents.config.architecture = "DreamModel";
  sample.contents.weights.pop_back();
  ASSERT_TRUE(writeArtifact(path, sample.contents).isOk());
  auto reader = ArtifactReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_EQ(reader->config().architecture, "DreamModel");
  EXPECT_EQ(reader->weights().size(), sample.contents.weights.size());
  EXPECT_EQ(scratch.entries(), std::vector<std::string>{"model.dlm"});
}

TEST(ArtifactFormat, DtypeSizesAndNames) {
  EXPECT_EQ(dtypeSize(DType::f32), 4u);
  EXPECT_EQ(dtypeSize(DType::bf16), 2u);
  EXPECT_EQ(dtypeSize(DType::fp8_e4m3), 1u);
  EXPECT_EQ(dtypeSize(DType::i64), 8u);
  EXPECT_EQ(dtypeSize(DType::invalid), 0u);
  EXPECT_EQ(dtypeSize(static_cast<DType>(200)), 0u);
  EXPECT_STREQ(dtypeName(DType::bf16), "bf16");
  EXPECT_STREQ(dtypeName(static_cast<DType>(200)), "unknown");
  // Every named dtype has a size, so the reader accepts everything the writer can express; i4 is
  // half a byte (storageBytes), its rows of an even length.
  for (int value = 1; value <= static_cast<int>(DType::MAX); ++value)
    EXPECT_GT(storageBytes(static_cast<DType>(value), 2), 0u)
        << fb::EnumNameDType(static_cast<DType>(value));
  EXPECT_EQ(dtypeSize(DType::i4), 0u);
  EXPECT_STREQ(dtypeName(DType::i4), "i4");
  EXPECT_EQ(storageBytes(DType::i4, 6), 3u);
  EXPECT_EQ(storageBytes(DType::bf16, 6), 12u);
  const std::vector<int64_t> even{3, 4}, odd{4, 3};
  EXPECT_EQ(*weightByteSize("w", DType::i4, ShapeView(even)), 6u);
  StatusOr<uint64_t> oddRows = weightByteSize("w", DType::i4, ShapeView(odd));
  ASSERT_FALSE(oddRows.isOk());
  EXPECT_NE(oddRows.status().message().find("weight 'w' is i4 with shape [4, 3]: its rows must "
                                            "have an even length"),
            std::string::npos)
      << oddRows.status().message();
}

TEST(ArtifactFormat, ByteSizeOverflowIsAnError) {
  const std::vector<int64_t> shape = {int64_t{1} << 40, int64_t{1} << 40};
  Status status = checkWeightByteSize("huge", DType::f32, ShapeView(shape), 0);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(),
            "weight 'huge' has shape [1099511627776, 1099511627776] whose byte size does not fit "
            "in 64 bits");
  // A zero dimension makes any shape empty, however large the others.
  const std::vector<int64_t> empty = {int64_t{1} << 40, int64_t{1} << 40, 0};
  EXPECT_TRUE(checkWeightByteSize("empty", DType::f32, ShapeView(empty), 0).isOk());
}

} // namespace
} // namespace dlm::artifact
