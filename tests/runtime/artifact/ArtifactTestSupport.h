// Shared pieces of the artifact tests: a scratch directory, a small artifact whose contents cover
// every field, and raw file access for damaging artifacts on purpose.
#pragma once

#include "runtime/artifact/ArtifactReader.h"
#include "runtime/artifact/ArtifactWriter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace dlm::artifact::testing {

// A fresh directory under the test temp dir, removed with everything in it at the end.
class ScratchDirectory {
public:
  ScratchDirectory() {
    std::string pattern = ::testing::TempDir() + "dlm-artifact-XXXXXX";
    if (!::mkdtemp(pattern.data()))
      ADD_FAILURE() << "mkdtemp failed for " << pattern;
    path_ = pattern;
  }
  ScratchDirectory(const ScratchDirectory &) = delete;
  ScratchDirectory &operator=(const ScratchDirectory &) = delete;
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  const std::filesystem::path &path() const { return path_; }
  std::string file(const std::string &name) const { return (path_ / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto &entry : std::filesystem::directory_iterator(path_))
      names.push_back(entry.path().filename().string());
    return names;
  }

private:
  std::filesystem::path path_;
};

inline std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void writeBytes(const std::string &path, const uint8_t *data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline void writeBytes(const std::string &path, const std::vector<uint8_t> &bytes) {
  writeBytes(path, bytes.data(), bytes.size());
}

// A file written once and then damaged in place, for tests that open thousands of variants of
// one artifact: patching a byte or cutting the file costs a system call, rewriting it far more.
class PatchableFile {
public:
  PatchableFile(std::string path, const std::vector<uint8_t> &bytes) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(fd_, 0) << "cannot create " << path_;
    EXPECT_EQ(::pwrite(fd_, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  }
  PatchableFile(const PatchableFile &) = delete;
  PatchableFile &operator=(const PatchableFile &) = delete;
  ~PatchableFile() { ::close(fd_); }

  const std::string &path() const { return path_; }
  void setByte(size_t offset, uint8_t value) {
    EXPECT_EQ(::pwrite(fd_, &value, 1, static_cast<off_t>(offset)), 1);
  }
  void truncate(size_t size) { EXPECT_EQ(::ftruncate(fd_, static_cast<off_t>(size)), 0); }

private:
  std::string path_;
  int fd_ = -1;
};

// Bytes that differ from weight to weight and position to position, so a swapped or shifted
// weight shows up.
inline std::vector<uint8_t> patternBytes(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i)
    bytes[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8));
  return bytes;
}

