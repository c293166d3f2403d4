// A damaged artifact is rejected by open() with a message naming the problem and the item, and
// never crashes the reader: truncation, foreign files, other versions, bad weight descriptors,
// and byte flips all over the metadata.
#include "ArtifactTestSupport.h"

#include <functional>
#include <numeric>

namespace dlm::artifact {
namespace {

using ::testing::HasSubstr;
using testing::SampleArtifact;
using testing::ScratchDirectory;
using ::testing::StartsWith;

constexpr uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();

class ArtifactDamageTest : public ::testing::Test {
protected:
  void SetUp() override {
    const std::string path = scratch.file("good.dlm");
    Status written = writeArtifact(path, sample.contents);
    ASSERT_TRUE(written.isOk()) << written.message();
    good = testing::readBytes(path);
    ASSERT_FALSE(good.empty());
  }

  // Writes `bytes` to a file and opens it; the error message, or "" if it opened.
  std::string openBytes(const std::vector<uint8_t> &bytes, const std::string &name = "bad.dlm") {
    const std::string path = scratch.file(name);
    testing::writeBytes(path, bytes);
    auto reader = ArtifactReader::open(path);
    if (reader.isOk())
      return "";
    EXPECT_THAT(reader.status().message(), StartsWith("artifact '" + path + "': "));
    return reader.status().message();
  }

  // Applies `damage` to a copy of the good artifact and returns the error opening it gives.
  std::string openDamaged(const std::function<void(std::vector<uint8_t> &)> &damage) {
    std::vector<uint8_t> bytes = good;
    damage(bytes);
    return openBytes(bytes);
  }

  std::string prefix(const std::string &name = "bad.dlm") {
    return "artifact '" + scratch.file(name) + "': ";
  }

  const fb::Artifact &root() const { return *fb::GetSizePrefixedArtifact(good.data()); }

