#include "runtime/artifact/ArtifactReader.h"

#include "runtime/artifact/ArtifactHash.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

namespace dlm::artifact {

// Weight shapes and cubins are handed out as raw pointers into the little-endian file.
static_assert(FLATBUFFERS_LITTLEENDIAN, "the artifact reader maps little-endian data in place");

namespace {

constexpr uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kSizePrefixBytes = sizeof(flatbuffers::uoffset_t);
// Size prefix, root table offset, file identifier.
constexpr uint64_t kHeaderBytes =
    kSizePrefixBytes + sizeof(flatbuffers::uoffset_t) + flatbuffers::kFileIdentifierLength;
constexpr uint64_t kIdentifierOffset = kHeaderBytes - flatbuffers::kFileIdentifierLength;

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

// The identifier as text, with bytes that are not printable ASCII escaped.
std::string identifierText(const uint8_t *bytes) {
  static const char *hex = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < flatbuffers::kFileIdentifierLength; ++i) {
    const uint8_t c = bytes[i];
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      text += static_cast<char>(c);
    } else {
      text += "\\x";
      text += hex[c >> 4];
      text += hex[c & 15];
    }
  }
  return text;
}

// Decimal text of a sum that may not fit in 64 bits (a damaged offset plus the section start).
std::string decimal(unsigned __int128 value) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  } while (value != 0);
  return digits;
}

std::string_view view(const flatbuffers::String *text) {
  return text ? std::string_view(text->c_str(), text->size()) : std::string_view();
}

// Vectors of 64-bit scalars are only 4-byte aligned as far as the verifier is concerned.
int64_t loadInt64(const uint8_t *bytes) {
  int64_t value;
  std::memcpy(&value, bytes, sizeof(value));
  return value;
}

Status readAttributes(const flatbuffers::Vector<flatbuffers::Offset<fb::Attribute>> *entries,
                      const std::string &owner, Attributes &attributes) {
  if (!entries)
    return Status::ok();
  for (const fb::Attribute *entry : *entries) {
    const std::string key(view(entry->key()));
    if (key.empty())
      return Status::error(owner + " has an attribute with an empty key");
    AttributeValue value;
    switch (entry->kind()) {
    case fb::AttributeKind::boolean:
      value = entry->bool_value();
      break;
    case fb::AttributeKind::integer:
      value = entry->int_value();
      break;
    case fb::AttributeKind::real:
      value = entry->real_value();
      break;
    case fb::AttributeKind::text:
      value = std::string(view(entry->text_value()));
      break;
    default:
      return Status::error(owner + " attribute " + quoted(key) + " has unknown kind " +
                           std::to_string(static_cast<unsigned>(entry->kind())));
    }
    if (!attributes.emplace(key, std::move(value)).second)
      return Status::error(owner + " has attribute " + quoted(key) + " twice");
  }
  return Status::ok();
}

} // namespace

// Fills an ArtifactReader step by step; each step trusts only what the previous ones checked.
class ArtifactReader::Loader {
public:
  explicit Loader(ArtifactReader &reader) : reader_(reader) {}

  Status load() {
    DLM_RETURN_IF_ERROR(mapFile());
    DLM_RETURN_IF_ERROR(checkHeader());
    DLM_RETURN_IF_ERROR(checkSchemaVersion());
    DLM_RETURN_IF_ERROR(verifyMetadata());
    DLM_RETURN_IF_ERROR(readConfig());
    DLM_RETURN_IF_ERROR(readProgram());
    DLM_RETURN_IF_ERROR(readKernels());
    DLM_RETURN_IF_ERROR(checkWeightSection());
    return readWeights();
  }

private:
  Status mapFile() {
    StatusOr<MappedFile> file = MappedFile::open(reader_.path_);
    if (!file)
      return file.status();
    fileSize_ = file->size();
    if (fileSize_ < kHeaderBytes) {
      if (fileSize_ == 0)
        return Status::error("empty file (0 bytes), not a dlm artifact");
      return Status::error("too small to be a dlm artifact (" + std::to_string(fileSize_) +
                           " bytes; the header alone takes " + std::to_string(kHeaderBytes) + ")");
    }
    reader_.file_ = std::move(*file);
    base_ = reader_.file_.data();
    return Status::ok();
  }

