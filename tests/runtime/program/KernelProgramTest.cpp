// Validation of the kernel records before anything runs: every damaged record is refused with an
// error that names it (runtime/program/KernelProgram.h), and an artifact without records asks to
// recompile.
#include "runtime/program/KernelProgram.h"

#include "runtime/model/KernelProgram.h"
#include "runtime/session/Session.h"
#include "tests/runtime/model/TinyModel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace dlm::program {
namespace {

namespace kp = spec::kernels;
using dlm::testing::TempDir;
using dlm::testing::TinyModel;
using dlm::testing::TinyModelOptions;

class KernelProgramTest : public ::testing::Test {
protected:
  void SetUp() override {
    dlm::testing::LoadedTinyModel loaded = dlm::testing::writeAndLoad(tiny, dir.file("tiny.dlm"));
    ASSERT_TRUE(loaded.weights);
    reader = std::move(loaded.reader);
    weights = loaded.weights;
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
  // The operand slots of record `name`.
  std::vector<int64_t> operandsOf(const std::string &name) {
    const std::string list = std::get<std::string>(record(name).parameters.at("operands"));
    std::vector<int64_t> slots;
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      slots.push_back(std::stoll(list.substr(at, comma - at)));
      at = comma + 1;
    }
    return slots;
  }
  // The result offset of the record that defines `slot`.
  artifact::AttributeValue offsetOfSlot(int64_t slot) const {
    for (const artifact::Kernel &k : records)
      if (k.parameters.count("result") && std::get<int64_t>(k.parameters.at("result")) == slot)
        return k.parameters.at("offset");
    ADD_FAILURE() << "no record defines slot " << slot;
    return artifact::AttributeValue(int64_t(0));
  }

  std::string error() const {
    StatusOr<KernelProgram> program = KernelProgram::build(records, *weights);
    return program ? "(built)" : program.status().message();
  }

