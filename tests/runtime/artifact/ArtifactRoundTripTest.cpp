// Writing an artifact and reading it back gives every field and every weight byte unchanged, with
// weights aligned and mapped in place.
#include "ArtifactTestSupport.h"

#include <cstring>

namespace dlm::artifact {
namespace {

using testing::SampleArtifact;
using testing::ScratchDirectory;

std::string text(ByteView bytes) {
  return std::string(reinterpret_cast<const char *>(bytes.data), bytes.size);
}

// memcmp, but an empty tensor's bytes may be a null pointer.
bool sameBytes(const void *a, const void *b, size_t size) {
  return size == 0 || std::memcmp(a, b, size) == 0;
}

class ArtifactRoundTripTest : public ::testing::Test {
protected:
  void SetUp() override {
    path = scratch.file("model.dlm");
    Status written = writeArtifact(path, sample.contents);
    ASSERT_TRUE(written.isOk()) << written.message();
    auto opened = ArtifactReader::open(path);
    ASSERT_TRUE(opened.isOk()) << opened.status().message();
    reader.emplace(std::move(opened).value());
  }

  ScratchDirectory scratch;
  SampleArtifact sample;
  std::string path;
  std::optional<ArtifactReader> reader;
};

TEST_F(ArtifactRoundTripTest, HeaderFieldsSurvive) {
  EXPECT_EQ(reader->path(), path);
  EXPECT_EQ(reader->schemaVersion().major, kSchemaMajor);
  EXPECT_EQ(reader->schemaVersion().minor, kSchemaMinor);
  EXPECT_EQ(reader->producer(), "dlm artifact tests");
  EXPECT_EQ(reader->fileSize(), std::filesystem::file_size(path));
}

// Schema 1.3: the chat template and its special-token variables; absent when not written (as in
// artifacts before 1.3), present even when empty.
TEST_F(ArtifactRoundTripTest, ChatTemplateSurvivesAndIsAbsentWhenNotWritten) {
  EXPECT_FALSE(reader->chatTemplate().has_value());
  EXPECT_TRUE(reader->chatSpecialTokens().empty());

  const std::string source = "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}";
  sample.contents.chatTemplate = std::string_view(source);
  sample.contents.chatSpecialTokens = {{"eos_token", std::string("<|im_end|>")},
                                       {"pad_token", std::string("<|endoftext|>")}};
  const std::string chatPath = scratch.file("chat.dlm");
  ASSERT_TRUE(writeArtifact(chatPath, sample.contents).isOk());
  auto chat = ArtifactReader::open(chatPath);
  ASSERT_TRUE(chat.isOk()) << chat.status().message();
  ASSERT_TRUE(chat->chatTemplate().has_value());
  EXPECT_EQ(*chat->chatTemplate(), source);
  EXPECT_EQ(chat->chatSpecialTokens(), sample.contents.chatSpecialTokens);

  sample.contents.chatTemplate = std::string_view();
  const std::string emptyPath = scratch.file("empty_chat.dlm");
  ASSERT_TRUE(writeArtifact(emptyPath, sample.contents).isOk());
  auto empty = ArtifactReader::open(emptyPath);
  ASSERT_TRUE(empty.isOk()) << empty.status().message();
  ASSERT_TRUE(empty->chatTemplate().has_value());
  EXPECT_TRUE(empty->chatTemplate()->empty());

  sample.contents.chatSpecialTokens = {{"eos_token", int64_t{3}}};
  EXPECT_NE(writeArtifact(scratch.file("bad_chat.dlm"), sample.contents).message().find(
                "chat special token 'eos_token' is not text"),
            std::string::npos);
}

TEST_F(ArtifactRoundTripTest, ConfigSurvives) {
  const ModelConfig &config = reader->config();
  EXPECT_EQ(config, sample.contents.config);
  // Spot checks, in case operator== misses a field.
  EXPECT_EQ(config.architecture, "LLaDAModelLM");
  EXPECT_EQ(config.eosTokenIds, (std::vector<int64_t>{126081, 126348}));
  EXPECT_EQ(config.attentionMask, AttentionMaskKind::bidirectional);
  EXPECT_EQ(config.rmsNormEps, 1e-5);
  EXPECT_EQ(std::get<std::string>(config.extra.at("activation")), "silu");
  EXPECT_EQ(std::get<bool>(config.extra.at("use_qk_norm")), true);
  EXPECT_EQ(std::get<int64_t>(config.extra.at("sliding_window")), 4096);
  EXPECT_EQ(std::get<double>(config.extra.at("rope_scaling_factor")), 2.5);
}

TEST_F(ArtifactRoundTripTest, TokenizerAndProgramSurvive) {
  EXPECT_EQ(reader->tokenizerJson(), sample.contents.tokenizerJson);
  const DecodingProgram &program = reader->program();
  EXPECT_EQ(program.policy, "llada_threshold");
  EXPECT_EQ(program.knobs, sample.contents.program.knobs);
  EXPECT_EQ(program.mlir, sample.contents.program.mlir);
}

TEST_F(ArtifactRoundTripTest, DecodeProgramsSurviveInOrder) {
  const std::vector<DecodingProgram> &programs = reader->decodePrograms();
  ASSERT_EQ(programs.size(), 2u);
  for (size_t i = 0; i < programs.size(); ++i) {
    const DecodingProgram &expected = sample.contents.decodePrograms[i];
    EXPECT_EQ(programs[i].policy, expected.policy);
    EXPECT_EQ(programs[i].knobs, expected.knobs);
    EXPECT_EQ(programs[i].ops, expected.ops);
  }
  EXPECT_EQ(programs[0].ops[2].name, "block");
  EXPECT_EQ(std::get<double>(programs[0].ops[3].parameters.at("temperature")), 0.5);
}

TEST_F(ArtifactRoundTripTest, KernelsSurvive) {
  const auto &expected = sample.contents.kernelTargets;
  const auto &actual = reader->kernelTargets();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t t = 0; t < expected.size(); ++t) {
    SCOPED_TRACE(expected[t].target);
    EXPECT_EQ(actual[t].target, expected[t].target);
    ASSERT_EQ(actual[t].kernels.size(), expected[t].kernels.size());
    for (size_t k = 0; k < expected[t].kernels.size(); ++k) {
      const Kernel &want = expected[t].kernels[k];
      const Kernel &got = actual[t].kernels[k];
      SCOPED_TRACE(want.name);
      EXPECT_EQ(got.name, want.name);
      EXPECT_EQ(got.kind, want.kind);
      EXPECT_EQ(text(got.cubin), text(want.cubin));
      EXPECT_EQ(got.ptx, want.ptx);
      EXPECT_EQ(got.source, want.source);
      EXPECT_EQ(got.resources, want.resources);
      EXPECT_EQ(got.parameters, want.parameters);
      if (!got.cubin.empty()) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(got.cubin.data) % 64, 0u);
      }
    }
  }
  ASSERT_NE(reader->findKernelTarget("sm_90"), nullptr);
  EXPECT_EQ(reader->findKernelTarget("sm_90")->kernels[0].resources.sharedMemoryBytes, 49152u);
  // The CUDA source survives where it was written (schema 1.1) and reads as empty where not.
  EXPECT_NE(reader->findKernelTarget("sm_90")->kernels[0].source.find("dlm_matmul_bf16"),
            std::string_view::npos);
  EXPECT_TRUE(reader->findKernelTarget("sm_90")->kernels[1].source.empty());
  EXPECT_TRUE(reader->findKernelTarget("cpu")->kernels[0].source.empty());
  EXPECT_EQ(reader->findKernelTarget("sm_70"), nullptr);
}

