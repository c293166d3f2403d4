#include "runtime/artifact/ArtifactWriter.h"

#include "runtime/artifact/ArtifactHash.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace dlm::artifact {
namespace {

constexpr uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();
// The flatbuffer, its size prefix and slack for our estimate's error must stay under the 2 GiB
// flatbuffers can address; past it the builder aborts (or, with NDEBUG, emits garbage).
constexpr uint64_t kMaxMetadataBytes = FLATBUFFERS_MAX_BUFFER_SIZE - (uint64_t{1} << 24);

uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

uint64_t saturatingAdd(uint64_t a, uint64_t b) { return a > kUint64Max - b ? kUint64Max : a + b; }

// ---- Checking the contents -------------------------------------------------------------------

Status checkAttributes(const Attributes &attributes, const std::string &owner) {
  if (attributes.count(""))
    return Status::error(owner + " has an attribute with an empty key");
  return Status::ok();
}

Status checkKernels(const std::vector<KernelTarget> &targets) {
  std::set<std::string_view> targetNames;
  for (const KernelTarget &target : targets) {
    if (target.target.empty())
      return Status::error("a kernel target has an empty name");
    if (!targetNames.insert(target.target).second)
      return Status::error("kernel target '" + target.target + "' appears twice");
    std::set<std::string_view> kernelNames;
    for (const Kernel &kernel : target.kernels) {
      const std::string item = "kernel '" + kernel.name + "' for target '" + target.target + "'";
      if (kernel.name.empty())
        return Status::error("a kernel for target '" + target.target + "' has an empty name");
      if (!kernelNames.insert(kernel.name).second)
        return Status::error(item + " appears twice");
      if (kernel.cubin.size && !kernel.cubin.data)
        return Status::error(item + " has a cubin size but no data");
      DLM_RETURN_IF_ERROR(checkAttributes(kernel.parameters, item));
    }
  }
  return Status::ok();
}

Status checkWeights(const std::vector<WeightSource> &weights) {
  std::set<std::string_view> names;
  for (const WeightSource &weight : weights) {
    if (weight.name.empty())
      return Status::error("a weight has an empty name");
    if (!names.insert(weight.name).second)
      return Status::error("weight '" + weight.name + "' appears twice");
    DLM_RETURN_IF_ERROR(
        checkWeightByteSize(weight.name, weight.dtype, ShapeView(weight.shape), weight.size));
    if (weight.size && !weight.data)
      return Status::error("weight '" + weight.name + "' has " + std::to_string(weight.size) +
                           " bytes but no data");
  }
  return Status::ok();
}

// Unique non-empty policy names (a request selects a program by it, '_' matching '-'), records
// with a kind.
Status checkDecodePrograms(const std::vector<DecodingProgram> &programs) {
  std::set<std::string> names;
  for (const DecodingProgram &program : programs) {
    if (program.policy.empty())
      return Status::error("a decode program has no policy name");
    std::string selected = program.policy;
    std::replace(selected.begin(), selected.end(), '_', '-');
    if (!names.insert(selected).second)
      return Status::error("two decode programs are named '" + program.policy + "'");
    const std::string what = "decode program '" + program.policy + "'";
    DLM_RETURN_IF_ERROR(checkAttributes(program.knobs, what));
    for (size_t i = 0; i < program.ops.size(); ++i) {
      if (program.ops[i].kind.empty())
        return Status::error(what + ": record " + std::to_string(i) + " has no kind");
      DLM_RETURN_IF_ERROR(checkAttributes(program.ops[i].parameters,
                                          what + " record " + std::to_string(i)));
    }
  }
  return Status::ok();
}

Status checkContents(const ArtifactContents &contents) {
  if (contents.config.architecture.empty())
    return Status::error("the model config has no architecture name");
  if (std::string_view(fb::EnumNameAttentionMaskKind(contents.config.attentionMask)).empty())
    return Status::error("the model config has unknown attention mask kind " +
                         std::to_string(static_cast<unsigned>(contents.config.attentionMask)));
  DLM_RETURN_IF_ERROR(checkAttributes(contents.config.extra, "the model config"));
  DLM_RETURN_IF_ERROR(checkAttributes(contents.chatSpecialTokens, "the chat special tokens"));
  for (const auto &[name, value] : contents.chatSpecialTokens)
    if (!std::holds_alternative<std::string>(value))
      return Status::error("chat special token '" + name + "' is not text");
  DLM_RETURN_IF_ERROR(checkAttributes(contents.program.knobs, "the decoding program"));
  DLM_RETURN_IF_ERROR(checkDecodePrograms(contents.decodePrograms));
  DLM_RETURN_IF_ERROR(checkKernels(contents.kernelTargets));
  return checkWeights(contents.weights);
}

// An upper bound on the flatbuffer's size, computed before building it, because the builder
// cannot report running out of its 2 GiB: it asserts.
uint64_t estimateMetadataBytes(const ArtifactContents &contents) {
  // Per item: length prefix, terminator, alignment padding, vtable and table fields.
  constexpr uint64_t kItemOverhead = 256;
  uint64_t total = 4096;
  auto add = [&](uint64_t bytes) {
    total = saturatingAdd(total, saturatingAdd(bytes, kItemOverhead));
  };
  auto addAttributes = [&](const Attributes &attributes) {
    for (const auto &[key, value] : attributes) {
      add(key.size());
      if (const auto *text = std::get_if<std::string>(&value))
        add(text->size());
    }
  };
  add(contents.producer.size());
  add(contents.config.architecture.size() + 8 * contents.config.eosTokenIds.size());
  addAttributes(contents.config.extra);
  add(contents.tokenizerJson.size());
  if (contents.chatTemplate)
    add(contents.chatTemplate->size());
  addAttributes(contents.chatSpecialTokens);
  add(contents.program.policy.size());
  add(contents.program.mlir.size());
  addAttributes(contents.program.knobs);
  for (const DecodingProgram &program : contents.decodePrograms) {
    add(program.policy.size());
    add(program.mlir.size());
    addAttributes(program.knobs);
    for (const DecodeOp &op : program.ops) {
      add(op.kind.size() + op.name.size());
      addAttributes(op.parameters);
    }
  }
  for (const KernelTarget &target : contents.kernelTargets) {
    add(target.target.size());
    for (const Kernel &kernel : target.kernels) {
      add(kernel.name.size() + kernel.kind.size());
      add(kernel.cubin.size);
      add(kernel.ptx.size());
      add(kernel.source.size());
      add(0); // resources
      addAttributes(kernel.parameters);
    }
  }
  for (const WeightSource &weight : contents.weights)
    add(weight.name.size() + 8 * weight.shape.size());
  return total;
}

// ---- Building the flatbuffer -----------------------------------------------------------------

using AttributeVector =
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Attribute>>>;

flatbuffers::Offset<flatbuffers::String> createString(flatbuffers::FlatBufferBuilder &builder,
                                                      std::string_view text) {
  return builder.CreateString(text.data(), text.size());
}

AttributeVector createAttributes(flatbuffers::FlatBufferBuilder &builder,
                                 const Attributes &attributes) {
  std::vector<flatbuffers::Offset<fb::Attribute>> entries;
  entries.reserve(attributes.size());
  for (const auto &[key, value] : attributes) {
    auto keyOffset = createString(builder, key);
    flatbuffers::Offset<flatbuffers::String> textOffset;
    fb::AttributeKind kind = fb::AttributeKind::none;
    bool boolValue = false;
    int64_t intValue = 0;
    double realValue = 0;
    if (const auto *b = std::get_if<bool>(&value)) {
      kind = fb::AttributeKind::boolean;
      boolValue = *b;
    } else if (const auto *i = std::get_if<int64_t>(&value)) {
      kind = fb::AttributeKind::integer;
      intValue = *i;
    } else if (const auto *r = std::get_if<double>(&value)) {
      kind = fb::AttributeKind::real;
      realValue = *r;
    } else {
      kind = fb::AttributeKind::text;
      textOffset = createString(builder, std::get<std::string>(value));
    }
    entries.push_back(
        fb::CreateAttribute(builder, keyOffset, kind, boolValue, intValue, realValue, textOffset));
  }
  return builder.CreateVector(entries);
}

flatbuffers::Offset<fb::ModelConfig> createConfig(flatbuffers::FlatBufferBuilder &builder,
                                                  const ModelConfig &config) {
  auto architecture = createString(builder, config.architecture);
  auto eosTokenIds = builder.CreateVector(config.eosTokenIds);
  auto extra = createAttributes(builder, config.extra);
  return fb::CreateModelConfig(
      builder, architecture, config.vocabSize, config.embeddingSize, config.hiddenSize,
      config.numLayers, config.numHeads, config.numKvHeads, config.headDim, config.intermediateSize,
      config.ropeTheta, config.rmsNormEps, config.maskTokenId, config.bosTokenId, eosTokenIds,
      config.padTokenId, config.maxPositions, config.tiedEmbeddings, config.attentionMask, extra);
}

flatbuffers::Offset<fb::Kernel> createKernel(flatbuffers::FlatBufferBuilder &builder,
                                             const Kernel &kernel) {
  auto name = createString(builder, kernel.name);
  auto kind = createString(builder, kernel.kind);
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> cubin;
  if (!kernel.cubin.empty()) {
    // The schema's force_align only takes effect through this call.
    builder.ForceVectorAlignment(kernel.cubin.size, sizeof(uint8_t), kWeightAlignment);
    cubin = builder.CreateVector(kernel.cubin.data, kernel.cubin.size);
  }
  flatbuffers::Offset<flatbuffers::String> ptx;
  if (!kernel.ptx.empty())
    ptx = createString(builder, kernel.ptx);
  const KernelResources &r = kernel.resources;
  auto resources = fb::CreateKernelResources(builder, r.registers, r.spillStoreBytes,
                                             r.spillLoadBytes, r.stackBytes, r.sharedMemoryBytes);
  auto parameters = createAttributes(builder, kernel.parameters);
  flatbuffers::Offset<flatbuffers::String> source;
  if (!kernel.source.empty())
    source = createString(builder, kernel.source);
  return fb::CreateKernel(builder, name, kind, cubin, ptx, resources, parameters, source);
}

flatbuffers::Offset<fb::DecodingProgram>
createDecodingProgram(flatbuffers::FlatBufferBuilder &builder, const DecodingProgram &program) {
  std::vector<flatbuffers::Offset<fb::DecodeOp>> ops;
  for (const DecodeOp &op : program.ops)
    ops.push_back(fb::CreateDecodeOp(builder, createString(builder, op.kind),
                                     createString(builder, op.name),
                                     createAttributes(builder, op.parameters)));
  auto policy = createString(builder, program.policy);
  auto knobs = createAttributes(builder, program.knobs);
  auto mlir = createString(builder, program.mlir);
  return fb::CreateDecodingProgram(builder, policy, knobs, mlir, builder.CreateVector(ops));
}

// Builds the size-prefixed flatbuffer for `contents` with weights at `weightOffsets` (relative to
// the weight section) and the section's start at `weightSectionStart`, the first 64-byte boundary
// after the buffer; that depends on the buffer's size, so it is patched in after finishing.
void buildMetadata(flatbuffers::FlatBufferBuilder &builder, const ArtifactContents &contents,
                   const std::vector<uint64_t> &weightOffsets, uint64_t weightSectionSize,
                   uint64_t &weightSectionStart) {
  // Every scalar is stored even when it equals its default, so the section start can be patched
  // in place (and tests can damage any field without rebuilding the buffer).
  builder.ForceDefaults(true);

  auto producer = createString(builder, contents.producer);
  auto config = createConfig(builder, contents.config);
  auto tokenizerJson = createString(builder, contents.tokenizerJson);
  flatbuffers::Offset<flatbuffers::String> chatTemplate;
  if (contents.chatTemplate)
    chatTemplate = createString(builder, *contents.chatTemplate);
  AttributeVector specialTokens;
  if (!contents.chatSpecialTokens.empty())
    specialTokens = createAttributes(builder, contents.chatSpecialTokens);
  auto tokenizer = fb::CreateTokenizer(builder, tokenizerJson, chatTemplate, specialTokens);
  auto program = createDecodingProgram(builder, contents.program);
  std::vector<flatbuffers::Offset<fb::DecodingProgram>> decodeProgramList;
  for (const DecodingProgram &decodeProgram : contents.decodePrograms)
    decodeProgramList.push_back(createDecodingProgram(builder, decodeProgram));
  auto decodePrograms = builder.CreateVector(decodeProgramList);

  std::vector<flatbuffers::Offset<fb::KernelTarget>> targets;
  for (const KernelTarget &target : contents.kernelTargets) {
    std::vector<flatbuffers::Offset<fb::Kernel>> kernels;
    for (const Kernel &kernel : target.kernels)
      kernels.push_back(createKernel(builder, kernel));
    targets.push_back(fb::CreateKernelTarget(builder, createString(builder, target.target),
                                             builder.CreateVector(kernels)));
  }
  auto kernelTargets = builder.CreateVector(targets);

  std::vector<flatbuffers::Offset<fb::Weight>> weights;
  for (size_t i = 0; i < contents.weights.size(); ++i) {
    const WeightSource &weight = contents.weights[i];
    auto name = createString(builder, weight.name);
    auto shape = builder.CreateVector(weight.shape);
    const uint64_t contentHash = hashBytes(weight.data, static_cast<size_t>(weight.size));
    weights.push_back(fb::CreateWeight(builder, name, weight.dtype, shape, weightOffsets[i],
                                       weight.size, contentHash));
  }
  auto weightVector = builder.CreateVector(weights);

  const fb::SchemaVersion version(kSchemaMajor, kSchemaMinor);
  auto root =
      fb::CreateArtifact(builder, &version, producer, config, tokenizer, program, kernelTargets,
                         weightVector, /*weight_section_offset=*/0, weightSectionSize,
                         decodePrograms);
  fb::FinishSizePrefixedArtifactBuffer(builder, root);

  weightSectionStart = alignUp(builder.GetSize(), kWeightAlignment);
  fb::Artifact *artifact = fb::GetMutableSizePrefixedArtifact(builder.GetBufferPointer());
  bool patched = artifact->mutate_weight_section_offset(weightSectionStart);
  // The hash covers everything else in the buffer, the section offset included.
  const uint8_t *hashField = reinterpret_cast<const flatbuffers::Table *>(artifact)->GetAddressOf(
      fb::Artifact::VT_METADATA_HASH);
  patched = patched && hashField &&
            artifact->mutate_metadata_hash(
                hashMetadata(builder.GetBufferPointer(), builder.GetSize(),
                             static_cast<size_t>(hashField - builder.GetBufferPointer())));
  (void)patched;
  assert(patched && "ForceDefaults stores the fields, so they can be patched");
}

// ---- Writing the file ------------------------------------------------------------------------

std::string systemError(const std::string &what) { return what + ": " + std::strerror(errno); }

// A file created next to its destination, renamed over it by commit(); removed if destroyed
// before that.
class TemporaryFile {
public:
  explicit TemporaryFile(std::string destination) : destination_(std::move(destination)) {}
  TemporaryFile(const TemporaryFile &) = delete;
  TemporaryFile &operator=(const TemporaryFile &) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!path_.empty())
      ::unlink(path_.c_str());
  }

  Status create() {
    // Same directory as the destination, so the final rename cannot cross file systems.
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string candidate =
          destination_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
      // 0666 and the process umask: the permissions any newly created file would get.
      fd_ = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) {
        path_ = std::move(candidate);
        return Status::ok();
      }
      if (errno != EEXIST)
        return Status::error(systemError("cannot create temporary file '" + candidate + "'"));
    }
    return Status::error("cannot create a temporary file next to it: too many name collisions");
  }

  Status write(const void *data, uint64_t size, const std::string &what) {
    const auto *bytes = static_cast<const uint8_t *>(data);
    while (size > 0) {
      // Linux writes at most ~2 GiB per call anyway; a bound keeps the count in ssize_t.
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, uint64_t{1} << 30));
      const ssize_t written = ::write(fd_, bytes, chunk);
      if (written < 0) {
        if (errno == EINTR)
          continue;
        return Status::error(systemError("cannot write " + what + " to '" + path_ + "'"));
      }
      bytes += written;
      size -= static_cast<uint64_t>(written);
    }
    return Status::ok();
  }

  Status writeZeros(uint64_t count) {
    static const uint8_t zeros[kWeightAlignment] = {};
    assert(count < kWeightAlignment);
    return write(zeros, count, "padding");
  }

  Status commit() {
    if (::fsync(fd_) != 0)
      return Status::error(systemError("cannot sync '" + path_ + "'"));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      return Status::error(systemError("cannot close '" + path_ + "'"));
    if (::rename(path_.c_str(), destination_.c_str()) != 0)
      return Status::error(systemError("cannot rename '" + path_ + "' to '" + destination_ + "'"));
    path_.clear();
    return Status::ok();
  }

