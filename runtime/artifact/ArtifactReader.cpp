#include "runtime/artifact/ArtifactReader.h"

#include "runtime/artifact/ExternalWeights.h"
#include "runtime/artifact/ParameterFilePath.h"

#include <cstring>
#include <set>

namespace dlm::artifact {

// Cubins are handed out as raw pointers into the little-endian file.
static_assert(FLATBUFFERS_LITTLEENDIAN, "the artifact reader maps little-endian data in place");

namespace {

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
      return Status::error(owner + " attribute " + quotedName(key) + " has unknown kind " +
                           std::to_string(static_cast<unsigned>(entry->kind())));
    }
    if (!attributes.emplace(key, std::move(value)).second)
      return Status::error(owner + " has attribute " + quotedName(key) + " twice");
  }
  return Status::ok();
}

} // namespace

// Fills an ArtifactReader step by step; each step trusts only what the previous ones checked.
class ArtifactReader::Loader {
public:
  explicit Loader(ArtifactReader &reader) : reader_(reader) {}

  Status load() {
    DLM_RETURN_IF_ERROR(reader_.container_.open(reader_.path_, kArtifactContainer));
    base_ = reader_.container_.data();
    DLM_RETURN_IF_ERROR(verifyMetadata());
    DLM_RETURN_IF_ERROR(readConfig());
    DLM_RETURN_IF_ERROR(readProgram());
    DLM_RETURN_IF_ERROR(readKernels());
    const fb::ExternalParameters *parameters = root_->parameters();
    // With a parameter file the descriptors' offsets are into its weight section, not this one's.
    DLM_RETURN_IF_ERROR(reader_.container_.readWeightIndex(
        *reinterpret_cast<const flatbuffers::Table *>(root_), /*withWeights=*/!parameters));
    return parameters ? openParameterFile(*parameters) : Status::ok();
  }

private:
  Status verifyMetadata() {
    const uint64_t metadataEnd = reader_.container_.metadataEnd();
    flatbuffers::Verifier verifier(base_, metadataEnd);
    if (!fb::VerifySizePrefixedArtifactBuffer(verifier))
      return Status::error("corrupt metadata: the flatbuffer (bytes 0 to " +
                           std::to_string(metadataEnd) + ") failed verification");
    root_ = fb::GetSizePrefixedArtifact(base_);
    reader_.producer_ = view(root_->producer());
    return Status::ok();
  }