// An artifact touching every field: a config with extras of each value kind, a tokenizer, a
// program with knobs, GPU and CPU kernel targets, and weights of several dtypes and ranks,
// including an empty tensor and a scalar. `contents` views the members, so this object stays put.
class SampleArtifact {
public:
  SampleArtifact() {
    contents.producer = "dlm artifact tests";

    ModelConfig &config = contents.config;
    config.architecture = "LLaDAModelLM";
    config.vocabSize = 126464;
    config.embeddingSize = 4096;
    config.hiddenSize = 4096;
    config.numLayers = 32;
    config.numHeads = 32;
    config.numKvHeads = 8;
    config.headDim = 128;
    config.intermediateSize = 12288;
    config.ropeTheta = 500000.0;
    config.rmsNormEps = 1e-5;
    config.maskTokenId = 126336;
    config.bosTokenId = 126080;
    config.eosTokenIds = {126081, 126348};
    config.padTokenId = 126081;
    config.maxPositions = 4096;
    config.tiedEmbeddings = true;
    config.attentionMask = AttentionMaskKind::bidirectional;
    config.extra = {{"sliding_window", int64_t{4096}},
                    {"use_qk_norm", true},
                    {"rope_scaling_factor", 2.5},
                    {"activation", std::string("silu")}};

    contents.tokenizerJson = tokenizer;
    contents.program.policy = "llada_threshold";
    contents.program.knobs = {{"gen_length", int64_t{128}},
                              {"block_length", int64_t{32}},
                              {"steps", int64_t{64}},
                              {"threshold", 0.9},
                              {"temperature", 0.0},
                              {"entropy_bound", 0.25},
                              {"max_steps", int64_t{256}},
                              {"early_stop_at_eos", true},
                              {"remasking", std::string("low_confidence")}};
    contents.program.mlir = mlir;
    // Two decode programs; a reference, a literal of each type, an unnamed and a named record.
    DecodingProgram greedy;
    greedy.policy = "low-confidence";
    greedy.knobs = {{"steps", int64_t{64}}};
    greedy.ops = {{"knob", "steps", {{"type", std::string("int")}, {"default", int64_t{16}}}},
                  {"div", "", {{"a", std::string("$steps")}, {"b", int64_t{2}}, {"out",
                   std::string("%half")}}},
                  {"block_loop", "block", {{"count", std::string("%half")},
                   {"index", std::string("%b")}}},
                  {"sample", "", {{"temperature", 0.5}, {"candidates", std::string("masked")}}},
                  {"accept", "", {{"strict", true}}},
                  {"end", "", {}}};
    DecodingProgram other;
    other.policy = "entropy-bound";
    other.ops = {{"finish", "", {{"steps", int64_t{0}}}}};
    contents.decodePrograms = {greedy, other};

    Kernel matmul{"dlm_matmul_bf16",
                  "matmul",
                  ByteView{cubin90.data(), cubin90.size()},
                  ptx,
                  KernelResources{96, 8, 12, 16, 49152},
                  {{"block_m", int64_t{128}}},
                  cudaSource};
    Kernel sampler{
        "dlm_entropy_accept", "sampler", ByteView{}, ptx, KernelResources{40, 0, 0, 0, 1024}, {},
        {}};
    Kernel oldMatmul{"dlm_matmul_bf16",
                     "matmul",
                     ByteView{cubin80.data(), cubin80.size()},
                     {},
                     KernelResources{128, 0, 0, 0, 65536},
                     {},
                     {}};
    Kernel cpuGemm{"gemm_qkv",
                   "gemm",
                   {},
                   {},
                   {},
                   {{"m", int64_t{64}}, {"transpose_b", true}, {"library", std::string("onednn")}},
                   {}};
    contents.kernelTargets = {
        {"sm_90", {matmul, sampler}}, {"sm_80", {oldMatmul}}, {"cpu", {cpuGemm}}};

    addWeight("model.embed_tokens.weight", DType::bf16, {8, 4});
    addWeight("model.layers.0.self_attn.q_proj.weight", DType::f32, {3, 5});
    addWeight("model.norm.weight", DType::f16, {7});
    addWeight("model.empty", DType::f32, {0, 4});
    addWeight("model.scale", DType::f32, {});
    addWeight("model.layers.0.mlp.up_proj.weight", DType::fp8_e4m3, {2, 65});
  }
  SampleArtifact(const SampleArtifact &) = delete;
  SampleArtifact &operator=(const SampleArtifact &) = delete;

  ArtifactContents contents;
  std::vector<std::vector<uint8_t>> weightBytes;

private:
  void addWeight(const std::string &name, DType dtype, std::vector<int64_t> shape) {
    uint64_t size = dtypeSize(dtype);
    for (int64_t dim : shape)
      size *= static_cast<uint64_t>(dim);
    // Reserved up front, so earlier WeightSources keep pointing at their bytes.
    weightBytes.reserve(16);
    weightBytes.push_back(patternBytes(size, static_cast<uint8_t>(weightBytes.size() + 1)));
    contents.weights.push_back({name, dtype, std::move(shape), weightBytes.back().data(), size});
  }

  std::string tokenizer = R"({"version":"1.0","model":{"type":"BPE","vocab":{"a":0}}})";
  std::string mlir = "module {\n  func.func @generate() {\n    return\n  }\n}\n";
  std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n";
  std::string cudaSource = "#include <cuda_bf16.h>\n"
                           "extern \"C\" __global__ void dlm_matmul_bf16(float *c) { c[0] = 0.f; }\n";
  std::vector<uint8_t> cubin90 = patternBytes(100, 90);
  std::vector<uint8_t> cubin80 = patternBytes(33, 80);
};

// The mutable root of an artifact held in memory, for damaging it field by field.
inline fb::Artifact *mutableRoot(std::vector<uint8_t> &bytes) {
  return fb::GetMutableSizePrefixedArtifact(bytes.data());
}

inline fb::Weight *mutableWeight(std::vector<uint8_t> &bytes, size_t index) {
  return mutableRoot(bytes)->mutable_weights()->GetMutableObject(
      static_cast<flatbuffers::uoffset_t>(index));
}

// Where the flatbuffer ends: the size prefix plus what it counts.
inline size_t metadataEnd(const std::vector<uint8_t> &bytes) {
  return sizeof(uint32_t) + flatbuffers::ReadScalar<uint32_t>(bytes.data());
}

} // namespace dlm::artifact::testing
