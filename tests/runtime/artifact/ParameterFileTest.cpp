// Program and parameters apart (schema 1.5): an artifact whose weights live in a parameter file
// reads back the same weights as one holding them; a parameter file that does not match the
// artifact is refused by name, never used; a compile leaves an up-to-date parameter file as it is
// and rewrites a stale one.
#include "ArtifactTestSupport.h"

#include "runtime/artifact/ExternalParameters.h"
#include "runtime/artifact/ParameterFilePath.h"
#include "runtime/artifact/ParameterFileWriter.h"

#include <sys/stat.h>

namespace dlm::artifact {
namespace {

using ::testing::HasSubstr;
using testing::SampleArtifact;
using testing::ScratchDirectory;

// memcmp, but an empty tensor's bytes may be a null pointer.
bool sameBytes(const void *a, const void *b, size_t size) {
  return size == 0 || std::memcmp(a, b, size) == 0;
}

struct FileIdentity {
  ino_t inode = 0;
  struct timespec modified = {};
};

FileIdentity identity(const std::string &path) {
  struct stat info = {};
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return {info.st_ino, info.st_mtim};
}

class ParameterFileTest : public ::testing::Test {
protected:
  // Writes the sample with its weights in `parameters` (the default .dlmp beside the artifact).
  ParameterFileOutcome writeExternal(const std::string &parameters = "") {
    StatusOr<ParameterFileOutcome> outcome = writeArtifactWithParameterFile(
        artifact, parameters.empty() ? parameterFile : parameters, sample.contents);
    EXPECT_TRUE(outcome.isOk()) << outcome.status().message();
    return outcome ? *outcome : ParameterFileOutcome{};
  }

  // The error opening the artifact, "" when it opens.
  std::string openError() {
    StatusOr<ArtifactReader> reader = ArtifactReader::open(artifact);
    return reader ? "" : reader.status().message();
  }

  // The prefix of every error about the parameter file the artifact names.
  std::string prefix() const {
    return "artifact '" + artifact + "': parameter file '" + parameterFile + "'";
  }

  // Replaces the parameter file with one holding `weights` (as layOutWeights places them).
  void writeParameters(const std::vector<WeightSource> &weights) {
    StatusOr<WeightLayout> layout = layOutWeights(weights);
    ASSERT_TRUE(layout.isOk()) << layout.status().message();
    StatusOr<ParameterFileRecord> written =
        writeParameterFile(parameterFile, "parameter file tests", weights, *layout);
    ASSERT_TRUE(written.isOk()) << written.status().message();
  }

  ScratchDirectory scratch;
  SampleArtifact sample;
  const std::string artifact = scratch.file("model.dlm");
  const std::string parameterFile = scratch.file("model.dlmp");
};

// ---- Round trip --------------------------------------------------------------------------------

TEST_F(ParameterFileTest, WeightsReadBackAsFromAnArtifactHoldingThem) {
  const std::string embeddedPath = scratch.file("embedded.dlm");
  ASSERT_TRUE(writeArtifact(embeddedPath, sample.contents).isOk());
  const ParameterFileOutcome outcome = writeExternal();
  EXPECT_TRUE(outcome.written);
  EXPECT_EQ(outcome.weightCount, sample.contents.weights.size());
  EXPECT_EQ(outcome.fileSize, std::filesystem::file_size(parameterFile));

  StatusOr<ArtifactReader> embedded = ArtifactReader::open(embeddedPath);
  StatusOr<ArtifactReader> external = ArtifactReader::open(artifact);
  ASSERT_TRUE(embedded.isOk()) << embedded.status().message();
  ASSERT_TRUE(external.isOk()) << external.status().message();
  EXPECT_EQ(embedded->parameterFile(), nullptr);
  ASSERT_NE(external->parameterFile(), nullptr);
  EXPECT_EQ(external->parameterFile()->path(), parameterFile);
  EXPECT_EQ(external->parameterFileRecord()->path, "model.dlmp");
  EXPECT_EQ(external->config(), embedded->config());
  ASSERT_EQ(external->weights().size(), embedded->weights().size());
  for (size_t i = 0; i < embedded->weights().size(); ++i) {
    const WeightView &a = embedded->weights()[i], &b = external->weights()[i];
    SCOPED_TRACE(std::string(a.name));
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.shape.toVector(), b.shape.toVector());
    EXPECT_EQ(a.contentHash, b.contentHash);
    ASSERT_EQ(a.size, b.size);
    EXPECT_TRUE(sameBytes(a.data, b.data, a.size));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % kWeightAlignment, 0u);
    EXPECT_EQ(external->findWeight(a.name), &b);
  }
  // The artifact keeps its program and descriptors only.
  EXPECT_LT(external->fileSize() + 64, embedded->fileSize());
  const Status verified = external->verifyIntegrity();
  EXPECT_TRUE(verified.isOk()) << verified.message();
}