  Status checkHeader() {
    const uint8_t *identifier = base_ + kIdentifierOffset;
    const char *expected = fb::ArtifactIdentifier();
    if (std::memcmp(identifier, expected, flatbuffers::kFileIdentifierLength) != 0) {
      // Same family, other container layout: say so rather than "not a dlm artifact".
      if (std::memcmp(identifier, expected, flatbuffers::kFileIdentifierLength - 1) == 0)
        return Status::error("artifact layout '" + identifierText(identifier) +
                             "' is not supported by this runtime (it reads '" + expected + "')");
      return Status::error("not a dlm artifact (file identifier '" + identifierText(identifier) +
                           "', expected '" + expected + "')");
    }
    const uint64_t flatbufferSize = flatbuffers::ReadScalar<flatbuffers::uoffset_t>(base_);
    metadataEnd_ = kSizePrefixBytes + flatbufferSize;
    if (metadataEnd_ < kHeaderBytes)
      return Status::error("corrupt header: metadata size " + std::to_string(flatbufferSize) +
                           " is too small to hold a flatbuffer");
    if (metadataEnd_ > fileSize_)
      return Status::error("truncated: the metadata needs " + std::to_string(metadataEnd_) +
                           " bytes but the file has only " + std::to_string(fileSize_) + " bytes");
    if (metadataEnd_ >= FLATBUFFERS_MAX_BUFFER_SIZE)
      return Status::error("corrupt header: metadata size " + std::to_string(flatbufferSize) +
                           " exceeds the 2 GiB a flatbuffer can hold");
    return Status::ok();
  }

  // Reads only the version, verifying just the bytes on the way to it, so that an artifact of
  // another major version is reported as such instead of failing verification as "corrupt".
  Status checkSchemaVersion() {
    flatbuffers::Verifier verifier(base_, metadataEnd_);
    const flatbuffers::uoffset_t rootOffset = verifier.VerifyOffset(kSizePrefixBytes);
    if (rootOffset == 0)
      return Status::error("corrupt metadata: the root table offset is out of range");
    // Artifact derives privately from Table; the generic Table view reads one field.
    const auto *root =
        reinterpret_cast<const flatbuffers::Table *>(base_ + kSizePrefixBytes + rootOffset);
    if (!root->VerifyTableStart(verifier) ||
        !root->VerifyField<fb::SchemaVersion>(verifier, fb::Artifact::VT_SCHEMA_VERSION,
                                              alignof(fb::SchemaVersion)))
      return Status::error("corrupt metadata: the schema version cannot be read");
    const auto *version =
        root->GetStruct<const fb::SchemaVersion *>(fb::Artifact::VT_SCHEMA_VERSION);
    if (!version)
      return Status::error("corrupt metadata: no schema version");
    reader_.schemaVersion_ = {version->major(), version->minor()};
    const std::string versionText =
        std::to_string(version->major()) + "." + std::to_string(version->minor());
    const std::string supported = std::to_string(kSchemaMajor) + ".x";
    if (version->major() > kSchemaMajor)
      return Status::error("artifact schema version " + versionText +
                           " is newer than this runtime supports (" + supported + ")");
    if (version->major() < kSchemaMajor)
      return Status::error("artifact schema version " + versionText +
                           " is older than this runtime supports (" + supported + ")");
    return Status::ok();
  }

  Status verifyMetadata() {
    flatbuffers::Verifier verifier(base_, metadataEnd_);
    if (!fb::VerifySizePrefixedArtifactBuffer(verifier))
      return Status::error("corrupt metadata: the flatbuffer (bytes 0 to " +
                           std::to_string(metadataEnd_) + ") failed verification");
    root_ = fb::GetSizePrefixedArtifact(base_);
    reader_.producer_ = view(root_->producer());
    return readMetadataHash();
  }