  TempDir dir;
  TinyModel tiny{TinyModelOptions{}};
  std::unique_ptr<artifact::ArtifactReader> reader;
  std::shared_ptr<const model::ModelWeights> weights;
  std::vector<artifact::Kernel> records;
};

TEST_F(KernelProgramTest, TheTinyModelsRecordsBuild) {
  StatusOr<KernelProgram> program = KernelProgram::build(records, *weights);
  ASSERT_TRUE(program.isOk()) << program.status().message();
  EXPECT_EQ(program->kernels.size(), records.size());
  EXPECT_EQ(program->kernels.front().kind(), KernelKind::embedding);
  EXPECT_EQ(program->kernels.back().kind(), KernelKind::lmHead);
  // k and v reuse the norm q computed; labels drop the layer prefix.
  const ProgramRecord &k = program->kernels[find("layers.0.k_proj")];
  EXPECT_TRUE(k.reusesNorm);
  EXPECT_FALSE(program->kernels[find("layers.0.q_proj")].reusesNorm);
  EXPECT_EQ(k.name, "k_proj");
  EXPECT_EQ(k.normName, "attn_norm");
  EXPECT_EQ(program->kernels[find("layers.1.rope#2")].name, "rope");
  EXPECT_GT(program->rowElements, 0);
}

TEST_F(KernelProgramTest, UnknownKindIsNotSupportedYet) {
  record("layers.0.o_proj").kind = "conv2d";
  EXPECT_EQ(error(), "not supported yet: kernel kind 'conv2d' (kernel record " +
                         std::to_string(find("layers.0.o_proj")) + " ('layers.0.o_proj'))");
}

TEST_F(KernelProgramTest, MissingWeightNamesTheRecordAndTheWeight) {
  record("layers.1.up_proj").parameters["weight"] = std::string("layers.1.upp");
  EXPECT_EQ(error(), "kernel record " + std::to_string(find("layers.1.up_proj")) +
                         " ('layers.1.up_proj'): missing weight 'layers.1.upp'");
}

TEST_F(KernelProgramTest, WeightOfTheWrongShape) {
  // k's weight has kv_heads * head_dim = 12 outputs, q's 24.
  record("layers.0.q_proj").parameters["weight"] = std::string("layers.0.k");
  EXPECT_NE(error().find("('layers.0.q_proj'): the weight's output width is 12, expected 24"),
            std::string::npos)
      << error();
}

TEST_F(KernelProgramTest, UndefinedOperandSlot) {
  record("layers.0.mlp_norm").parameters["operands"] = std::string("99");
  EXPECT_NE(error().find("('layers.0.mlp_norm'): operand slot 99 is not defined by an earlier "
                         "record"),
            std::string::npos)
      << error();
}

TEST_F(KernelProgramTest, MalformedOperandList) {
  record("layers.0.silu_mul").parameters["operands"] = std::string("4,x");
  EXPECT_NE(error().find("is not a comma-separated list of slot numbers"), std::string::npos)
      << error();
}

TEST_F(KernelProgramTest, WrongOperandCount) {
  record("layers.0.silu_mul").parameters["operands"] = std::string("2");
  EXPECT_NE(error().find("silu_mul takes 2 operands, got 1"), std::string::npos) << error();
}

// An accumulating GEMM reads its residual as a second operand, of its result's width, and only
// linear records accumulate.
TEST_F(KernelProgramTest, AccumulatingGemmsTakeTheirResidual) {
  artifact::Kernel &o = record("layers.0.o_proj");
  const artifact::AttributeValue operands = o.parameters.at("operands");
  o.parameters["operands"] = std::string(std::get<std::string>(operands).substr(
      0, std::get<std::string>(operands).find(',')));
  EXPECT_NE(error().find("('layers.0.o_proj'): linear takes 2 operands, got 1"),
            std::string::npos)
      << error();
  o.parameters["operands"] = operands;
  o.parameters["accumulate"] = false;
  EXPECT_NE(error().find("linear takes 1 operands, got 2"), std::string::npos) << error();
  o.parameters["accumulate"] = true;
  // The residual as the GEMM's own input: it would overwrite what it reads.
  const std::string input = std::get<std::string>(operands).substr(
      0, std::get<std::string>(operands).find(','));
  o.parameters["operands"] = input + "," + input;
  EXPECT_NE(error().find("('layers.0.o_proj'): an accumulating linear reads its residual as "
                         "its input"),
            std::string::npos)
      << error();
  o.parameters["operands"] = operands;
  record("layers.0.rope").parameters["accumulate"] = true;
  EXPECT_NE(error().find("('layers.0.rope'): parameter 'accumulate' is not one of a rope "
                         "record's"),
            std::string::npos)
      << error();
}

// The contract (runtime/schema/KernelOps.td) refuses what no kind declares, a declared parameter
// of the wrong type and a text outside its choices, before any kind's own check.
TEST_F(KernelProgramTest, ParametersOutsideTheContract) {
  record("layers.0.rope").parameters["window"] = int64_t(4);
  EXPECT_NE(error().find("('layers.0.rope'): parameter 'window' is not one of a rope record's"),
            std::string::npos)
      << error();
  record("layers.0.rope").parameters.erase("window");
  const artifact::AttributeValue headDim = record("layers.0.rope").parameters["head_dim"];
  record("layers.0.rope").parameters["head_dim"] = 8.0;
  EXPECT_NE(error().find("('layers.0.rope'): parameter 'head_dim' is missing or not an integer"),
            std::string::npos)
      << error();
  record("layers.0.rope").parameters["head_dim"] = headDim;
  record("layers.0.attention").parameters["mask"] = std::string("sliding_window");
  EXPECT_NE(error().find("('layers.0.attention'): not supported yet: attention mask "
                         "'sliding_window' (causal, bidirectional, block_causal)"),
            std::string::npos)
      << error();
  // A block-causal mask needs its block size, and only it takes one.
  record("layers.0.attention").parameters["mask"] = std::string("block_causal");
  EXPECT_NE(error().find("('layers.0.attention'): block_size goes with mask block_causal, and "
                         "only with it"),
            std::string::npos)
      << error();
  record("layers.0.attention").parameters["block_size"] = int64_t{0};
  EXPECT_NE(error().find("('layers.0.attention'): block_size 0 is not positive or has a window"),
            std::string::npos)
      << error();
  record("layers.0.attention").parameters["block_size"] = int64_t{4};
  EXPECT_EQ(error(), "(built)");
}

TEST_F(KernelProgramTest, MissingParameter) {
  record("layers.0.rope").parameters.erase("theta");
  EXPECT_NE(error().find("('layers.0.rope'): parameter 'theta' is missing or not a real"),
            std::string::npos)
      << error();
}

// The constraints KernelOps.td declares are checked after the kind's own check (rope's theta
// here; SpeculativeRecords meets select_input_rows' operand widths, their values filled in).
TEST_F(KernelProgramTest, DeclaredConstraintsAreChecked) {
  record("layers.0.rope").parameters["theta"] = -2.0;
  EXPECT_NE(error().find("('layers.0.rope'): theta must be positive"), std::string::npos)
      << error();
  records = tiny.cpuKernelTarget().kernels;
  record("layers.0.rope").parameters["theta"] = 10.0;
  EXPECT_EQ(error(), "(built)");
}

// An accumulating GEMM may sit exactly on its residual (the add it absorbed was in place), and
// on nothing else that is read later: its input, say.
TEST_F(KernelProgramTest, AccumulatingGemmsArePlannedInPlaceOnTheirResidualOnly) {
  artifact::Kernel &o = record("layers.0.o_proj");
  const int64_t input = operandsOf("layers.0.o_proj")[0],
                residual = operandsOf("layers.0.o_proj")[1];
  o.parameters["offset"] = offsetOfSlot(residual);
  EXPECT_EQ(error(), "(built)");
  o.parameters["offset"] = offsetOfSlot(input);
  EXPECT_NE(error().find("('o_proj'): result slot"), std::string::npos) << error();
}

// A kind's in-place rule comes from KernelOps.td: silu_mul may overwrite its first operand (the
// gate, read last by it), not its second.
TEST_F(KernelProgramTest, ElementwiseResultsSitOnTheOperandTheirKindAllows) {
  artifact::Kernel &act = record("layers.0.silu_mul");
  const int64_t gate = operandsOf("layers.0.silu_mul")[0], up = operandsOf("layers.0.silu_mul")[1];
  act.parameters["offset"] = offsetOfSlot(gate);
  EXPECT_EQ(error(), "(built)");
  act.parameters["offset"] = offsetOfSlot(up);
  EXPECT_NE(error().find("('silu_mul'): result slot"), std::string::npos) << error();
}

TEST_F(KernelProgramTest, ResultOverlappingALiveValue) {
  // v_proj's result placed on q_proj's, which rope and attention still read.
  artifact::Kernel &q = record("layers.0.q_proj");
  record("layers.0.v_proj").parameters["offset"] = q.parameters.at("offset");
  EXPECT_NE(error().find("('v_proj'): result slot"), std::string::npos) << error();
  EXPECT_NE(error().find("which is read later"), std::string::npos) << error();
}

// A plan or slot number no compiler writes (a corrupt artifact) is refused before the workspace
// is ever sized from it.
TEST_F(KernelProgramTest, HugeOffsetsAndSlotsAreRefused) {
  record("layers.0.v_proj").parameters["offset"] = int64_t(1) << 60;
  EXPECT_NE(error().find("result offset 1152921504606846976 + width"), std::string::npos)
      << error();
  EXPECT_NE(error().find("floats a token row may plan"), std::string::npos) << error();
  records = tiny.cpuKernelTarget().kernels;
  record("layers.0.v_proj").parameters["result"] = int64_t(1) << 24;
  EXPECT_NE(error().find("result slot 16777216 is out of range"), std::string::npos) << error();
}

TEST_F(KernelProgramTest, AttentionMustReadWhatItsLayerStored) {
  artifact::Kernel &store = record("layers.0.kv_store");
  store.parameters["layer"] = int64_t{1};
  EXPECT_NE(error().find("attention reads keys and values that no kv_store of layer 0 stored"),
            std::string::npos)
      << error();
}

TEST_F(KernelProgramTest, KvLayerOutOfRange) {
  // A kv_store past the model's layers adds a KV layer (a drafter's), but this attention still
  // reads layer 1.
  record("layers.1.kv_store").parameters["layer"] = int64_t{2};
  EXPECT_NE(error().find("attention reads keys and values that no kv_store of layer 1 stored"),
            std::string::npos)
      << error();
  record("layers.1.kv_store").parameters["layer"] = int64_t{-1};
  EXPECT_NE(error().find("layer -1 has no KV cache"), std::string::npos) << error();
}

// A second function whose layers follow the model's (a DFlash drafter): the KV cache grows a
// layer for it, shared by every function.
TEST_F(KernelProgramTest, KvLayersPastTheModelsGrowTheCache) {
  const size_t count = records.size();
  for (size_t i = 0; i < count; ++i) {
    artifact::Kernel copy = records[i];
    copy.parameters["function"] = std::string("draft");
    auto layer = copy.parameters.find("layer");
    if ((copy.kind == kp::kKvStore || copy.kind == kp::kAttention) &&
        std::get<int64_t>(layer->second) == 1)
      layer->second = int64_t{2};
    records.push_back(std::move(copy));
  }
  StatusOr<std::map<std::string, KernelProgram>> functions =
      KernelProgram::buildFunctions(records, *weights);
  ASSERT_TRUE(functions.isOk()) << functions.status().message();
  EXPECT_EQ(functions->at("forward").kvLayerWidths, (std::vector<int64_t>{12, 12, 12}));
  EXPECT_EQ(functions->at("draft").kvLayerWidths, (std::vector<int64_t>{12, 12, 12}));
}

// forward_input, select_input_rows and capture records: their shapes and the capture width.
TEST_F(KernelProgramTest, SpeculativeRecords) {
  artifact::Kernel head = records.back();
  records.pop_back();
  const std::string x = std::get<std::string>(head.parameters.at("operands"));
  int64_t next = std::get<int64_t>(head.parameters.at("result")) + 1, offset = 0;
  for (const artifact::Kernel &k : records) {
    auto result = k.parameters.find("result");
    if (result != k.parameters.end())
      next = std::max(next, std::get<int64_t>(result->second) + 1);
    auto at = k.parameters.find("offset");
    auto width = k.parameters.find("width");
    if (at != k.parameters.end())
      offset = std::max(offset, std::get<int64_t>(at->second) + std::get<int64_t>(width->second));
  }
  offset = (offset + 15) / 16 * 16;
  const int64_t width = weights->dims().hidden;
  artifact::Kernel input;
  input.kind = std::string(kp::kForwardInput);
  input.name = "context";
  input.parameters = {{"layer", int64_t{-1}}, {"result", next}, {"width", width},
                      {"offset", offset}};
  artifact::Kernel select;
  select.kind = std::string(kp::kSelectInputRows);
  select.name = "select";
  select.parameters = {{"layer", int64_t{-1}},          {"result", next + 1},
                       {"width", width},                {"offset", offset},
                       {"operands", std::to_string(next) + "," + x}};
  artifact::Kernel capture;
  capture.kind = std::string(kp::kCapture);
  capture.name = "capture";
  capture.parameters = {{"layer", int64_t{-1}},
                        {"operands", x + "," + std::to_string(next + 1)}};
  records.push_back(input);
  records.push_back(select);
  records.push_back(capture);
  records.push_back(head);
  StatusOr<KernelProgram> program = KernelProgram::build(records, *weights);
  ASSERT_TRUE(program.isOk()) << program.status().message();
  EXPECT_EQ(program->captureWidth, 2 * width);
  EXPECT_EQ(program->forwardInputWidth, width);
  EXPECT_TRUE(program->readsInput());
  // Two captures, and operands of different widths, are refused.
  records.insert(records.end() - 1, capture);
  EXPECT_NE(error().find("a function captures its rows once"), std::string::npos) << error();
  records.erase(records.end() - 2);
  records[records.size() - 3].parameters["width"] = width + 1;
  EXPECT_NE(error().find("the first operand's width is " + std::to_string(width) + ", expected " +
                         std::to_string(width + 1)),
            std::string::npos)
      << error();
}

// Found by fuzz/artifact: head counts near 2^63 overflowed int64 in the width checks.
TEST_F(KernelProgramTest, HeadCountsPastInt64AreRefused) {
  record("layers.1.attention").parameters[std::string(kp::kKvHeads)] = int64_t{1} << 60;
  EXPECT_NE(error().find("do not fit the KV cache's"), std::string::npos) << error();
  record("layers.1.attention").parameters[std::string(kp::kKvHeads)] = int64_t{2};
  record("layers.1.attention").parameters[std::string(kp::kHeads)] = int64_t{1} << 61;
  EXPECT_NE(error().find("do not fit the KV cache's"), std::string::npos) << error();
}

TEST_F(KernelProgramTest, UnsupportedMask) {
  record("layers.1.attention").parameters["mask"] = std::string("sliding_window");
  EXPECT_NE(error().find("not supported yet: attention mask 'sliding_window'"),
            std::string::npos)
      << error();
}

TEST_F(KernelProgramTest, ProgramMustEndWithTheLmHead) {
  records.pop_back();
  EXPECT_EQ(error(), "the kernel program does not end with an lm_head record");
  records.clear();
  EXPECT_EQ(error(), "the kernel program is empty");
}

TEST_F(KernelProgramTest, LmHeadMustBeLast) {
  records.push_back(records[find("layers.1.mlp_norm")]);
  records.back().name = "late_add";
  EXPECT_NE(error().find("lm_head must be the last record"), std::string::npos) << error();
}

// Records grouped by their `function`: each function a program of its own, slots from 2, the
// KV widths of each layer shared.
TEST_F(KernelProgramTest, EachFunctionIsAProgramOfItsOwn) {
  const size_t count = records.size();
  for (size_t i = 0; i < count; ++i) {
    artifact::Kernel copy = records[i];
    copy.parameters["function"] = std::string("decode");
    records.push_back(std::move(copy));
  }
  StatusOr<std::map<std::string, KernelProgram>> functions =
      KernelProgram::buildFunctions(records, *weights);
  ASSERT_TRUE(functions.isOk()) << functions.status().message();
  ASSERT_EQ(functions->size(), 2u);
  const KernelProgram &forward = functions->at("forward"), &decode = functions->at("decode");
  EXPECT_EQ(forward.kernels.size(), count);
  EXPECT_EQ(decode.kernels.size(), count);
  EXPECT_EQ(decode.function, "decode");
  EXPECT_EQ(decode.kernels.front().function, "decode");
  EXPECT_EQ(forward.kernels.front().function, "forward");
  EXPECT_EQ(decode.rowElements, forward.rowElements);
  // kv_heads 2 of head_dim 6 in both layers.
  EXPECT_EQ(forward.kvLayerWidths, (std::vector<int64_t>{12, 12}));
  EXPECT_EQ(decode.kvLayerWidths, forward.kvLayerWidths);
  // build() picks the default function.
  StatusOr<KernelProgram> program = KernelProgram::build(records, *weights);
  ASSERT_TRUE(program.isOk()) << program.status().message();
  EXPECT_EQ(program->function, "forward");
  EXPECT_EQ(program->kernels.size(), count);
  // Without a default function, build() says which there are.
  for (size_t i = 0; i < count; ++i)
    records[i].parameters["function"] = std::string("encode");
  EXPECT_EQ(error(), "the kernel program has no 'forward' function (it has 'decode', 'encode')");
}

TEST_F(KernelProgramTest, ARecordOfAnotherFunctionIsNotPartOfThisOne) {
  // The record joins a function of its own, which reads slots it never defined; the default
  // function lost it (its lm_head still last).
  record("layers.1.up_proj").parameters["function"] = std::string("other");
  EXPECT_NE(error().find("is not defined by an earlier record"), std::string::npos) << error();
  records = tiny.cpuKernelTarget().kernels;
  record("lm_head").parameters["function"] = std::string("other");
  EXPECT_NE(error().find("the kernel program does not end with an lm_head record"),
            std::string::npos)
      << error();
  records = tiny.cpuKernelTarget().kernels;
  record("lm_head").parameters["function"] = int64_t{3};
  EXPECT_NE(error().find("('lm_head'): parameter 'function' is not a function name"),
            std::string::npos)
      << error();
}

TEST_F(KernelProgramTest, BadOptionalParametersNameTheRecord) {
  record("layers.0.attention").parameters["window"] = int64_t{0};
  EXPECT_NE(error().find("('layers.0.attention'): window 0 is not positive"), std::string::npos)
      << error();
  records = tiny.cpuKernelTarget().kernels;
  record("layers.0.attention").parameters["scale"] = std::string("big");
  EXPECT_NE(error().find("('layers.0.attention'): parameter 'scale' is missing or not a real"),
            std::string::npos)
      << error();
  records = tiny.cpuKernelTarget().kernels;
  record("layers.1.rope#2").parameters["rotated_pairs"] = int64_t{4};
  EXPECT_NE(error().find("('layers.1.rope#2'): rotated_pairs 4 is outside [0, 3] (rotary_dim 6)"),
            std::string::npos)
      << error();
  records = tiny.cpuKernelTarget().kernels;
  record("layers.1.rope#2").parameters["rotary_dim"] = int64_t{3};
  EXPECT_NE(
      error().find("('layers.1.rope#2'): rotary_dim 3 is not an even number in [2, head_dim 6]"),
      std::string::npos)
      << error();
  records = tiny.cpuKernelTarget().kernels;
  record("layers.1.rope#2").parameters["rotary_dim"] = int64_t{4};
  record("layers.1.rope#2").parameters["rotated_pairs"] = int64_t{3};
  EXPECT_NE(error().find("('layers.1.rope#2'): rotated_pairs 3 is outside [0, 2] (rotary_dim 4)"),
            std::string::npos)
      << error();
  records = tiny.cpuKernelTarget().kernels;
  record("lm_head").parameters["softcap"] = -1.0;
  EXPECT_NE(error().find("('lm_head'): softcap must be positive"), std::string::npos) << error();
  records = tiny.cpuKernelTarget().kernels;
  EXPECT_EQ(error(), "(built)");
  StatusOr<KernelProgram> program = KernelProgram::build(records, *weights);
  ASSERT_TRUE(program.isOk());
  const ProgramRecord &attention = program->kernels[find("layers.0.attention")];
  // The .td's defaults: 1 / sqrt(head_dim), no window, head_dim / 2 pairs.
  EXPECT_DOUBLE_EQ(attention.as<spec::kernels::AttentionParams>().scale, 1.0 / std::sqrt(6.0));
  EXPECT_FALSE(attention.as<spec::kernels::AttentionParams>().window.has_value());
  EXPECT_EQ(program->kernels[find("layers.1.rope#2")].as<spec::kernels::RopeParams>().rotatedPairs,
            3);
}

TEST_F(KernelProgramTest, MoeRecordsNameTheirMissingWeights) {
  // A moe record reading the output projection's result, the lm_head reading its result.
  const size_t head = find("lm_head");
  artifact::Kernel moe = records[head];
  moe.kind = "moe";
  moe.name = "layers.1.moe";
  moe.parameters.clear();
  const std::string input = std::get<std::string>(records[head].parameters.at("operands"));
  moe.parameters["layer"] = int64_t{1};
  moe.parameters["operands"] = input + "," + input;
  int64_t slots = 0, offset = 0;
  for (const artifact::Kernel &k : records) {
    if (k.parameters.count("result"))
      slots = std::max(slots, std::get<int64_t>(k.parameters.at("result")));
    if (k.parameters.count("offset"))
      offset = std::max(offset, std::get<int64_t>(k.parameters.at("offset")) + 64);
  }
  moe.parameters["result"] = slots; // the lm_head's, which moves up one
  moe.parameters["width"] = int64_t{16};
  moe.parameters["offset"] = offset;
  moe.parameters["experts"] = int64_t{4};
  moe.parameters["top_k"] = int64_t{2};
  moe.parameters["eps"] = 1e-6;
  moe.parameters["router_input_scale"] = 0.25;
  moe.parameters["activation"] = std::string("gelu_tanh");
  for (const char *weight : {"router", "router_scale", "expert_scale", "gate_up", "down"})
    moe.parameters[weight] = "layers.1." + std::string(weight);
  records[head].parameters["result"] = slots + 1;
  records[head].parameters["operands"] = std::to_string(slots);
  records.insert(records.begin() + static_cast<std::ptrdiff_t>(head), moe);
  EXPECT_NE(error().find("('layers.1.moe'): missing weight 'layers.1.router'"), std::string::npos)
      << error();
  records[head].parameters["top_k"] = int64_t{5};
  EXPECT_NE(error().find("('layers.1.moe'): top_k 5 is outside [1, 4]"), std::string::npos)
      << error();
  records[head].parameters.erase("experts");
  EXPECT_NE(error().find("('layers.1.moe'): parameter 'experts' is missing or not an integer"),
            std::string::npos)
      << error();
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
} // namespace dlm::program