TEST_F(ParameterFileTest, MovesWithTheArtifactsDirectory) {
  writeExternal();
  const std::filesystem::path moved = scratch.path() / "moved";
  std::filesystem::create_directories(moved);
  std::filesystem::rename(artifact, moved / "model.dlm");
  std::filesystem::rename(parameterFile, moved / "model.dlmp");
  StatusOr<ArtifactReader> reader = ArtifactReader::open((moved / "model.dlm").string());
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_EQ(reader->parameterFile()->path(), (moved / "model.dlmp").string());
}

TEST_F(ParameterFileTest, ElsewhereTheArtifactRecordsAnAbsolutePath) {
  std::filesystem::create_directories(scratch.path() / "weights");
  const std::string elsewhere = scratch.file("weights/shared.dlmp");
  writeExternal(elsewhere);
  StatusOr<ArtifactReader> reader = ArtifactReader::open(artifact);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_EQ(reader->parameterFileRecord()->path,
            std::filesystem::weakly_canonical(elsewhere).string());
}

TEST_F(ParameterFileTest, PathsResolveFromTheArtifactsDirectory) {
  EXPECT_EQ(defaultParameterFilePath("out/model.dlm"), "out/model.dlmp");
  EXPECT_EQ(defaultParameterFilePath("model"), "model.dlmp");
  EXPECT_EQ(resolveParameterFilePath("out/model.dlm", "model.dlmp"), "out/model.dlmp");
  EXPECT_EQ(resolveParameterFilePath("model.dlm", "model.dlmp"), "model.dlmp");
  EXPECT_EQ(resolveParameterFilePath("out/model.dlm", "/w/model.dlmp"), "/w/model.dlmp");
}

// ---- Refusals ----------------------------------------------------------------------------------

TEST_F(ParameterFileTest, MissingFile) {
  writeExternal();
  std::filesystem::remove(parameterFile);
  EXPECT_EQ(openError(), prefix() + ": cannot open: No such file or directory");
}