  // Schema 1.4 records a hash of the metadata, stored inside it: remember where, to read those 8
  // bytes as zeros when verifying.
  Status readMetadataHash() {
    if (reader_.schemaVersion_.minor < kFirstMinorWithHashes)
      return Status::ok();
    const uint8_t *field = reinterpret_cast<const flatbuffers::Table *>(root_)->GetAddressOf(
        fb::Artifact::VT_METADATA_HASH);
    if (!field)
      return Status::error("corrupt metadata: schema " + std::to_string(kSchemaMajor) + "." +
                           std::to_string(reader_.schemaVersion_.minor) +
                           " records a metadata hash, but the field is missing");
    reader_.metadataHash_ = MetadataHash{root_->metadata_hash(), metadataEnd_,
                                         static_cast<uint64_t>(field - base_)};
    return Status::ok();
  }

  Status readConfig() {
    const fb::ModelConfig &from = *root_->config(); // required, so present after verification
    ModelConfig &config = reader_.config_;
    config.architecture = std::string(view(from.architecture()));
    config.vocabSize = from.vocab_size();
    config.embeddingSize = from.embedding_size();
    config.hiddenSize = from.hidden_size();
    config.numLayers = from.num_layers();
    config.numHeads = from.num_heads();
    config.numKvHeads = from.num_kv_heads();
    config.headDim = from.head_dim();
    config.intermediateSize = from.intermediate_size();
    config.ropeTheta = from.rope_theta();
    config.rmsNormEps = from.rms_norm_eps();
    config.maskTokenId = from.mask_token_id();
    config.bosTokenId = from.bos_token_id();
    if (const auto *eos = from.eos_token_ids()) {
      const auto *bytes = reinterpret_cast<const uint8_t *>(eos->data());
      for (size_t i = 0; i < eos->size(); ++i)
        config.eosTokenIds.push_back(loadInt64(bytes + i * sizeof(int64_t)));
    }
    config.padTokenId = from.pad_token_id();
    config.maxPositions = from.max_positions();
    config.tiedEmbeddings = from.tied_embeddings();
    config.attentionMask = from.attention_mask();
    if (std::string_view(fb::EnumNameAttentionMaskKind(config.attentionMask)).empty())
      return Status::error("the model config has unknown attention mask kind " +
                           std::to_string(static_cast<unsigned>(config.attentionMask)));
    return readAttributes(from.extra(), "the model config", config.extra);
  }

  Status readProgram() {
    if (const fb::Tokenizer *tokenizer = root_->tokenizer()) {
      reader_.tokenizerJson_ = view(tokenizer->json());
      if (tokenizer->chat_template())
        reader_.chatTemplate_ = view(tokenizer->chat_template());
      DLM_RETURN_IF_ERROR(readAttributes(tokenizer->special_tokens(), "the chat special tokens",
                                         reader_.chatSpecialTokens_));
      for (const auto &[name, value] : reader_.chatSpecialTokens_)
        if (!std::holds_alternative<std::string>(value))
          return Status::error("chat special token " + quoted(name) + " is not text");
    }
    const fb::DecodingProgram *from = root_->program();
    if (!from)
      return Status::ok();
    DLM_RETURN_IF_ERROR(readDecodingProgram(*from, "the decoding program", reader_.program_));
    if (const auto *programs = root_->decode_programs()) {
      for (flatbuffers::uoffset_t i = 0; i < programs->size(); ++i) {
        DecodingProgram program;
        DLM_RETURN_IF_ERROR(readDecodingProgram(
            *programs->Get(i), "decode program " + std::to_string(i), program));
        reader_.decodePrograms_.push_back(std::move(program));
      }
    }
    return Status::ok();
  }

  Status readDecodingProgram(const fb::DecodingProgram &from, const std::string &owner,
                             DecodingProgram &program) {
    program.policy = std::string(view(from.policy()));
    program.mlir = view(from.mlir());
    DLM_RETURN_IF_ERROR(readAttributes(from.knobs(), owner, program.knobs));
    if (const auto *ops = from.ops()) {
      for (flatbuffers::uoffset_t i = 0; i < ops->size(); ++i) {
        const fb::DecodeOp &op = *ops->Get(i);
        DecodeOp record;
        record.kind = std::string(view(op.kind()));
        record.name = std::string(view(op.name()));
        DLM_RETURN_IF_ERROR(readAttributes(op.parameters(), owner + " record " +
                                               std::to_string(i), record.parameters));
        program.ops.push_back(std::move(record));
      }
    }
    return Status::ok();
  }