  ScratchDirectory scratch;
  SampleArtifact sample;
  std::vector<uint8_t> good;
};

// ---- Files that are not artifacts ------------------------------------------------------------

TEST_F(ArtifactDamageTest, MissingFile) {
  const std::string path = scratch.file("absent.dlm");
  auto reader = ArtifactReader::open(path);
  ASSERT_FALSE(reader.isOk());
  EXPECT_EQ(reader.status().message(),
            "artifact '" + path + "': cannot open: No such file or directory");
}

TEST_F(ArtifactDamageTest, Directory) {
  auto reader = ArtifactReader::open(scratch.path().string());
  ASSERT_FALSE(reader.isOk());
  EXPECT_THAT(reader.status().message(), HasSubstr("not a regular file"));
}

TEST_F(ArtifactDamageTest, EmptyFile) {
  EXPECT_EQ(openBytes({}), prefix() + "empty file (0 bytes), not a dlm artifact");
}

TEST_F(ArtifactDamageTest, WrongIdentifier) {
  std::string error = openDamaged([](auto &bytes) { std::memcpy(&bytes[8], "XXXX", 4); });
  EXPECT_EQ(error, prefix() + "not a dlm artifact (file identifier 'XXXX', expected 'DLM1')");

  error = openDamaged([](auto &bytes) {
    std::memcpy(&bytes[8],
                "\x7f"
                "EL\x02",
                4);
  });
  EXPECT_EQ(error,
            prefix() + "not a dlm artifact (file identifier '\\x7fEL\\x02', expected 'DLM1')");

  error = openDamaged([](auto &bytes) { bytes[11] = '2'; });
  EXPECT_EQ(error,
            prefix() + "artifact layout 'DLM2' is not supported by this runtime (it reads 'DLM1')");
}

TEST_F(ArtifactDamageTest, SafetensorsFileIsNotAnArtifact) {
  std::vector<uint8_t> safetensors = {0x10, 0, 0, 0, 0, 0, 0, 0};
  const std::string header = R"({"__metadata__":{}})";
  safetensors.insert(safetensors.end(), header.begin(), header.end());
  EXPECT_THAT(openBytes(safetensors), HasSubstr("not a dlm artifact (file identifier"));
}

// ---- Versions ----------------------------------------------------------------------------------

TEST_F(ArtifactDamageTest, NewerMajorVersion) {
  std::string error = openDamaged([](auto &bytes) {
    auto *version = testing::mutableRoot(bytes)->mutable_schema_version();
    version->mutate_major(2);
    version->mutate_minor(0);
  });
  EXPECT_EQ(error,
            prefix() + "artifact schema version 2.0 is newer than this runtime supports (1.x)");
}

TEST_F(ArtifactDamageTest, OlderMajorVersion) {
  std::string error = openDamaged([](auto &bytes) {
    auto *version = testing::mutableRoot(bytes)->mutable_schema_version();
    version->mutate_major(0);
    version->mutate_minor(9);
  });
  EXPECT_EQ(error,
            prefix() + "artifact schema version 0.9 is older than this runtime supports (1.x)");
}

// ---- Truncation --------------------------------------------------------------------------------

TEST_F(ArtifactDamageTest, TruncatedAtRepresentativePoints) {
  const size_t metadataEnd = testing::metadataEnd(good);
  const size_t sectionStart = root().weight_section_offset();
  const WeightView firstWeight = [&] {
    auto reader = ArtifactReader::open(scratch.file("good.dlm"));
    return *reader->findWeight("model.layers.0.self_attn.q_proj.weight");
  }();
  struct Cut {
    size_t size;
    std::string expected;
  };
  const std::string metadataTruncated = "truncated: the metadata needs " +
                                        std::to_string(metadataEnd) +
                                        " bytes but the file has only ";
  const std::string sectionTruncated = "truncated: the weight section ends at byte " +
                                       std::to_string(good.size()) + " but the file has only ";
  const std::vector<Cut> cuts = {
      {5, "too small to be a dlm artifact (5 bytes; the header alone takes 12)"},
      {11, "too small to be a dlm artifact (11 bytes"},
      {12, metadataTruncated + "12"},
      {40, metadataTruncated + "40"},
      {metadataEnd / 2, metadataTruncated},
      {metadataEnd - 1, metadataTruncated},
      {metadataEnd, sectionTruncated + std::to_string(metadataEnd)},
      {sectionStart, sectionTruncated},
      {sectionStart + 1, sectionTruncated},
      {firstWeight.fileOffset + firstWeight.size / 2, sectionTruncated},
      {good.size() - 1, sectionTruncated + std::to_string(good.size() - 1) + " bytes"},
  };
  for (const Cut &cut : cuts) {
    SCOPED_TRACE("cut at " + std::to_string(cut.size));
    ASSERT_LT(cut.size, good.size());
    std::vector<uint8_t> bytes(good.begin(), good.begin() + static_cast<long>(cut.size));
    EXPECT_THAT(openBytes(bytes), HasSubstr(cut.expected));
  }
}

TEST_F(ArtifactDamageTest, EveryTruncationIsAnError) {
  testing::PatchableFile file(scratch.file("cut.dlm"), good);
  for (size_t size = good.size(); size-- > 0;) {
    file.truncate(size);
    auto reader = ArtifactReader::open(file.path());
    ASSERT_FALSE(reader.isOk()) << "opened a file cut to " << size << " bytes";
    EXPECT_THAT(reader.status().message(),
                ::testing::AnyOf(HasSubstr("truncated: "), HasSubstr("too small"),
                                 HasSubstr("empty file")));
  }
}

TEST_F(ArtifactDamageTest, TrailingBytes) {
  std::string error = openDamaged([](auto &bytes) { bytes.resize(bytes.size() + 3, 0); });
  EXPECT_EQ(error, prefix() + "3 unexpected bytes after the weight section (which ends at byte " +
                       std::to_string(good.size()) + " of " + std::to_string(good.size() + 3) +
                       ")");
}

// ---- The weight section ----------------------------------------------------------------------

TEST_F(ArtifactDamageTest, WeightSectionMisaligned) {
  std::string error = openDamaged([](auto &bytes) {
    auto *root = testing::mutableRoot(bytes);
    root->mutate_weight_section_offset(root->weight_section_offset() + 4);
  });
  EXPECT_THAT(error, HasSubstr("not a multiple of 64"));
  EXPECT_THAT(error, HasSubstr("the weight section starts at byte"));
}

TEST_F(ArtifactDamageTest, WeightSectionInsideMetadata) {
  std::string error = openDamaged(
      [](auto &bytes) { testing::mutableRoot(bytes)->mutate_weight_section_offset(0); });
  EXPECT_EQ(error, prefix() +
                       "the weight section starts at byte 0, inside the metadata (which "
                       "ends at byte " +
                       std::to_string(testing::metadataEnd(good)) + ")");
}

TEST_F(ArtifactDamageTest, WeightSectionSizeOverflows) {
  std::string error = openDamaged(
      [](auto &bytes) { testing::mutableRoot(bytes)->mutate_weight_section_size(kUint64Max); });
  EXPECT_THAT(error, HasSubstr("ends past 2^64"));
}

// ---- Weight descriptors ----------------------------------------------------------------------

TEST_F(ArtifactDamageTest, WeightOffsetPastTheEnd) {
  const uint64_t sectionSize = root().weight_section_size();
  const uint64_t sectionStart = root().weight_section_offset();
  const uint64_t offset = (sectionSize + 63) / 64 * 64 + 64;
  std::string error =
      openDamaged([&](auto &bytes) { testing::mutableWeight(bytes, 2)->mutate_offset(offset); });
  EXPECT_EQ(error, prefix() + "weight 'model.norm.weight' (14 bytes at offset " +
                       std::to_string(offset) + " of the weight section) ends at byte " +
                       std::to_string(sectionStart + offset + 14) + ", past the end of the file (" +
                       std::to_string(good.size()) + " bytes)");
}

TEST_F(ArtifactDamageTest, WeightOffsetPlusSizeOverflows) {
  std::string error = openDamaged([](auto &bytes) {
    // A multiple of 64, so the alignment check passes and the overflow check is reached.
    testing::mutableWeight(bytes, 0)->mutate_offset(kUint64Max - 63);
  });
  EXPECT_THAT(error, HasSubstr("weight 'model.embed_tokens.weight' (64 bytes at offset " +
                               std::to_string(kUint64Max - 63) + " of the weight section)"));
  EXPECT_THAT(error, HasSubstr("offset + size overflows 64 bits"));
}

TEST_F(ArtifactDamageTest, HugeOffsetEndsPast2To64InTheMessage) {
  // offset + size fits in 64 bits, but adding the section start does not: still a clean message.
  std::string error = openDamaged(
      [](auto &bytes) { testing::mutableWeight(bytes, 2)->mutate_offset(kUint64Max - 127); });
  EXPECT_THAT(error, HasSubstr("past the end of the file"));
}

TEST_F(ArtifactDamageTest, OverlappingWeights) {
  std::string error = openDamaged([](auto &bytes) {
    testing::mutableWeight(bytes, 1)->mutate_offset(testing::mutableWeight(bytes, 0)->offset());
  });
  EXPECT_THAT(error, HasSubstr("weights 'model.embed_tokens.weight' (bytes "));
  EXPECT_THAT(error, HasSubstr("and 'model.layers.0.self_attn.q_proj.weight' (bytes "));
  EXPECT_THAT(error, HasSubstr(") overlap"));
}

TEST_F(ArtifactDamageTest, MisalignedWeight) {
  std::string error = openDamaged([](auto &bytes) {
    auto *weight = testing::mutableWeight(bytes, 0);
    weight->mutate_offset(weight->offset() + 8);
  });
  EXPECT_EQ(error, prefix() + "weight 'model.embed_tokens.weight' (64 bytes at offset 8 of the "
                              "weight section) is not 64-byte aligned");
}

TEST_F(ArtifactDamageTest, SizeNotMatchingShapeTimesDtype) {
  std::string error = openDamaged(
      [](auto &bytes) { testing::mutableWeight(bytes, 0)->mutable_shape()->Mutate(0, 9); });
  EXPECT_EQ(error, prefix() + "weight 'model.embed_tokens.weight' holds 64 bytes but shape [9, 4] "
                              "of bf16 needs 72");
  error = openDamaged([](auto &bytes) { testing::mutableWeight(bytes, 2)->mutate_byte_size(16); });
  EXPECT_EQ(error,
            prefix() + "weight 'model.norm.weight' holds 16 bytes but shape [7] of f16 needs 14");
}

TEST_F(ArtifactDamageTest, UnknownDtype) {
  std::string error = openDamaged(
      [](auto &bytes) { testing::mutableWeight(bytes, 2)->mutate_dtype(static_cast<DType>(200)); });
  EXPECT_EQ(error, prefix() + "weight 'model.norm.weight' has unknown dtype 200");
}

TEST_F(ArtifactDamageTest, NegativeDimension) {
  std::string error = openDamaged(
      [](auto &bytes) { testing::mutableWeight(bytes, 2)->mutable_shape()->Mutate(0, -7); });
  EXPECT_EQ(error, prefix() + "weight 'model.norm.weight' has a negative dimension in shape [-7]");
}

TEST_F(ArtifactDamageTest, ShapeWhoseByteSizeOverflows) {
  std::string error = openDamaged([](auto &bytes) {
    auto *shape = testing::mutableWeight(bytes, 0)->mutable_shape();
    shape->Mutate(0, int64_t{1} << 40);
    shape->Mutate(1, int64_t{1} << 40);
  });
  EXPECT_THAT(error, HasSubstr("weight 'model.embed_tokens.weight' has shape [1099511627776, "
                               "1099511627776] whose byte size does not fit in 64 bits"));
}

TEST_F(ArtifactDamageTest, DuplicateWeightName) {
  std::string error = openDamaged([](auto &bytes) {
    // Weight 4 ("model.scale") takes the name of weight 3 ("model.empty"): same length.
    auto *name = testing::mutableWeight(bytes, 4)->mutable_name();
    const auto *other = testing::mutableWeight(bytes, 3)->name();
    ASSERT_EQ(name->size(), other->size());
    std::memcpy(name->data(), other->data(), other->size());
  });
  EXPECT_EQ(error, prefix() + "weight 'model.empty' appears twice");
}

// ---- Other records -----------------------------------------------------------------------------

TEST_F(ArtifactDamageTest, UnknownAttentionMaskAndAttributeKind) {
  std::string error = openDamaged([](auto &bytes) {
    testing::mutableRoot(bytes)->mutable_config()->mutate_attention_mask(
        static_cast<AttentionMaskKind>(77));
  });
  EXPECT_EQ(error, prefix() + "the model config has unknown attention mask kind 77");

  error = openDamaged([](auto &bytes) {
    testing::mutableRoot(bytes)
        ->mutable_program()
        ->mutable_knobs()
        ->GetMutableObject(0)
        ->mutate_kind(static_cast<fb::AttributeKind>(9));
  });
  EXPECT_THAT(error, HasSubstr("the decoding program attribute 'block_length' has unknown kind 9"));
}

TEST_F(ArtifactDamageTest, DuplicateKernelTarget) {
  std::string error = openDamaged([](auto &bytes) {
    auto *targets = testing::mutableRoot(bytes)->mutable_kernel_targets();
    // "sm_80" -> "sm_90"
    targets->GetMutableObject(1)->mutable_target()->Mutate(3, '9');
  });
  EXPECT_EQ(error, prefix() + "kernel target 'sm_90' appears twice");
}

TEST(ArtifactDamage, MisalignedCubin) {
  // The cubin's vector offset moved forward by 4 bytes: the verifier reads its first 4 bytes as
  // the length (8) and accepts the vector, but it now starts 4 bytes past a 64-byte boundary.
  ScratchDirectory scratch;
  std::vector<uint8_t> cubin = {8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  ArtifactContents contents;
  contents.config.architecture = "Dream";
  contents.kernelTargets = {
      {"sm_90", {Kernel{"k", "matmul", ByteView{cubin.data(), cubin.size()}, {}, {}, {}, {}}}}};
  const std::string path = scratch.file("cubin.dlm");
  ASSERT_TRUE(writeArtifact(path, contents).isOk());
  std::vector<uint8_t> bytes = testing::readBytes(path);
  auto *kernel = testing::mutableRoot(bytes)
                     ->mutable_kernel_targets()
                     ->GetMutableObject(0)
                     ->mutable_kernels()
                     ->GetMutableObject(0);
  auto *table = reinterpret_cast<flatbuffers::Table *>(kernel);
  const auto field = table->GetOptionalFieldOffset(fb::Kernel::VT_CUBIN);
  ASSERT_NE(field, 0);
  uint8_t *slot = reinterpret_cast<uint8_t *>(kernel) + field;
  flatbuffers::WriteScalar<flatbuffers::uoffset_t>(
      slot, flatbuffers::ReadScalar<flatbuffers::uoffset_t>(slot) + 4);
  testing::writeBytes(path, bytes);
  auto reader = ArtifactReader::open(path);
  ASSERT_FALSE(reader.isOk());
  EXPECT_THAT(reader.status().message(),
              HasSubstr("kernel 'k' for target 'sm_90': cubin at byte "));
  EXPECT_THAT(reader.status().message(), HasSubstr("is not 64-byte aligned"));
}

// ---- Random damage -----------------------------------------------------------------------------

// Opens `bytes` and, if that succeeds, reads everything the reader hands out.
void openAndTouchEverything(const std::string &path, size_t &opened, size_t &rejected) {
  auto reader = ArtifactReader::open(path);
  if (!reader.isOk()) {
    ASSERT_FALSE(reader.status().message().empty());
    ++rejected;
    return;
  }
  ++opened;
  volatile uint64_t sink = reader->config().architecture.size() + reader->tokenizerJson().size() +
                           reader->program().mlir.size();
  for (const KernelTarget &target : reader->kernelTargets())
    for (const Kernel &kernel : target.kernels)
      sink = sink + std::accumulate(kernel.cubin.begin(), kernel.cubin.end(), uint64_t{0}) +
             kernel.ptx.size() +
             std::accumulate(kernel.source.begin(), kernel.source.end(), uint64_t{0});
  for (const WeightView &weight : reader->weights()) {
    const auto *data = static_cast<const uint8_t *>(weight.data);
    sink = sink + std::accumulate(data, data + weight.size, uint64_t{0}) + weight.shape.rank();
    // An empty tensor may have any other dimension, however large: read them, do not add them.
    for (int64_t dim : weight.shape)
      sink = sink ^ static_cast<uint64_t>(dim);
  }
  (void)sink;
}

TEST_F(ArtifactDamageTest, FlippingAnyMetadataByteNeverCrashes) {
  testing::PatchableFile file(scratch.file("flipped.dlm"), good);
  const size_t metadataEnd = testing::metadataEnd(good);
  size_t opened = 0, rejected = 0;
  for (size_t i = 0; i < metadataEnd; ++i) {
    for (uint8_t mask : {uint8_t{0xff}, uint8_t{0x01}, uint8_t{0x80}}) {
      file.setByte(i, good[i] ^ mask);
      openAndTouchEverything(file.path(), opened, rejected);
    }
    file.setByte(i, good[i]);
  }
  // Many bytes are text or numbers that any value suits; offsets and sizes are not.
  EXPECT_GT(rejected, metadataEnd / 8);
  EXPECT_GT(opened, 0u);
}

TEST_F(ArtifactDamageTest, RandomMultiByteDamageNeverCrashes) {
  testing::PatchableFile file(scratch.file("random.dlm"), good);
  const size_t metadataEnd = testing::metadataEnd(good);
  uint64_t state = 0x9e3779b97f4a7c15u; // fixed seed: the same damage every run
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  size_t opened = 0, rejected = 0;
  for (int round = 0; round < 1000; ++round) {
    size_t damaged[4];
    const size_t count = 1 + next() % 4;
    for (size_t d = 0; d < count; ++d) {
      damaged[d] = next() % metadataEnd;
      file.setByte(damaged[d], static_cast<uint8_t>(next()));
    }
    openAndTouchEverything(file.path(), opened, rejected);
    for (size_t d = 0; d < count; ++d)
      file.setByte(damaged[d], good[damaged[d]]);
  }
  EXPECT_EQ(opened + rejected, 1000u);
}

} // namespace
} // namespace dlm::artifact