TEST_F(ParameterFileTest, NotAParameterFile) {
  writeExternal();
  std::vector<uint8_t> bytes = testing::readBytes(parameterFile);
  std::memcpy(&bytes[8], "XXXX", 4);
  testing::writeBytes(parameterFile, bytes);
  EXPECT_EQ(openError(),
            prefix() + ": not a dlm parameter file (file identifier 'XXXX', expected 'DLP1')");
  std::filesystem::copy_file(artifact, parameterFile,
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(openError(), prefix() + ": not a dlm parameter file but a dlm artifact (file "
                                    "identifier 'DLM1', expected 'DLP1')");
}

TEST_F(ParameterFileTest, AParameterFileIsNotAnArtifact) {
  writeExternal();
  StatusOr<ArtifactReader> reader = ArtifactReader::open(parameterFile);
  ASSERT_FALSE(reader.isOk());
  EXPECT_EQ(reader.status().message(),
            "artifact '" + parameterFile +
                "': not a dlm artifact but a dlm parameter file (file identifier 'DLP1', "
                "expected 'DLM1')");
}

TEST_F(ParameterFileTest, SchemaItCannotRead) {
  writeExternal();
  std::vector<uint8_t> bytes = testing::readBytes(parameterFile);
  fb::GetMutableSizePrefixedParameterArchive(bytes.data())->mutable_schema_version()->mutate_major(2);
  testing::writeBytes(parameterFile, bytes);
  EXPECT_EQ(openError(), prefix() + ": parameter file schema version 2." +
                             std::to_string(kParameterSchemaMinor) +
                             " is newer than this runtime supports (1.x)");
}

TEST_F(ParameterFileTest, Truncated) {
  writeExternal();
  const uint64_t size = std::filesystem::file_size(parameterFile);
  std::filesystem::resize_file(parameterFile, size - 1);
  EXPECT_EQ(openError(), prefix() + ": truncated: the weight section ends at byte " +
                             std::to_string(size) + " but the file has only " +
                             std::to_string(size - 1) + " bytes");
}

TEST_F(ParameterFileTest, WeightPastTheEnd) {
  writeExternal();
  std::vector<uint8_t> bytes = testing::readBytes(parameterFile);
  fb::ParameterArchive *root = fb::GetMutableSizePrefixedParameterArchive(bytes.data());
  const uint64_t sectionSize = root->weight_section_size();
  root->mutable_weights()->GetMutableObject(2)->mutate_offset((sectionSize + 63) / 64 * 64);
  testing::writeBytes(parameterFile, bytes);
  EXPECT_THAT(openError(), HasSubstr(prefix() + ": weight 'model.norm.weight' (14 bytes at "
                                                "offset "));
  EXPECT_THAT(openError(), HasSubstr("past the end of the file (" +
                                     std::to_string(bytes.size()) + " bytes)"));
}

TEST_F(ParameterFileTest, MissingWeight) {
  writeExternal();
  std::vector<WeightSource> fewer = sample.contents.weights;
  fewer.pop_back();
  writeParameters(fewer);
  EXPECT_EQ(openError(), "artifact '" + artifact + "': parameter file '" + parameterFile +
                             "' has no weight 'model.layers.0.mlp.up_proj.weight', which the "
                             "artifact needs");
}

TEST_F(ParameterFileTest, ShapeDiffers) {
  writeExternal();
  std::vector<WeightSource> reshaped = sample.contents.weights;
  reshaped[0].shape = {4, 8};
  writeParameters(reshaped);
  EXPECT_EQ(openError(), prefix() + ": weight 'model.embed_tokens.weight' is bf16 [4, 8] there "
                                    "but bf16 [8, 4] in the artifact");
}

TEST_F(ParameterFileTest, DtypeDiffers) {
  writeExternal();
  std::vector<WeightSource> retyped = sample.contents.weights;
  retyped[1].dtype = DType::i32;
  writeParameters(retyped);
  EXPECT_EQ(openError(), prefix() + ": weight 'model.layers.0.self_attn.q_proj.weight' is i32 "
                                    "[3, 5] there but f32 [3, 5] in the artifact");
}

TEST_F(ParameterFileTest, ContentHashDiffers) {
  writeExternal();
  std::vector<WeightSource> other = sample.contents.weights;
  const std::vector<uint8_t> otherValues = testing::patternBytes(other[2].size, 99);
  other[2].data = otherValues.data();
  writeParameters(other);
  const std::string error = openError();
  EXPECT_THAT(error, HasSubstr(prefix() + ": weight 'model.norm.weight' has content hash 0x"));
  EXPECT_THAT(error, HasSubstr(" in the artifact: the parameter file was written for another "
                               "checkpoint or conversion"));
}

TEST_F(ParameterFileTest, VerifyIntegrityRecomputesTheParameterFilesHashes) {
  writeExternal();
  std::vector<uint8_t> bytes = testing::readBytes(parameterFile);
  bytes[bytes.size() - 1] ^= 0x01; // the last weight's last byte
  testing::writeBytes(parameterFile, bytes);
  StatusOr<ArtifactReader> reader = ArtifactReader::open(artifact);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  const Status verified = reader->verifyIntegrity();
  ASSERT_FALSE(verified.isOk());
  EXPECT_THAT(verified.message(),
              HasSubstr(prefix() + ": damaged: weight 'model.layers.0.mlp.up_proj.weight' (bytes "));
}

TEST_F(ParameterFileTest, GuardedReadCoversBothFiles) {
  writeExternal();
  StatusOr<ArtifactReader> reader = ArtifactReader::open(artifact);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  const WeightView &weight = reader->weights()[0];
  volatile uint8_t sink = 0;
  ASSERT_EQ(::truncate(parameterFile.c_str(), 0), 0);
  Status read = reader->guardedRead([&] { sink = *static_cast<const uint8_t *>(weight.data); });
  EXPECT_THAT(read.message(), HasSubstr(prefix() + ": the file shrank while in use"));
  ASSERT_EQ(::truncate(artifact.c_str(), 0), 0);
  read = reader->guardedRead([&] { sink = static_cast<uint8_t>(reader->tokenizerJson()[0]); });
  EXPECT_THAT(read.message(), HasSubstr("artifact '" + artifact + "': the file shrank while in use"));
  (void)sink;
}

// ---- Recompiling -------------------------------------------------------------------------------

TEST_F(ParameterFileTest, AnUpToDateParameterFileIsNotRewritten) {
  writeExternal();
  const FileIdentity before = identity(parameterFile);
  // Another program over the same weights: the file is left as it is.
  sample.contents.program.policy = "another_policy";
  const ParameterFileOutcome outcome = writeExternal();
  EXPECT_FALSE(outcome.written);
  const FileIdentity after = identity(parameterFile);
  EXPECT_EQ(after.inode, before.inode);
  EXPECT_EQ(after.modified.tv_sec, before.modified.tv_sec);
  EXPECT_EQ(after.modified.tv_nsec, before.modified.tv_nsec);
  StatusOr<ArtifactReader> reader = ArtifactReader::open(artifact);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_EQ(reader->program().policy, "another_policy");
}

TEST_F(ParameterFileTest, AStaleParameterFileIsRewritten) {
  writeExternal();
  const FileIdentity before = identity(parameterFile);
  const std::vector<uint8_t> newValues = testing::patternBytes(sample.contents.weights[1].size, 77);
  sample.contents.weights[1].data = newValues.data();
  const ParameterFileOutcome outcome = writeExternal();
  EXPECT_TRUE(outcome.written);
  EXPECT_EQ(outcome.rewriteReason,
            "weight 'model.layers.0.self_attn.q_proj.weight' holds other values");
  EXPECT_NE(identity(parameterFile).inode, before.inode);
  StatusOr<ArtifactReader> reader = ArtifactReader::open(artifact);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  const WeightView &q = reader->weights()[1];
  EXPECT_TRUE(sameBytes(q.data, newValues.data(), newValues.size()));
}

TEST_F(ParameterFileTest, ADamagedParameterFileIsRewritten) {
  writeExternal();
  std::vector<uint8_t> bytes = testing::readBytes(parameterFile);
  bytes[bytes.size() - 1] ^= 0x01;
  testing::writeBytes(parameterFile, bytes);
  const ParameterFileOutcome outcome = writeExternal();
  EXPECT_TRUE(outcome.written);
  EXPECT_THAT(outcome.rewriteReason, HasSubstr("it is damaged: parameter file '"));
  StatusOr<ArtifactReader> reader = ArtifactReader::open(artifact);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_TRUE(reader->verifyIntegrity().isOk());
}

TEST_F(ParameterFileTest, AFileHoldingMoreWeightsInAnotherOrderServes) {
  // Another artifact's parameter file: these weights reversed, and one more.
  std::vector<WeightSource> more(sample.contents.weights.rbegin(), sample.contents.weights.rend());
  const std::vector<uint8_t> extra = testing::patternBytes(64, 5);
  more.push_back({"model.extra", DType::u8, {64}, extra.data(), 64});
  writeParameters(more);
  const FileIdentity before = identity(parameterFile);
  const ParameterFileOutcome outcome = writeExternal();
  EXPECT_FALSE(outcome.written);
  EXPECT_EQ(identity(parameterFile).inode, before.inode);
  StatusOr<ArtifactReader> reader = ArtifactReader::open(artifact);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  ASSERT_EQ(reader->weights().size(), sample.contents.weights.size());
  for (size_t i = 0; i < sample.contents.weights.size(); ++i) {
    const WeightSource &source = sample.contents.weights[i];
    EXPECT_EQ(reader->weights()[i].name, source.name);
    EXPECT_TRUE(sameBytes(reader->weights()[i].data, source.data, source.size)) << source.name;
  }
}

TEST_F(ParameterFileTest, AnotherKindOfFileIsNeverOverwritten) {
  const std::vector<uint8_t> precious = testing::patternBytes(100, 3);
  testing::writeBytes(parameterFile, precious);
  StatusOr<ParameterFileOutcome> outcome =
      writeArtifactWithParameterFile(artifact, parameterFile, sample.contents);
  ASSERT_FALSE(outcome.isOk());
  EXPECT_EQ(outcome.status().message(),
            "'" + parameterFile +
                "' is there but is not a dlm parameter file (or cannot be read): dlmc overwrites "
                "no other file with one; remove it or give another --parameter-file");
  EXPECT_EQ(testing::readBytes(parameterFile), precious);
  EXPECT_FALSE(std::filesystem::exists(artifact));
}

TEST_F(ParameterFileTest, TheArtifactItselfIsNoParameterFile) {
  StatusOr<ParameterFileOutcome> outcome =
      writeArtifactWithParameterFile(artifact, artifact, sample.contents);
  ASSERT_FALSE(outcome.isOk());
  EXPECT_EQ(outcome.status().message(), "the parameter file '" + artifact +
                                            "' is the artifact itself: give another "
                                            "--parameter-file");
}

TEST_F(ParameterFileTest, AParameterFileOpensAndListsOnItsOwn) {
  writeExternal();
  EXPECT_TRUE(hasParameterFileIdentifier(parameterFile));
  EXPECT_FALSE(hasParameterFileIdentifier(artifact));
  StatusOr<ParameterFileReader> file = ParameterFileReader::open(parameterFile);
  ASSERT_TRUE(file.isOk()) << file.status().message();
  EXPECT_EQ(file->schemaVersion().major, kParameterSchemaMajor);
  EXPECT_EQ(file->producer(), "dlm artifact tests");
  ASSERT_EQ(file->weights().size(), sample.contents.weights.size());
  EXPECT_EQ(file->weights()[3].name, "model.empty");
  EXPECT_TRUE(file->verifyIntegrity().isOk());
}

} // namespace
} // namespace dlm::artifact