  Status readKernels() {
    const auto *targets = root_->kernel_targets();
    if (!targets)
      return Status::ok();
    std::set<std::string_view> targetNames;
    for (const fb::KernelTarget *from : *targets) {
      KernelTarget target;
      target.target = std::string(view(from->target()));
      if (target.target.empty())
        return Status::error("a kernel target has an empty name");
      if (!targetNames.insert(view(from->target())).second)
        return Status::error("kernel target " + quoted(target.target) + " appears twice");
      if (const auto *kernels = from->kernels()) {
        std::set<std::string_view> kernelNames;
        for (const fb::Kernel *kernel : *kernels) {
          DLM_RETURN_IF_ERROR(readKernel(*kernel, target, kernelNames));
        }
      }
      reader_.kernelTargets_.push_back(std::move(target));
    }
    return Status::ok();
  }

  Status readKernel(const fb::Kernel &from, KernelTarget &target,
                    std::set<std::string_view> &kernelNames) {
    Kernel kernel;
    kernel.name = std::string(view(from.name()));
    const std::string item =
        "kernel " + quoted(kernel.name) + " for target " + quoted(target.target);
    if (kernel.name.empty())
      return Status::error("a kernel for target " + quoted(target.target) + " has an empty name");
    if (!kernelNames.insert(view(from.name())).second)
      return Status::error(item + " appears twice");
    kernel.kind = std::string(view(from.kind()));
    if (const auto *cubin = from.cubin(); cubin && cubin->size() > 0) {
      const uint64_t offset = static_cast<uint64_t>(cubin->data() - base_);
      if (offset % kWeightAlignment != 0)
        return Status::error(item + ": cubin at byte " + std::to_string(offset) + " is not " +
                             std::to_string(kWeightAlignment) + "-byte aligned");
      kernel.cubin = ByteView{cubin->data(), cubin->size()};
    }
    kernel.ptx = view(from.ptx());
    kernel.source = view(from.source());
    if (const fb::KernelResources *resources = from.resources()) {
      kernel.resources.registers = resources->registers();
      kernel.resources.spillStoreBytes = resources->spill_store_bytes();
      kernel.resources.spillLoadBytes = resources->spill_load_bytes();
      kernel.resources.stackBytes = resources->stack_bytes();
      kernel.resources.sharedMemoryBytes = resources->shared_memory_bytes();
    }
    DLM_RETURN_IF_ERROR(readAttributes(from.parameters(), item, kernel.parameters));
    target.kernels.push_back(std::move(kernel));
    return Status::ok();
  }

  Status checkWeightSection() {
    sectionStart_ = root_->weight_section_offset();
    sectionSize_ = root_->weight_section_size();
    const std::string start = std::to_string(sectionStart_);
    if (sectionStart_ % kWeightAlignment != 0)
      return Status::error("the weight section starts at byte " + start + ", not a multiple of " +
                           std::to_string(kWeightAlignment));
    if (sectionStart_ < metadataEnd_)
      return Status::error("the weight section starts at byte " + start +
                           ", inside the metadata (which ends at byte " +
                           std::to_string(metadataEnd_) + ")");
    if (sectionSize_ > kUint64Max - sectionStart_)
      return Status::error("the weight section (" + std::to_string(sectionSize_) +
                           " bytes at byte " + start + ") ends past 2^64");
    const uint64_t sectionEnd = sectionStart_ + sectionSize_;
    if (sectionEnd > fileSize_)
      return Status::error("truncated: the weight section ends at byte " +
                           std::to_string(sectionEnd) + " but the file has only " +
                           std::to_string(fileSize_) + " bytes");
    // The writer ends the file with the section; anything after it means the file is not
    // what the metadata describes.
    if (sectionEnd < fileSize_)
      return Status::error(std::to_string(fileSize_ - sectionEnd) +
                           " unexpected bytes after the weight section (which ends at byte " +
                           std::to_string(sectionEnd) + " of " + std::to_string(fileSize_) + ")");
    return Status::ok();
  }