TEST_F(ArtifactRoundTripTest, WeightsSurviveAlignedAndMappedInPlace) {
  const auto &expected = sample.contents.weights;
  const auto &actual = reader->weights();
  ASSERT_EQ(actual.size(), expected.size());
  std::vector<uint8_t> file = testing::readBytes(path);
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    const WeightView &weight = actual[i];
    EXPECT_EQ(weight.name, expected[i].name);
    EXPECT_EQ(weight.dtype, expected[i].dtype);
    EXPECT_EQ(weight.shape.toVector(), expected[i].shape);
    EXPECT_EQ(weight.size, expected[i].size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(weight.data) % 64, 0u);
    EXPECT_EQ(weight.fileOffset % 64, 0u);
    ASSERT_LE(weight.fileOffset + weight.size, file.size());
    EXPECT_TRUE(sameBytes(weight.data, sample.weightBytes[i].data(), weight.size));
    EXPECT_TRUE(
        sameBytes(file.data() + weight.fileOffset, sample.weightBytes[i].data(), weight.size));
    EXPECT_EQ(reader->findWeight(expected[i].name), &weight);
  }
  EXPECT_EQ(reader->findWeight("model.scale")->shape.rank(), 0u);
  EXPECT_EQ(reader->findWeight("model.empty")->size, 0u);
}

TEST_F(ArtifactRoundTripTest, MissingWeightIsReportedByName) {
  EXPECT_EQ(reader->findWeight("lm_head.weight"), nullptr);
  auto missing = reader->weight("lm_head.weight");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().message(),
            "artifact '" + path + "': no weight named 'lm_head.weight'");
  auto present = reader->weight("model.norm.weight");
  ASSERT_TRUE(present.isOk());
  EXPECT_EQ(present->dtype, DType::f16);
}

