// Random parameters (schema 1.6): the generator gives the same bytes for the same (seed, name,
// dtype, shape) — pinned by golden hashes, so that a change of generator is noticed — with sane
// values in every dtype; an artifact compiled on them plus the parameter file dlm-params writes
// for it open as one and verify, and a parameter file of another seed is refused by name.
#include "ArtifactTestSupport.h"

#include "runtime/artifact/ArtifactHash.h"
#include "runtime/artifact/ExternalParameters.h"
#include "runtime/artifact/ExternalWeightIndex.h"
#include "runtime/artifact/ParameterFileWriter.h"
#include "runtime/artifact/RandomParameterFile.h"
#include "runtime/artifact/RandomParameters.h"

#include <cmath>

namespace dlm::artifact {
namespace {

using ::testing::HasSubstr;
using testing::SampleArtifact;
using testing::ScratchDirectory;

// More than one block (about 1 MiB) of every element size, so that pieces wrap around.
const std::vector<int64_t> kLargeMatrix = {700, 1024};

std::vector<uint8_t> generated(RandomParameters &generator, std::string_view name, DType dtype,
                               const std::vector<int64_t> &shape) {
  StatusOr<uint64_t> size = weightByteSize(name, dtype, ShapeView(shape));
  EXPECT_TRUE(size.isOk()) << size.status().message();
  std::vector<uint8_t> bytes(size ? *size : 0);
  const Status filled = generator.fill(name, dtype, ShapeView(shape), bytes.data(), bytes.size());
  EXPECT_TRUE(filled.isOk()) << filled.message();
  return bytes;
}

// The element's value, decoded independently of the generator's encoders.
float decode(DType dtype, const uint8_t *bytes) {
  switch (dtype) {
  case DType::f32: {
    float value;
    std::memcpy(&value, bytes, sizeof value);
    return value;
  }
  case DType::bf16: {
    const uint32_t bits = (uint32_t{bytes[1]} << 24) | (uint32_t{bytes[0]} << 16);
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  case DType::f16: {
    const uint32_t bits = uint32_t{bytes[0]} | (uint32_t{bytes[1]} << 8);
    const int exponent = static_cast<int>((bits >> 10) & 31), mantissa = bits & 1023;
    const float magnitude = exponent == 31  ? INFINITY
                            : exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -24)
                                            : std::ldexp(1.0f + mantissa / 1024.0f, exponent - 15);
    return (bits >> 15) ? -magnitude : magnitude;
  }
  case DType::fp8_e4m3: {
    const int exponent = (bytes[0] >> 3) & 15, mantissa = bytes[0] & 7;
    if (exponent == 15 && mantissa == 7)
      return NAN;
    const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                          : std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
    return (bytes[0] >> 7) ? -magnitude : magnitude;
  }
  case DType::i8:
    return static_cast<int8_t>(bytes[0]);
  default:
    ADD_FAILURE() << "no decoder for " << dtypeName(dtype);
    return NAN;
  }
}

// Every element of a generated weight, as float.
std::vector<float> values(RandomParameters &generator, std::string_view name, DType dtype,
                          const std::vector<int64_t> &shape) {
  const std::vector<uint8_t> bytes = generated(generator, name, dtype, shape);
  std::vector<float> out;
  for (size_t i = 0; i < bytes.size(); i += dtypeSize(dtype))
    out.push_back(decode(dtype, bytes.data() + i));
  return out;
}

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::i8};

// ---- The generator ------------------------------------------------------------------------------

// If one of these changes, every artifact compiled with --random-parameters before needs
// recompiling (its parameter file would be refused): change the generator only on purpose.
TEST(RandomParametersTest, GoldenHashes) {
  RandomParameters generator(7);
  const std::vector<int64_t> matrix = {64, 96}, vector = {64};
  const std::pair<DType, uint64_t> matrices[] = {{DType::f32, 0x49c27bba4738e1d1ULL},
                                                 {DType::bf16, 0x2f1893b6af4d51d5ULL},
                                                 {DType::f16, 0xd2bb152ff3f5e152ULL},
                                                 {DType::fp8_e4m3, 0xc4f4865faee87059ULL},
                                                 {DType::i8, 0x717eba2a0e6bab73ULL}};
  for (const auto &[dtype, golden] : matrices) {
    StatusOr<uint64_t> hash = generator.contentHash("layers.0.q", dtype, ShapeView(matrix));
    ASSERT_TRUE(hash.isOk()) << hash.status().message();
    EXPECT_EQ(*hash, golden) << dtypeName(dtype) << ": " << hexHash(*hash);
  }
  StatusOr<uint64_t> norm = generator.contentHash("layers.0.attn_norm", DType::bf16,
                                                  ShapeView(vector));
  StatusOr<uint64_t> scales = generator.contentHash("layers.0.q.scale", DType::f32,
                                                    ShapeView(vector));
  ASSERT_TRUE(norm.isOk() && scales.isOk());
  EXPECT_EQ(*norm, 0x6132c8a48031181bULL) << hexHash(*norm);
  EXPECT_EQ(*scales, 0x1335149e88baa2c9ULL) << hexHash(*scales);
}

TEST(RandomParametersTest, SameInputsSameBytesOtherwiseOthers) {
  RandomParameters a(7), b(7), other(8);
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(dtypeName(dtype));
    const std::vector<uint8_t> bytes = generated(a, "layers.0.up", dtype, kLargeMatrix);
    EXPECT_EQ(bytes, generated(b, "layers.0.up", dtype, kLargeMatrix));
    EXPECT_NE(bytes, generated(other, "layers.0.up", dtype, kLargeMatrix));
    EXPECT_NE(bytes, generated(a, "layers.0.gate", dtype, kLargeMatrix));
  }
}