  Status readWeights() {
    const auto *weights = root_->weights();
    if (!weights)
      return Status::ok();
    std::vector<WeightView> &views = reader_.weights_;
    views.reserve(weights->size());
    for (size_t i = 0; i < weights->size(); ++i) {
      WeightView weight;
      DLM_RETURN_IF_ERROR(
          readWeight(*weights->Get(static_cast<flatbuffers::uoffset_t>(i)), i, weight));
      if (!reader_.weightIndex_.emplace(weight.name, views.size()).second)
        return Status::error("weight " + quoted(weight.name) + " appears twice");
      views.push_back(weight);
    }
    return checkOverlaps();
  }

  Status readWeight(const fb::Weight &from, size_t index, WeightView &weight) {
    weight.name = view(from.name());
    if (weight.name.empty())
      return Status::error("weight #" + std::to_string(index) + " has an empty name");
    const std::string item = "weight " + quoted(weight.name);
    weight.dtype = from.dtype();
    if (const auto *shape = from.shape()) {
      // flatbuffers leaves an empty vector (a scalar's shape) unaligned: nothing is read from it.
      if (shape->size() && reinterpret_cast<uintptr_t>(shape->data()) % alignof(int64_t) != 0)
        return Status::error(item + ": corrupt metadata: the shape is misaligned");
      weight.shape = ShapeView(shape->data(), shape->size());
    }
    weight.size = from.byte_size();
    weight.contentHash = from.content_hash();
    DLM_RETURN_IF_ERROR(checkWeightByteSize(weight.name, weight.dtype, weight.shape, weight.size));

    const uint64_t offset = from.offset();
    const std::string where = std::to_string(weight.size) + " bytes at offset " +
                              std::to_string(offset) + " of the weight section";
    if (offset % kWeightAlignment != 0)
      return Status::error(item + " (" + where + ") is not " + std::to_string(kWeightAlignment) +
                           "-byte aligned");
    if (weight.size > kUint64Max - offset)
      return Status::error(item + " (" + where + "): offset + size overflows 64 bits");
    if (offset + weight.size > sectionSize_)
      return Status::error(
          item + " (" + where + ") ends at byte " +
          decimal(static_cast<unsigned __int128>(sectionStart_) + offset + weight.size) +
          ", past the end of the file (" + std::to_string(fileSize_) + " bytes)");
    weight.fileOffset = sectionStart_ + offset;
    weight.data = base_ + weight.fileOffset;
    return Status::ok();
  }

  Status checkOverlaps() const {
    std::vector<const WeightView *> byOffset;
    for (const WeightView &weight : reader_.weights_)
      if (weight.size > 0) // an empty tensor occupies no bytes, wherever it points
        byOffset.push_back(&weight);
    std::sort(byOffset.begin(), byOffset.end(), [](const WeightView *a, const WeightView *b) {
      return a->fileOffset < b->fileOffset;
    });
    auto range = [](const WeightView &weight) {
      return "bytes " + std::to_string(weight.fileOffset) + " to " +
             std::to_string(weight.fileOffset + weight.size);
    };
    for (size_t i = 1; i < byOffset.size(); ++i) {
      const WeightView &previous = *byOffset[i - 1], &next = *byOffset[i];
      if (next.fileOffset < previous.fileOffset + previous.size)
        return Status::error("weights " + quoted(previous.name) + " (" + range(previous) +
                             ") and " + quoted(next.name) + " (" + range(next) + ") overlap");
    }
    return Status::ok();
  }

  ArtifactReader &reader_;
  const uint8_t *base_ = nullptr;
  uint64_t fileSize_ = 0;
  uint64_t metadataEnd_ = 0;
  const fb::Artifact *root_ = nullptr;
  uint64_t sectionStart_ = 0;
  uint64_t sectionSize_ = 0;
};

StatusOr<ArtifactReader> ArtifactReader::open(const std::string &path) {
  ArtifactReader reader;
  reader.path_ = path;
  Status status = Loader(reader).load();
  if (!status.isOk())
    return status.withContext("artifact " + quoted(path));
  return std::move(reader);
}