private:
  std::string destination_;
  std::string path_;
  int fd_ = -1;
};

Status writeFile(const std::string &path, const ArtifactContents &contents) {
  DLM_RETURN_IF_ERROR(checkContents(contents));
  const uint64_t metadataEstimate = estimateMetadataBytes(contents);
  if (metadataEstimate > kMaxMetadataBytes)
    return Status::error(
        "metadata (config, tokenizer, program, kernels, weight index) needs about " +
        std::to_string(metadataEstimate) + " bytes, more than the " +
        std::to_string(kMaxMetadataBytes) +
        " a flatbuffer can hold; weights are stored outside it");

  std::vector<uint64_t> weightOffsets;
  weightOffsets.reserve(contents.weights.size());
  uint64_t weightSectionSize = 0;
  for (const WeightSource &weight : contents.weights) {
    const uint64_t offset = alignUp(weightSectionSize, kWeightAlignment);
    if (offset < weightSectionSize || weight.size > kUint64Max - offset)
      return Status::error("weights add up to more than 2^64 bytes at weight '" + weight.name +
                           "'");
    weightOffsets.push_back(offset);
    weightSectionSize = offset + weight.size;
  }

  flatbuffers::FlatBufferBuilder builder(
      static_cast<size_t>(std::min<uint64_t>(metadataEstimate, uint64_t{64} << 20)));
  uint64_t weightSectionStart = 0;
  buildMetadata(builder, contents, weightOffsets, weightSectionSize, weightSectionStart);

  TemporaryFile file(path);
  DLM_RETURN_IF_ERROR(file.create());
  DLM_RETURN_IF_ERROR(file.write(builder.GetBufferPointer(), builder.GetSize(), "metadata"));
  uint64_t position = builder.GetSize();
  DLM_RETURN_IF_ERROR(file.writeZeros(weightSectionStart - position));
  position = weightSectionStart;
  for (size_t i = 0; i < contents.weights.size(); ++i) {
    const WeightSource &weight = contents.weights[i];
    const uint64_t start = weightSectionStart + weightOffsets[i];
    DLM_RETURN_IF_ERROR(file.writeZeros(start - position));
    DLM_RETURN_IF_ERROR(file.write(weight.data, weight.size, "weight '" + weight.name + "'"));
    position = start + weight.size;
  }
  return file.commit();
}

} // namespace

Status writeArtifact(const std::string &path, const ArtifactContents &contents) {
  return writeFile(path, contents).withContext("artifact '" + path + "'");
}

} // namespace dlm::artifact