TEST(RandomParametersTest, HashIsTheHashOfTheBytes) {
  RandomParameters generator(3);
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(dtypeName(dtype));
    for (const std::vector<int64_t> &shape :
         std::vector<std::vector<int64_t>>{kLargeMatrix, {5}, {}, {0, 8}}) {
      const std::vector<uint8_t> bytes = generated(generator, "w", dtype, shape);
      StatusOr<uint64_t> hash = generator.contentHash("w", dtype, ShapeView(shape));
      ASSERT_TRUE(hash.isOk());
      EXPECT_EQ(*hash, hashBytes(bytes.data(), bytes.size()));
    }
  }
}

TEST(RandomParametersTest, FloatMatricesAreSmallAndFinite) {
  RandomParameters generator(11);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtypeName(dtype));
    const std::vector<float> all = values(generator, "layers.3.down", dtype, kLargeMatrix);
    double sum = 0, squares = 0;
    for (float v : all) {
      ASSERT_TRUE(std::isfinite(v));
      ASSERT_LE(std::fabs(v), 0.02f);
      sum += v;
      squares += static_cast<double>(v) * v;
    }
    // U[-0.02, 0.02): mean 0, standard deviation 0.02 / sqrt(3).
    EXPECT_NEAR(sum / all.size(), 0.0, 1e-4);
    EXPECT_NEAR(std::sqrt(squares / all.size()), 0.02 / std::sqrt(3.0), 2e-4);
  }
}

TEST(RandomParametersTest, VectorsArePositive) {
  RandomParameters generator(11);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3}) {
    SCOPED_TRACE(dtypeName(dtype));
    // Larger than a block, so that every value of the block is seen.
    for (float v : values(generator, "final_norm", dtype, {1 << 20})) {
      ASSERT_GE(v, 0.5f);
      ASSERT_LT(v, 1.5f);
    }
    for (float v : values(generator, "layers.0.k_bias", dtype, {7}))
      ASSERT_GT(v, 0.0f);
  }
}