ArtifactReader::ArtifactReader(ArtifactReader &&other) noexcept { *this = std::move(other); }

ArtifactReader &ArtifactReader::operator=(ArtifactReader &&other) noexcept {
  if (this == &other)
    return *this;
  path_ = std::move(other.path_);
  file_ = std::move(other.file_);
  schemaVersion_ = other.schemaVersion_;
  producer_ = other.producer_;
  config_ = std::move(other.config_);
  tokenizerJson_ = other.tokenizerJson_;
  chatTemplate_ = other.chatTemplate_;
  chatSpecialTokens_ = std::move(other.chatSpecialTokens_);
  program_ = std::move(other.program_);
  decodePrograms_ = std::move(other.decodePrograms_);
  kernelTargets_ = std::move(other.kernelTargets_);
  weights_ = std::move(other.weights_);
  weightIndex_ = std::move(other.weightIndex_);
  metadataHash_ = other.metadataHash_;
  return *this;
}

ArtifactReader::~ArtifactReader() = default;

const KernelTarget *ArtifactReader::findKernelTarget(std::string_view target) const {
  for (const KernelTarget &candidate : kernelTargets_)
    if (candidate.target == target)
      return &candidate;
  return nullptr;
}

const WeightView *ArtifactReader::findWeight(std::string_view name) const {
  auto it = weightIndex_.find(name);
  return it == weightIndex_.end() ? nullptr : &weights_[it->second];
}

Status ArtifactReader::verifyIntegrity() const {
  const std::string artifact = "artifact " + quoted(path_);
  if (!metadataHash_)
    return Status::error(artifact + ": schema " + std::to_string(schemaVersion_.major) + "." +
                         std::to_string(schemaVersion_.minor) +
                         " records no integrity hashes (they begin with 1.4); recompile it with "
                         "this dlmc to have them");
  auto hex = [](uint64_t value) {
    char text[19];
    std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
    return std::string(text);
  };
  std::vector<std::string> damaged;
  auto check = [&](const std::string &section, uint64_t begin, uint64_t end, uint64_t actual,
                   uint64_t recorded) {
    if (actual != recorded)
      damaged.push_back(section + " (bytes " + std::to_string(begin) + " to " +
                        std::to_string(end) + ") hashes to " + hex(actual) + ", dlmc recorded " +
                        hex(recorded));
  };
  const uint8_t *base = file_.data();
  // The hashes first, under the guard (it leaves by siglongjmp: nothing there may own memory),
  // then the comparison.
  std::vector<uint64_t> actual(weights_.size() + 1);
  DLM_RETURN_IF_ERROR(guardedRead([&] {
    actual[0] = hashMetadata(base, metadataHash_->size, metadataHash_->fieldOffset);
    for (size_t i = 0; i < weights_.size(); ++i)
      actual[i + 1] = hashBytes(weights_[i].data, weights_[i].size);
  }));
  check("the metadata", 0, metadataHash_->size, actual[0], metadataHash_->recorded);
  for (size_t i = 0; i < weights_.size(); ++i) {
    const WeightView &weight = weights_[i];
    check("weight " + quoted(weight.name), weight.fileOffset, weight.fileOffset + weight.size,
          actual[i + 1], weight.contentHash);
  }
  if (damaged.empty())
    return Status::ok();
  constexpr size_t kNamed = 8;
  std::string list;
  for (size_t i = 0; i < std::min(damaged.size(), kNamed); ++i)
    list += (i ? "; " : "") + damaged[i];
  if (damaged.size() > kNamed)
    list += "; and " + std::to_string(damaged.size() - kNamed) + " more";
  return Status::error(artifact + ": damaged: " + list);
}

Status ArtifactReader::guardedRead(const std::function<void()> &read) const {
  return file_.guardedRead(read).withContext("artifact " + quoted(path_));
}

StatusOr<WeightView> ArtifactReader::weight(std::string_view name) const {
  if (const WeightView *found = findWeight(name))
    return *found;
  return Status::error("artifact " + quoted(path_) + ": no weight named " + quoted(name));
}

} // namespace dlm::artifact
