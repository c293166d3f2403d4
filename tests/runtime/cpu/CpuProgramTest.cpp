// Validation of the "cpu" kernel records before anything runs: every damaged record is refused
// with an error that names it (CpuProgram.h), and an artifact without records asks to recompile.
#include "runtime/cpu/CpuProgram.h"

#include "runtime/model/KernelProgram.h"
#include "runtime/session/Session.h"
#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

namespace dlm::cpu {
namespace {

namespace kp = spec::kernels;
using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;

class CpuProgramTest : public ::testing::Test {
protected:
  void SetUp() override {
    tiny.write(dir.file("tiny.dlm"));
    StatusOr<artifact::ArtifactReader> opened =
        artifact::ArtifactReader::open(dir.file("tiny.dlm"));
    ASSERT_TRUE(opened.isOk()) << opened.status().message();
    reader = std::make_unique<artifact::ArtifactReader>(std::move(*opened));
    StatusOr<std::shared_ptr<const model::ModelWeights>> loaded =
        model::ModelWeights::load(*reader);
    ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
    weights = *loaded;
    records = tiny.cpuKernelTarget().kernels;
  }

  // The index of the record called `name`.
  size_t find(const std::string &name) const {
    for (size_t i = 0; i < records.size(); ++i)
      if (records[i].name == name)
        return i;
    ADD_FAILURE() << "no record " << name;
    return 0;
  }
  artifact::Kernel &record(const std::string &name) { return records[find(name)]; }

  std::string error() const {
    StatusOr<CpuProgram> program = CpuProgram::build(records, *weights);
    return program ? "(built)" : program.status().message();
  }