TEST(RandomParametersTest, RowScalesMakeQuantizedMatricesSmall) {
  RandomParameters generator(5);
  for (float scale : values(generator, "layers.0.q.scale", DType::f32, {1 << 20})) {
    ASSERT_GE(scale, 0.5f * 0.02f / 128);
    ASSERT_LT(scale, 1.5f * 0.02f / 128);
  }
}

TEST(RandomParametersTest, Fp8IsNeverNaNNorHuge) {
  RandomParameters generator(13);
  for (const char *name : {"layers.0.gate", "layers.0.attn_norm"}) {
    const std::vector<int64_t> shape =
        std::string(name) == "layers.0.gate" ? kLargeMatrix : std::vector<int64_t>{1 << 21};
    for (uint8_t byte : generated(generator, name, DType::fp8_e4m3, shape)) {
      ASSERT_NE(byte & 0x7f, 0x7f) << name;
      ASSERT_LT(std::fabs(decode(DType::fp8_e4m3, &byte)), 128.0f) << name;
    }
  }
}

TEST(RandomParametersTest, Int8TakesEveryByte) {
  RandomParameters generator(13);
  std::vector<bool> seen(256);
  for (uint8_t byte : generated(generator, "layers.0.v", DType::i8, kLargeMatrix))
    seen[byte] = true;
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 256);
}

TEST(RandomParametersTest, RolesByRankAndName) {
  const std::vector<int64_t> matrix = {4, 4}, experts = {2, 4, 4}, vector = {4}, scalar = {};
  EXPECT_EQ(randomRole("layers.0.q", ShapeView(matrix)), RandomRole::matrix);
  EXPECT_EQ(randomRole("layers.0.experts_down", ShapeView(experts)), RandomRole::matrix);
  EXPECT_EQ(randomRole("layers.0.q.scale", ShapeView(vector)), RandomRole::rowScale);
  EXPECT_EQ(randomRole("layers.0.attn_norm", ShapeView(vector)), RandomRole::vector);
  EXPECT_EQ(randomRole("layers.0.layer_scalar", ShapeView(scalar)), RandomRole::vector);
  EXPECT_EQ(randomRole(".scale", ShapeView(vector)), RandomRole::vector);
}

TEST(RandomParametersTest, RefusesDTypesItDoesNotMake) {
  RandomParameters generator(1);
  const std::vector<int64_t> shape = {4};
  StatusOr<uint64_t> hash = generator.contentHash("positions", DType::i64, ShapeView(shape));
  ASSERT_FALSE(hash.isOk());
  EXPECT_EQ(hash.status().message(), "weight 'positions' is i64: random parameters are f32, bf16, "
                                     "f16, fp8_e4m3 or i8");
}

// ---- Artifact and parameter file ---------------------------------------------------------------

class RandomParameterFileTest : public ::testing::Test {
protected:
  // Compiles the sample as `dlmc compile --parameters external --random-parameters seed` would
  // write it (its parameter file: model.dlmp).
  void compile(const std::string &path, uint64_t seed) {
    const Status written =
        writeArtifactWithRandomParameters(path, parameterFile, sample.contents, seed);
    ASSERT_TRUE(written.isOk()) << written.message();
  }

  // What dlm-params random does for the artifact at `path`.
  RandomParameterFileOutcome writeParameters(const std::string &path) {
    StatusOr<ExternalWeightIndex> index = readExternalWeightIndex(path);
    EXPECT_TRUE(index.isOk()) << index.status().message();
    if (!index)
      return {};
    StatusOr<RandomParameterFileOutcome> outcome = writeRandomParameterFile(index->path, *index);
    EXPECT_TRUE(outcome.isOk()) << outcome.status().message();
    return outcome ? *outcome : RandomParameterFileOutcome{};
  }

  std::string openError(const std::string &path) {
    StatusOr<ArtifactReader> reader = ArtifactReader::open(path);
    return reader ? "" : reader.status().message();
  }

  ScratchDirectory scratch;
  SampleArtifact sample;
  const std::string artifact = scratch.file("model.dlm");
  const std::string parameterFile = scratch.file("model.dlmp");
};

