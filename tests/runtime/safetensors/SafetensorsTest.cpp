// Tests of the safetensors reader: round trips through a small writer in this file (and through
// the Python safetensors library when DLM_PYTHON has it), sharded checkpoints, and one test per
// kind of malformed input, each checking that the error names the problem.
#include "importer/safetensors/Safetensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace dlm::safetensors {
namespace {

using Json = nlohmann::json;
using Bytes = std::vector<uint8_t>;

struct TestTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  Bytes bytes;
};

class SafetensorsTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "dlm-safetensors-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    directory_ = pattern;
  }
  void TearDown() override { (void)std::system(("rm -rf '" + directory_ + "'").c_str()); }

  std::string path(const std::string &name) const { return directory_ + "/" + name; }

  // Writes the 8-byte length, the header text and the data section exactly as given.
  std::string writeRaw(const std::string &name, const std::string &header, const Bytes &data,
                       std::optional<uint64_t> declaredLength = std::nullopt) const {
    std::ofstream file(path(name), std::ios::binary);
    const uint64_t length = declaredLength.value_or(header.size());
    for (int i = 0; i < 8; ++i)
      file.put(static_cast<char>((length >> (8 * i)) & 0xFF));
    file << header;
    file.write(reinterpret_cast<const char *>(data.data()),
               static_cast<std::streamsize>(data.size()));
    return path(name);
  }

  // A well-formed file: tensors stored back to back, header padded to 8 bytes as the reference
  // writer does.
  std::string write(const std::string &name, const std::vector<TestTensor> &tensors,
                    const Json &metadata = nullptr) const {
    Json header = Json::object();
    Bytes data;
    for (const TestTensor &tensor : tensors) {
      header[tensor.name] = {{"dtype", tensor.dtype},
                             {"shape", tensor.shape},
                             {"data_offsets", {data.size(), data.size() + tensor.bytes.size()}}};
      data.insert(data.end(), tensor.bytes.begin(), tensor.bytes.end());
    }
    if (!metadata.is_null())
      header["__metadata__"] = metadata;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    return writeRaw(name, text, data);
  }

  std::string writeText(const std::string &name, const std::string &text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }

  std::string openError(const std::string &target) const {
    StatusOr<SafetensorsCheckpoint> checkpoint = SafetensorsCheckpoint::open(target);
    EXPECT_FALSE(checkpoint.isOk());
    return checkpoint.status().message();
  }

  // Error for a single file whose header is `header` over `dataBytes` zero bytes.
  std::string headerError(const Json &header, size_t dataBytes) const {
    return openError(writeRaw("bad.safetensors", header.dump(), Bytes(dataBytes, 0)));
  }

  std::string directory_;
};

Bytes sequence(size_t count) {
  Bytes bytes(count);
  for (size_t i = 0; i < count; ++i)
    bytes[i] = static_cast<uint8_t>(i * 7 + 1);
  return bytes;
}

Bytes dataOf(const TensorView &tensor) { return Bytes(tensor.data, tensor.data + tensor.byteSize); }

void expectContains(const std::string &message, const std::string &part) {
  EXPECT_NE(message.find(part), std::string::npos) << "message: " << message;
}

const Json kTensor = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};

