// Integrity hashes (schema 1.4): dlmc records a hash of the metadata and of every weight, and
// ArtifactReader::verifyIntegrity finds any byte that changed since, naming the section; damage
// that open()'s structural checks cannot see (a flipped weight value, a changed number in the
// config) is exactly what they are for.
#include "ArtifactTestSupport.h"

namespace dlm::artifact {
namespace {

using ::testing::HasSubstr;
using testing::SampleArtifact;
using testing::ScratchDirectory;

class ArtifactIntegrityTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(writeArtifact(path, sample.contents).isOk());
    bytes = testing::readBytes(path);
  }
  // The verification of `bytes` written back to the artifact, which must still open.
  Status verifyDamaged() {
    testing::writeBytes(path, bytes);
    StatusOr<ArtifactReader> reader = ArtifactReader::open(path);
    EXPECT_TRUE(reader.isOk()) << reader.status().message();
    return reader ? reader->verifyIntegrity() : reader.status();
  }

  ScratchDirectory scratch;
  SampleArtifact sample;
  const std::string path = scratch.file("model.dlm");
  std::vector<uint8_t> bytes;
};

TEST_F(ArtifactIntegrityTest, AnArtifactAsWrittenVerifies) {
  StatusOr<ArtifactReader> reader = ArtifactReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_TRUE(reader->hasIntegrityHashes());
  const Status verified = reader->verifyIntegrity();
  EXPECT_TRUE(verified.isOk()) << verified.message();
}

TEST_F(ArtifactIntegrityTest, AFlippedWeightByteNamesTheWeight) {
  const fb::Weight *q = testing::mutableWeight(bytes, 1);
  const uint64_t at = testing::mutableRoot(bytes)->weight_section_offset() + q->offset() + 7;
  bytes[at] ^= 0x01;
  const Status status = verifyDamaged();
  ASSERT_FALSE(status.isOk());
  EXPECT_THAT(status.message(),
              HasSubstr("artifact '" + path + "': damaged: weight "
                        "'model.layers.0.self_attn.q_proj.weight' (bytes " +
                        std::to_string(at - 7) + " to " + std::to_string(at - 7 + q->byte_size()) +
                        ") hashes to 0x"));
  EXPECT_THAT(status.message(), HasSubstr(", dlmc recorded 0x"));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("metadata")));
}

TEST_F(ArtifactIntegrityTest, AChangedConfigValueNamesTheMetadata) {
  testing::mutableRoot(bytes)->mutable_config()->mutate_rope_theta(123.0);
  const Status status = verifyDamaged();
  ASSERT_FALSE(status.isOk());
  EXPECT_THAT(status.message(), HasSubstr("damaged: the metadata (bytes 0 to " +
                                          std::to_string(testing::metadataEnd(bytes)) + ")"));
}

TEST_F(ArtifactIntegrityTest, ARecordedHashThatChangedIsDamageToo) {
  testing::mutableWeight(bytes, 0)->mutate_content_hash(42);
  const Status status = verifyDamaged();
  ASSERT_FALSE(status.isOk());
  // The weight's own bytes are intact but its recorded hash is not, and it lives in the metadata.
  EXPECT_THAT(status.message(), HasSubstr("the metadata"));
  EXPECT_THAT(status.message(), HasSubstr("weight 'model.embed_tokens.weight'"));
  EXPECT_THAT(status.message(), HasSubstr("dlmc recorded 0x000000000000002a"));
}

TEST_F(ArtifactIntegrityTest, ArtifactsBeforeSchema14HaveNothingToVerify) {
  testing::mutableRoot(bytes)->mutable_schema_version()->mutate_minor(3);
  const Status status = verifyDamaged();
  ASSERT_FALSE(status.isOk());
  EXPECT_THAT(status.message(), HasSubstr("schema 1.3 records no integrity hashes"));
}

} // namespace
} // namespace dlm::artifact