TEST_F(RandomParameterFileTest, CompiledWithoutItsParameterFile) {
  compile(artifact, 7);
  EXPECT_FALSE(std::filesystem::exists(parameterFile));
  EXPECT_THAT(openError(artifact),
              HasSubstr("model.dlmp': cannot open: No such file or directory (the weights are "
                        "random, seed 7: write the parameter file with dlm-params random " +
                        artifact + ")"));
  StatusOr<ExternalWeightIndex> index = readExternalWeightIndex(artifact);
  ASSERT_TRUE(index.isOk()) << index.status().message();
  EXPECT_EQ(index->randomSeed, 7);
  EXPECT_EQ(index->recordedPath, "model.dlmp");
  EXPECT_EQ(index->path, parameterFile);
  ASSERT_EQ(index->weights.size(), sample.contents.weights.size());
  // The hashes are the generator's, not the checkpoint's.
  RandomParameters generator(7);
  for (size_t i = 0; i < index->weights.size(); ++i) {
    const WeightSource &weight = index->weights[i];
    SCOPED_TRACE(weight.name);
    EXPECT_EQ(weight.name, sample.contents.weights[i].name);
    EXPECT_EQ(index->layout.placements[i].contentHash,
              *generator.contentHash(weight.name, weight.dtype, ShapeView(weight.shape)));
  }
}

TEST_F(RandomParameterFileTest, WrittenFileBindsAndVerifies) {
  compile(artifact, 7);
  const RandomParameterFileOutcome outcome = writeParameters(artifact);
  EXPECT_EQ(outcome.weightCount, sample.contents.weights.size());
  EXPECT_EQ(outcome.fileSize, std::filesystem::file_size(parameterFile));
  EXPECT_TRUE(outcome.metadataAsRecorded);

  StatusOr<ArtifactReader> reader = ArtifactReader::open(artifact);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_EQ(reader->randomWeightSeed(), std::optional<uint64_t>(7));
  EXPECT_EQ(reader->parameterFile()->randomSeed(), 7);
  EXPECT_EQ(reader->parameterFile()->metadataHash(), reader->parameterFileRecord()->metadataHash);
  const Status verified = reader->verifyIntegrity();
  EXPECT_TRUE(verified.isOk()) << verified.message();
  RandomParameters generator(7);
  for (const WeightView &weight : reader->weights()) {
    SCOPED_TRACE(std::string(weight.name));
    const std::vector<uint8_t> expected =
        generated(generator, weight.name, weight.dtype, weight.shape.toVector());
    ASSERT_EQ(weight.size, expected.size());
    EXPECT_TRUE(weight.size == 0 || std::memcmp(weight.data, expected.data(), weight.size) == 0);
  }
}

TEST_F(RandomParameterFileTest, AnotherSeedsFileIsRefusedByItsHashes) {
  compile(artifact, 7);
  // Another artifact of the same weights, seed 8, whose parameter file takes model.dlmp's place.
  const std::string other = scratch.file("other.dlm");
  compile(other, 8);
  writeParameters(other);
  ASSERT_EQ(openError(other), "");
  EXPECT_THAT(openError(artifact),
              HasSubstr(" in the artifact: the parameter file holds random weights of seed 8, "
                        "the artifact random weights of seed 7 (dlm-params random writes them)"));
  EXPECT_THAT(openError(artifact), HasSubstr("parameter file '" + parameterFile + "': weight '"));
}