TEST_F(SafetensorsTest, RoundTripSingleFile) {
  const std::vector<TestTensor> tensors = {
      {"model.embed.weight", "BF16", {2, 3}, sequence(12)},
      {"model.norm.weight", "F16", {4}, sequence(8)},
      {"lm_head.weight", "F32", {2, 2}, sequence(16)},
      {"positions", "I64", {3}, sequence(24)},
      {"flags", "BOOL", {2}, {1, 0}},
      {"scale", "U8", {}, {42}},
      {"empty", "F32", {0, 4}, {}},
  };
  const std::string file = write("model.safetensors", tensors, {{"format", "pt"}});

  for (const std::string &target : {file, directory_}) {
    StatusOr<SafetensorsCheckpoint> checkpoint = SafetensorsCheckpoint::open(target);
    ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().message();
    EXPECT_EQ(checkpoint->size(), tensors.size());
    for (const TestTensor &expected : tensors) {
      const TensorView *tensor = checkpoint->find(expected.name);
      ASSERT_NE(tensor, nullptr) << expected.name;
      EXPECT_EQ(tensor->name, expected.name);
      EXPECT_EQ(dtypeName(tensor->dtype), expected.dtype);
      EXPECT_EQ(tensor->shape, expected.shape);
      EXPECT_EQ(dataOf(*tensor), expected.bytes);
      EXPECT_EQ(tensor->shardFile, file);
      EXPECT_EQ(static_cast<size_t>(tensor->numElements()) * dtypeSize(tensor->dtype),
                tensor->byteSize);
    }
    EXPECT_EQ(checkpoint->find("missing"), nullptr);
    EXPECT_EQ(checkpoint->names(),
              (std::vector<std::string>{"empty", "flags", "lm_head.weight", "model.embed.weight",
                                        "model.norm.weight", "positions", "scale"}));
    EXPECT_EQ(checkpoint->metadata().at("format"), "pt");
    EXPECT_EQ(checkpoint->shardFiles(), (std::vector<std::string>{file}));
  }
}

TEST_F(SafetensorsTest, ViewsSurviveMoves) {
  const std::string file = write("model.safetensors", {{"w", "F32", {4}, sequence(16)}});
  StatusOr<SafetensorsCheckpoint> opened = SafetensorsCheckpoint::open(file);
  ASSERT_TRUE(opened.isOk());
  const TensorView *before = opened->find("w");
  SafetensorsCheckpoint moved = std::move(opened).value();
  SafetensorsCheckpoint assigned = std::move(moved);
  ASSERT_EQ(assigned.find("w"), before);
  EXPECT_EQ(dataOf(*assigned.find("w")), sequence(16));
}