  TempDir dir;
  TinyModel tiny{TinyModelOptions{}};
  std::unique_ptr<artifact::ArtifactReader> reader;
  std::shared_ptr<const model::ModelWeights> weights;
  std::vector<artifact::Kernel> records;
};

TEST_F(CpuProgramTest, TheTinyModelsRecordsBuild) {
  StatusOr<CpuProgram> program = CpuProgram::build(records, *weights);
  ASSERT_TRUE(program.isOk()) << program.status().message();
  EXPECT_EQ(program->kernels.size(), records.size());
  EXPECT_EQ(program->kernels.front().kind, KernelKind::embedding);
  EXPECT_EQ(program->kernels.back().kind, KernelKind::lmHead);
  // k and v reuse the norm q computed; labels drop the layer prefix.
  const CpuKernel &k = program->kernels[find("layers.0.k_proj")];
  EXPECT_TRUE(k.reusesNorm);
  EXPECT_FALSE(program->kernels[find("layers.0.q_proj")].reusesNorm);
  EXPECT_EQ(k.name, "k_proj");
  EXPECT_EQ(k.normName, "attn_norm");
  EXPECT_EQ(program->kernels[find("layers.1.rope#2")].name, "rope");
  EXPECT_GT(program->rowElements, 0);
}

TEST_F(CpuProgramTest, UnknownKindIsNotSupportedYet) {
  record("layers.0.o_proj").kind = "conv2d";
  EXPECT_EQ(error(), "not supported yet: cpu kernel kind 'conv2d' (cpu kernel record " +
                         std::to_string(find("layers.0.o_proj")) + " ('layers.0.o_proj'))");
}

TEST_F(CpuProgramTest, MissingWeightNamesTheRecordAndTheWeight) {
  record("layers.1.up_proj").parameters["weight"] = std::string("layers.1.upp");
  EXPECT_EQ(error(), "cpu kernel record " + std::to_string(find("layers.1.up_proj")) +
                         " ('layers.1.up_proj'): missing weight 'layers.1.upp'");
}

TEST_F(CpuProgramTest, WeightOfTheWrongShape) {
  // k's weight has kv_heads * head_dim = 12 outputs, q's 24.
  record("layers.0.q_proj").parameters["weight"] = std::string("layers.0.k");
  EXPECT_NE(error().find("('layers.0.q_proj'): the weight's output width is 12, expected 24"),
            std::string::npos)
      << error();
}

TEST_F(CpuProgramTest, UndefinedOperandSlot) {
  record("layers.0.mlp_norm").parameters["operands"] = std::string("99");
  EXPECT_NE(error().find("('layers.0.mlp_norm'): operand slot 99 is not defined by an earlier "
                         "record"),
            std::string::npos)
      << error();
}

TEST_F(CpuProgramTest, MalformedOperandList) {
  record("layers.0.silu_mul").parameters["operands"] = std::string("4,x");
  EXPECT_NE(error().find("is not a comma-separated list of slot numbers"), std::string::npos)
      << error();
}

TEST_F(CpuProgramTest, WrongOperandCount) {
  record("layers.0.residual_add").parameters["operands"] = std::string("2");
  EXPECT_NE(error().find("add takes 2 operands, got 1"), std::string::npos) << error();
}

TEST_F(CpuProgramTest, MissingParameter) {
  record("layers.0.rope").parameters.erase("theta");
  EXPECT_NE(error().find("('layers.0.rope'): parameter 'theta' is missing or not a real"),
            std::string::npos)
      << error();
}

TEST_F(CpuProgramTest, ResultOverlappingALiveValue) {
  // v_proj's result placed on q_proj's, which rope and attention still read.
  artifact::Kernel &q = record("layers.0.q_proj");
  record("layers.0.v_proj").parameters["offset"] = q.parameters.at("offset");
  EXPECT_NE(error().find("('v_proj'): result slot"), std::string::npos) << error();
  EXPECT_NE(error().find("which is read later"), std::string::npos) << error();
}

// A plan or slot number no compiler writes (a corrupt artifact) is refused before the workspace
// is ever sized from it.
TEST_F(CpuProgramTest, HugeOffsetsAndSlotsAreRefused) {
  record("layers.0.v_proj").parameters["offset"] = int64_t(1) << 60;
  EXPECT_NE(error().find("result offset 1152921504606846976 + width"), std::string::npos)
      << error();
  EXPECT_NE(error().find("floats a token row may plan"), std::string::npos) << error();
  records = tiny.cpuKernelTarget().kernels;
  record("layers.0.v_proj").parameters["result"] = int64_t(1) << 24;
  EXPECT_NE(error().find("result slot 16777216 is out of range"), std::string::npos) << error();
}

TEST_F(CpuProgramTest, AttentionMustReadWhatItsLayerStored) {
  artifact::Kernel &store = record("layers.0.kv_store");
  store.parameters["layer"] = int64_t{1};
  EXPECT_NE(error().find("attention reads keys and values that no kv_store of layer 0 stored"),
            std::string::npos)
      << error();
}

TEST_F(CpuProgramTest, KvLayerOutOfRange) {
  record("layers.1.kv_store").parameters["layer"] = int64_t{2};
  EXPECT_NE(error().find("layer 2 has no KV cache (the model has 2 layers)"), std::string::npos)
      << error();
}

TEST_F(CpuProgramTest, UnsupportedMask) {
  record("layers.1.attention").parameters["mask"] = std::string("sliding_window");
  EXPECT_NE(error().find("not supported yet: attention mask 'sliding_window' on the cpu"),
            std::string::npos)
      << error();
}

TEST_F(CpuProgramTest, ProgramMustEndWithTheLmHead) {
  records.pop_back();
  EXPECT_EQ(error(), "the cpu kernel program does not end with an lm_head record");
  records.clear();
  EXPECT_EQ(error(), "the cpu kernel program is empty");
}

TEST_F(CpuProgramTest, LmHeadMustBeLast) {
  records.push_back(records[find("layers.1.residual_add#2")]);
  records.back().name = "late_add";
  EXPECT_NE(error().find("lm_head must be the last record"), std::string::npos) << error();
}

TEST(CpuProgramSessionTest, AnArtifactWithoutCpuRecordsAsksForARecompile) {
  TempDir dir;
  TinyModelOptions options;
  options.cpuRecords = false;
  TinyModel(options).write(dir.file("old.dlm"));
  StatusOr<std::shared_ptr<LoadedModel>> model = LoadedModel::open(dir.file("old.dlm"));
  ASSERT_TRUE(model.isOk()) << model.status().message();
  StatusOr<std::unique_ptr<Session>> session = Session::create(*model, SessionOptions{});
  ASSERT_FALSE(session.isOk());
  EXPECT_NE(session.status().message().find("has no cpu kernel records"), std::string::npos)
      << session.status().message();
  EXPECT_NE(session.status().message().find("recompile it with dlmc compile --target cpu"),
            std::string::npos)
      << session.status().message();
}

} // namespace
} // namespace dlm::cpu