TEST_F(RandomParameterFileTest, RefusesHashesItDoesNotGenerate) {
  compile(artifact, 7);
  // As if another generator had compiled it: a recorded hash this one does not make.
  std::vector<uint8_t> bytes = testing::readBytes(artifact);
  testing::mutableWeight(bytes, 1)->mutate_content_hash(0x1234);
  testing::writeBytes(artifact, bytes);
  StatusOr<ExternalWeightIndex> index = readExternalWeightIndex(artifact);
  ASSERT_TRUE(index.isOk()) << index.status().message();
  StatusOr<RandomParameterFileOutcome> outcome = writeRandomParameterFile(index->path, *index);
  ASSERT_FALSE(outcome.isOk());
  EXPECT_THAT(outcome.status().message(),
              HasSubstr("artifact '" + artifact + "': weight '" +
                        sample.contents.weights[1].name + "' generates to hash 0x"));
  EXPECT_THAT(outcome.status().message(),
              HasSubstr("but the artifact records 0x0000000000001234: the dlmc that compiled it "
                        "generates other contents than this program"));
  EXPECT_FALSE(std::filesystem::exists(parameterFile));
}

TEST_F(RandomParameterFileTest, CheckpointWeightsHaveNoSeed) {
  StatusOr<ParameterFileOutcome> written =
      writeArtifactWithParameterFile(artifact, parameterFile, sample.contents);
  ASSERT_TRUE(written.isOk()) << written.status().message();
  StatusOr<ArtifactReader> reader = ArtifactReader::open(artifact);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_EQ(reader->randomWeightSeed(), std::nullopt);
  EXPECT_EQ(reader->parameterFile()->randomSeed(), kNoRandomSeed);

  StatusOr<ExternalWeightIndex> index = readExternalWeightIndex(artifact);
  ASSERT_TRUE(index.isOk()) << index.status().message();
  StatusOr<RandomParameterFileOutcome> outcome = writeRandomParameterFile(index->path, *index);
  ASSERT_FALSE(outcome.isOk());
  EXPECT_THAT(outcome.status().message(),
              HasSubstr("artifact '" + artifact + "' records no random seed: its weights are a "
                        "checkpoint's"));
}

TEST_F(RandomParameterFileTest, EmbeddedWeightsHaveNoIndexToWrite) {
  ASSERT_TRUE(writeArtifact(artifact, sample.contents).isOk());
  StatusOr<ExternalWeightIndex> index = readExternalWeightIndex(artifact);
  ASSERT_FALSE(index.isOk());
  EXPECT_EQ(index.status().message(),
            "artifact '" + artifact + "': its weights are in it, not in a parameter file (dlmc "
            "compile --parameters external puts them in one)");
}

TEST_F(RandomParameterFileTest, OverwritesNoOtherFile) {
  compile(artifact, 7);
  testing::writeBytes(parameterFile, std::vector<uint8_t>{'n', 'o', 't', 'e', 's'});
  StatusOr<ExternalWeightIndex> index = readExternalWeightIndex(artifact);
  ASSERT_TRUE(index.isOk());
  StatusOr<RandomParameterFileOutcome> outcome = writeRandomParameterFile(index->path, *index);
  ASSERT_FALSE(outcome.isOk());
  EXPECT_THAT(outcome.status().message(), HasSubstr("is there but is not a dlm parameter file"));
  EXPECT_EQ(testing::readBytes(parameterFile).size(), 5u);
  outcome = writeRandomParameterFile(artifact, *index);
  ASSERT_FALSE(outcome.isOk());
  EXPECT_THAT(outcome.status().message(), HasSubstr("is the artifact itself"));
}

TEST_F(RandomParameterFileTest, StreamedWeightsMustHaveTheirSize) {
  std::vector<WeightSource> weights = {{"w", DType::f32, {4}, nullptr, 16}};
  StatusOr<WeightLayout> layout = layOutWeights(weights, {0});
  ASSERT_TRUE(layout.isOk());
  const uint8_t bytes[16] = {};
  StatusOr<ParameterFileRecord> record =
      writeParameterFile(parameterFile, "tests", weights, *layout, 1,
                         [&](size_t, const ByteSink &sink) { return sink(bytes, 12); });
  ASSERT_FALSE(record.isOk());
  EXPECT_EQ(record.status().message(),
            "parameter file '" + parameterFile + "': weight 'w': given 12 of its 16 bytes");
  EXPECT_FALSE(std::filesystem::exists(parameterFile));
}

} // namespace
} // namespace dlm::artifact