TEST_F(SafetensorsTest, ShardedCheckpoint) {
  write("model-00001-of-00002.safetensors",
        {{"a", "BF16", {2}, sequence(4)}, {"b", "F32", {1}, sequence(4)}});
  write("model-00002-of-00002.safetensors",
        {{"c", "F16", {3}, sequence(6)}, {"unlisted", "F32", {1}, sequence(4)}});
  // A stray single file must not be preferred over the index.
  write("model.safetensors", {{"stray", "F32", {1}, sequence(4)}});
  writeText("model.safetensors.index.json", Json{{"metadata", {{"total_size", 14}}},
                                                 {"weight_map",
                                                  {{"a", "model-00001-of-00002.safetensors"},
                                                   {"b", "model-00001-of-00002.safetensors"},
                                                   {"c", "model-00002-of-00002.safetensors"}}}}
                                                .dump());

  StatusOr<SafetensorsCheckpoint> checkpoint = SafetensorsCheckpoint::open(directory_);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().message();
  EXPECT_EQ(checkpoint->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(checkpoint->shardFiles().size(), 2u);
  EXPECT_EQ(checkpoint->find("a")->shardFile, path("model-00001-of-00002.safetensors"));
  EXPECT_EQ(checkpoint->find("c")->shardFile, path("model-00002-of-00002.safetensors"));
  EXPECT_EQ(dataOf(*checkpoint->find("c")), sequence(6));
  EXPECT_EQ(checkpoint->find("stray"), nullptr);

  StatusOr<SafetensorsCheckpoint> byIndexPath =
      SafetensorsCheckpoint::open(path("model.safetensors.index.json"));
  ASSERT_TRUE(byIndexPath.isOk()) << byIndexPath.status().message();
  EXPECT_EQ(byIndexPath->size(), 3u);
}

// E4M3 loads (the importer reads its compressed-tensors scale beside it); E5M2 does not yet.
TEST_F(SafetensorsTest, Fp8E4m3LoadsAndE5m2IsRefusedByName) {
  const std::string file = write("model.safetensors", {{"q", "F8_E4M3", {4}, sequence(4)},
                                                       {"r", "F8_E5M2", {4}, sequence(4)},
                                                       {"w", "BF16", {1}, {0, 0}}});
  StatusOr<SafetensorsCheckpoint> checkpoint = SafetensorsCheckpoint::open(file);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().message();
  ASSERT_NE(checkpoint->find("q"), nullptr);
  EXPECT_EQ(checkpoint->find("q")->dtype, DType::F8_E4M3);
  EXPECT_TRUE(checkpoint->load("q").isOk());
  StatusOr<const TensorView *> e5m2 = checkpoint->load("r");
  ASSERT_FALSE(e5m2.isOk());
  EXPECT_EQ(e5m2.status().message(), "not supported yet: FP8 E5M2 tensor 'r'");
  EXPECT_TRUE(checkpoint->load("w").isOk());
  EXPECT_EQ(checkpoint->load("nope").status().message(), "tensor 'nope' is not in the checkpoint");
}

// Written by the reference implementation (Python safetensors + torch), when available.
TEST_F(SafetensorsTest, ReadsFileWrittenByPythonSafetensors) {
#ifndef DLM_PYTHON_EXECUTABLE
  GTEST_SKIP() << "DLM_PYTHON not configured";
#else
  const std::string file = path("python.safetensors");
  const std::string command =
      std::string(DLM_PYTHON_EXECUTABLE) +
      " -c \"import sys, torch; from safetensors.torch import save_file; save_file({"
      "'w': torch.arange(6, dtype=torch.float32).reshape(2, 3).to(torch.bfloat16), "
      "'h': torch.tensor([1.5, -2.0], dtype=torch.float16), "
      "'i': torch.tensor([7, -8], dtype=torch.int64)}, sys.argv[1], metadata={'format': 'pt'})\" "
      "'" +
      file + "' 2>/dev/null";
  if (std::system(command.c_str()) != 0)
    GTEST_SKIP() << "python with torch and safetensors is not available";

  StatusOr<SafetensorsCheckpoint> checkpoint = SafetensorsCheckpoint::open(file);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().message();
  const auto halves = [](const TensorView &tensor) {
    std::vector<uint16_t> values(tensor.byteSize / 2);
    std::memcpy(values.data(), tensor.data, tensor.byteSize); // little-endian host
    return values;
  };
  const TensorView *w = checkpoint->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::BF16);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  // bfloat16 is the top half of the float32 bits: 0, 1, 2, 3, 4, 5.
  EXPECT_EQ(halves(*w), (std::vector<uint16_t>{0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0}));
  EXPECT_EQ(halves(*checkpoint->find("h")), (std::vector<uint16_t>{0x3E00, 0xC000}));
  std::vector<int64_t> integers(2);
  std::memcpy(integers.data(), checkpoint->find("i")->data, 16);
  EXPECT_EQ(integers, (std::vector<int64_t>{7, -8}));
  EXPECT_EQ(checkpoint->metadata().at("format"), "pt");
#endif
}

// --- Malformed files -------------------------------------------------------------------------

TEST_F(SafetensorsTest, FileShorterThanLengthPrefix) {
  const std::string file = writeText("short.safetensors", "abc");
  EXPECT_EQ(openError(file), file + ": file is 3 bytes, shorter than the 8-byte header length");
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  const std::string file = writeRaw("long.safetensors", "{}", {}, /*declaredLength=*/1000);
  EXPECT_EQ(openError(file),
            file + ": header length 1000 runs past the end of the file (10 bytes)");
}

TEST_F(SafetensorsTest, HeaderNestedTooDeep) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expectContains(openError(writeRaw("bad.safetensors",
                                    R"({"w": {"dtype": "F32", "shape": )" + deep + "}}", {})),
                 "header nests arrays or objects more than 64 deep");
}

TEST_F(SafetensorsTest, HeaderNotJson) {
  expectContains(openError(writeRaw("bad.safetensors", "{\"a\": ", {})),
                 "header is not valid JSON");
}

TEST_F(SafetensorsTest, HeaderNotObject) {
  expectContains(openError(writeRaw("bad.safetensors", "[1, 2]", {})),
                 "header is not a JSON object");
}