TEST_F(ArtifactRoundTripTest, FileLayoutMatchesTheSchemaComment) {
  std::vector<uint8_t> file = testing::readBytes(path);
  const size_t metadataEnd = testing::metadataEnd(file);
  EXPECT_EQ(std::string(file.begin() + 8, file.begin() + 12), "DLM1");
  const fb::Artifact *root = fb::GetSizePrefixedArtifact(file.data());
  const uint64_t sectionStart = root->weight_section_offset();
  EXPECT_EQ(sectionStart % 64, 0u);
  EXPECT_GE(sectionStart, metadataEnd);
  EXPECT_LT(sectionStart - metadataEnd, 64u);
  EXPECT_EQ(sectionStart + root->weight_section_size(), file.size());
  // Everything between the metadata, the weights and each other is zero padding.
  std::vector<bool> used(file.size(), false);
  for (size_t i = 0; i < metadataEnd; ++i)
    used[i] = true;
  for (const WeightView &weight : reader->weights())
    for (uint64_t i = 0; i < weight.size; ++i)
      used[weight.fileOffset + i] = true;
  for (size_t i = 0; i < file.size(); ++i)
    if (!used[i])
      ASSERT_EQ(file[i], 0) << "padding byte " << i;
}

TEST_F(ArtifactRoundTripTest, MovedReaderKeepsItsViews) {
  const void *data = reader->findWeight("model.norm.weight")->data;
  std::string_view mlir = reader->program().mlir;
  ArtifactReader moved = std::move(*reader);
  reader.reset(); // the moved-from reader must not unmap what `moved` still uses
  const WeightView *weight = moved.findWeight("model.norm.weight");
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->data, data);
  EXPECT_EQ(std::memcmp(weight->data, sample.weightBytes[2].data(), weight->size), 0);
  EXPECT_EQ(moved.program().mlir, mlir);

  ArtifactReader assigned = std::move(moved);
  EXPECT_EQ(
      std::memcmp(assigned.findWeight("model.norm.weight")->data, sample.weightBytes[2].data(), 14),
      0);
}

TEST(ArtifactRoundTrip, MinimalArtifactHasEmptyListsAndTexts) {
  ScratchDirectory scratch;
  ArtifactContents contents;
  contents.config.architecture = "Dream";
  const std::string path = scratch.file("minimal.dlm");
  ASSERT_TRUE(writeArtifact(path, contents).isOk());
  auto reader = ArtifactReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_EQ(reader->config(), contents.config);
  EXPECT_EQ(reader->config().maskTokenId, -1);
  EXPECT_TRUE(reader->tokenizerJson().empty());
  EXPECT_TRUE(reader->program().policy.empty());
  EXPECT_TRUE(reader->program().mlir.empty());
  EXPECT_TRUE(reader->kernelTargets().empty());
  EXPECT_TRUE(reader->weights().empty());
  EXPECT_EQ(reader->fileSize() % 64, 0u);
}

// A scalar's shape is an empty int64 vector, which flatbuffers does not align to 8 bytes (there is
// nothing in it to align). Names of 1..8 characters move it across both 8-byte phases, so the
// reader meets it aligned and misaligned; either way it reads back as rank 0 (ONNX initializers
// and safetensors tensors can be scalars).
TEST(ArtifactRoundTrip, ScalarWeightReadsBackWhereverItsShapeLands) {
  ScratchDirectory scratch;
  const float one = 1.0f;
  for (size_t length = 1; length <= 8; ++length) {
    ArtifactContents contents;
    contents.config.architecture = "Dream";
    const std::string name(length, 's');
    contents.weights.push_back({name, DType::f32, {}, &one, sizeof(one)});
    const std::string path = scratch.file(name + ".dlm");
    Status written = writeArtifact(path, contents);
    ASSERT_TRUE(written.isOk()) << written.message();
    auto reader = ArtifactReader::open(path);
    ASSERT_TRUE(reader.isOk()) << "name length " << length << ": " << reader.status().message();
    const WeightView *scalar = reader->findWeight(name);
    ASSERT_NE(scalar, nullptr);
    EXPECT_EQ(scalar->shape.rank(), 0u);
    EXPECT_EQ(scalar->size, sizeof(one));
    EXPECT_TRUE(sameBytes(scalar->data, &one, sizeof(one)));
  }
}

TEST(ArtifactRoundTrip, SameContentsGiveTheSameBytes) {
  ScratchDirectory scratch;
  SampleArtifact sample;
  ASSERT_TRUE(writeArtifact(scratch.file("a.dlm"), sample.contents).isOk());
  ASSERT_TRUE(writeArtifact(scratch.file("b.dlm"), sample.contents).isOk());
  EXPECT_EQ(testing::readBytes(scratch.file("a.dlm")), testing::readBytes(scratch.file("b.dlm")));
}

TEST(ArtifactRoundTrip, NewerMinorVersionIsAccepted) {
  ScratchDirectory scratch;
  SampleArtifact sample;
  const std::string path = scratch.file("model.dlm");
  ASSERT_TRUE(writeArtifact(path, sample.contents).isOk());
  std::vector<uint8_t> bytes = testing::readBytes(path);
  testing::mutableRoot(bytes)->mutable_schema_version()->mutate_minor(kSchemaMinor + 7);
  testing::writeBytes(path, bytes);
  auto reader = ArtifactReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_EQ(reader->schemaVersion().minor, kSchemaMinor + 7);
}

} // namespace
} // namespace dlm::artifact