  // Schema 1.5: the weights' bytes are in the parameter file the artifact names.
  Status openParameterFile(const fb::ExternalParameters &record) {
    const std::string_view recorded = view(record.path());
    if (recorded.empty())
      return Status::error("corrupt metadata: the parameter file's path is empty");
    reader_.parameterRecord_ = ParameterFileRecordView{recorded, record.weight_section_size(),
                                                       record.metadata_hash(),
                                                       record.random_seed()};
    StatusOr<ParameterFileReader> file = ParameterFileReader::open(
        resolveParameterFilePath(reader_.path_, std::string(recorded)));
    if (!file && record.random_seed() >= 0)
      // dlmc wrote no such file: say who writes it.
      return Status::error(file.status().message() + " (the weights are random, seed " +
                           std::to_string(record.random_seed()) +
                           ": write the parameter file with dlm-params random " +
                           reader_.path_ + ")");
    if (!file)
      return file.status();
    if (reader_.container_.weightSectionSize() != 0)
      return Status::error("the weights live in parameter file " + quotedName(file->path()) +
                           ", yet the artifact has a weight section of " +
                           std::to_string(reader_.container_.weightSectionSize()) + " bytes");
    reader_.parameterFile_ = std::make_unique<ParameterFileReader>(std::move(*file));
    return bindExternalWeights(root_->weights(), record.random_seed(), *reader_.parameterFile_,
                               reader_.externalWeights_, reader_.externalIndex_);
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
          return Status::error("chat special token " + quotedName(name) + " is not text");
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
        return Status::error("kernel target " + quotedName(target.target) + " appears twice");
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
        "kernel " + quotedName(kernel.name) + " for target " + quotedName(target.target);
    if (kernel.name.empty())
      return Status::error("a kernel for target " + quotedName(target.target) + " has an empty name");
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

  ArtifactReader &reader_;
  const uint8_t *base_ = nullptr;
  const fb::Artifact *root_ = nullptr;
};

StatusOr<ArtifactReader> ArtifactReader::open(const std::string &path) {
  ArtifactReader reader;
  reader.path_ = path;
  Status status = Loader(reader).load();
  if (!status.isOk())
    return status.withContext("artifact " + quotedName(path));
  return std::move(reader);
}

ArtifactReader::ArtifactReader(ArtifactReader &&other) noexcept { *this = std::move(other); }

ArtifactReader &ArtifactReader::operator=(ArtifactReader &&other) noexcept {
  if (this == &other)
    return *this;
  path_ = std::move(other.path_);
  container_ = std::move(other.container_);
  parameterRecord_ = other.parameterRecord_;
  parameterFile_ = std::move(other.parameterFile_);
  producer_ = other.producer_;
  config_ = std::move(other.config_);
  tokenizerJson_ = other.tokenizerJson_;
  chatTemplate_ = other.chatTemplate_;
  chatSpecialTokens_ = std::move(other.chatSpecialTokens_);
  program_ = std::move(other.program_);
  decodePrograms_ = std::move(other.decodePrograms_);
  kernelTargets_ = std::move(other.kernelTargets_);
  externalWeights_ = std::move(other.externalWeights_);
  externalIndex_ = std::move(other.externalIndex_);
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
  if (!parameterFile_)
    return container_.findWeight(name);
  auto it = externalIndex_.find(name);
  return it == externalIndex_.end() ? nullptr : &externalWeights_[it->second];
}

std::optional<uint64_t> ArtifactReader::randomWeightSeed() const {
  if (!parameterRecord_ || parameterRecord_->randomSeed < 0)
    return std::nullopt;
  return static_cast<uint64_t>(parameterRecord_->randomSeed);
}

StatusOr<WeightView> ArtifactReader::weight(std::string_view name) const {
  if (const WeightView *found = findWeight(name))
    return *found;
  return Status::error("artifact " + quotedName(path_) + ": no weight named " + quotedName(name));
}

Status ArtifactReader::verifyIntegrity() const {
  const std::string artifact = "artifact " + quotedName(path_);
  if (!container_.hasIntegrityHashes()) {
    const SchemaVersion version = container_.schemaVersion();
    return Status::error(artifact + ": schema " + std::to_string(version.major) + "." +
                         std::to_string(version.minor) +
                         " records no integrity hashes (they begin with 1.4); recompile it with "
                         "this dlmc to have them");
  }
  StatusOr<std::vector<std::string>> damaged = container_.damagedSections();
  if (!damaged)
    return damaged.status().withContext(artifact);
  std::vector<std::string> problems;
  if (!damaged->empty())
    problems.push_back(artifact + ": damaged: " + listDamage(*damaged));
  if (parameterFile_)
    if (Status parameters = parameterFile_->verifyIntegrity(); !parameters)
      problems.push_back(parameters.withContext(artifact).message());
  if (problems.empty())
    return Status::ok();
  return Status::error(problems.size() == 1 ? problems[0] : problems[0] + "; " + problems[1]);
}

// With a parameter file the read may touch either mapping: the parameter file's guard runs inside
// the artifact's, and a fault in the artifact's mapping reaches the outer guard
// (MappedFile::guardedRead looks through the guards a thread has open).
Status ArtifactReader::guardedRead(const std::function<void()> &read) const {
  const std::string artifact = "artifact " + quotedName(path_);
  if (!parameterFile_)
    return container_.guardedRead(read).withContext(artifact);
  Status parameters = Status::ok();
  const Status own = container_.guardedRead([&] { parameters = parameterFile_->guardedRead(read); });
  if (!own)
    return own.withContext(artifact);
  return parameters.withContext(artifact);
}

} // namespace dlm::artifact