TEST_F(SafetensorsTest, EntryMissingFields) {
  for (const char *field : {"dtype", "shape", "data_offsets"}) {
    Json entry = kTensor;
    entry.erase(field);
    expectContains(headerError({{"w", entry}}, 8), std::string("tensor 'w' has no ") + field);
  }
  expectContains(headerError({{"w", 5}}, 8), "tensor 'w': entry is not a JSON object");
}

TEST_F(SafetensorsTest, UnknownDType) {
  Json entry = kTensor;
  entry["dtype"] = "F7";
  expectContains(headerError({{"w", entry}}, 8), "tensor 'w' has unknown dtype 'F7'");
}

TEST_F(SafetensorsTest, InvalidShapeAndOffsets) {
  Json entry = kTensor;
  entry["shape"] = {-2};
  expectContains(headerError({{"w", entry}}, 8), "tensor 'w' has an invalid shape [-2]");
  entry = kTensor;
  entry["data_offsets"] = {0};
  expectContains(headerError({{"w", entry}}, 8), "tensor 'w' has invalid data_offsets [0]");
}

TEST_F(SafetensorsTest, OffsetsPastEndOfData) {
  expectContains(headerError({{"w", kTensor}}, 6),
                 "tensor 'w': data_offsets end 8 is past the end of the data section (6 bytes)");
}

TEST_F(SafetensorsTest, BeginAfterEnd) {
  Json entry = kTensor;
  entry["data_offsets"] = {8, 0};
  expectContains(headerError({{"w", entry}}, 8), "tensor 'w': data_offsets begin 8 is after end 0");
}

TEST_F(SafetensorsTest, ByteSizeDisagreesWithShape) {
  Json entry = kTensor;
  entry["shape"] = {3};
  expectContains(headerError({{"w", entry}}, 8),
                 "tensor 'w': dtype F32 with shape [3] needs 12 bytes but data_offsets span 8");
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  Json other = kTensor;
  other["data_offsets"] = {4, 12};
  expectContains(headerError({{"a", kTensor}, {"b", other}}, 12),
                 "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
}

TEST_F(SafetensorsTest, MetadataMustBeStrings) {
  expectContains(headerError({{"w", kTensor}, {"__metadata__", {{"step", 3}}}}, 8),
                 "__metadata__ is not an object of strings");
}

TEST_F(SafetensorsTest, IndexNamesMissingShard) {
  write("model-00001-of-00002.safetensors", {{"a", "F32", {1}, sequence(4)}});
  writeText("model.safetensors.index.json", Json{{"weight_map",
                                                  {{"a", "model-00001-of-00002.safetensors"},
                                                   {"b", "model-00002-of-00002.safetensors"}}}}
                                                .dump());
  expectContains(openError(directory_), "names shard 'model-00002-of-00002.safetensors' (for "
                                        "tensor 'b'), which does not exist");
}

TEST_F(SafetensorsTest, IndexNamesTensorMissingFromShard) {
  write("model-00001-of-00001.safetensors", {{"a", "F32", {1}, sequence(4)}});
  writeText("model.safetensors.index.json", Json{{"weight_map",
                                                  {{"a", "model-00001-of-00001.safetensors"},
                                                   {"ghost", "model-00001-of-00001.safetensors"}}}}
                                                .dump());
  expectContains(openError(directory_), "tensor 'ghost' is listed in the index under shard");
}

TEST_F(SafetensorsTest, IndexErrors) {
  writeText("model.safetensors.index.json", "{not json");
  expectContains(openError(directory_), "index is not valid JSON");
  writeText("model.safetensors.index.json", "{\"metadata\": {}}");
  expectContains(openError(directory_), "index has no \"weight_map\" object");
  writeText("model.safetensors.index.json", R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
  expectContains(openError(directory_), "is not a path inside the checkpoint directory");
}

TEST_F(SafetensorsTest, MissingCheckpoint) {
  expectContains(openError(directory_), "has neither model.safetensors nor "
                                        "model.safetensors.index.json");
  expectContains(openError(path("nothing-here")), "does not exist");
}

} // namespace
} // namespace dlm::safetensors
