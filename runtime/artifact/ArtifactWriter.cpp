#include "runtime/artifact/ArtifactWriter.h"

#include <algorithm>
#include <limits>
#include <set>

namespace dlm::artifact {
namespace {

constexpr uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();

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
  return checkWeightSources(contents.weights);
}

// An upper bound on the flatbuffer's size, computed before building it, because the builder
// cannot report running out of its 2 GiB: it asserts.
uint64_t estimateMetadataBytes(const ArtifactContents &contents) {
  uint64_t total = 4096;
  auto add = [&](uint64_t bytes) {
    total = saturatingAdd(total, saturatingAdd(bytes, kMetadataItemOverhead));
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
  return saturatingAdd(total, estimateWeightIndexBytes(contents.weights));
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

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::KernelTarget>>>
createKernelTargets(flatbuffers::FlatBufferBuilder &builder,
                    const std::vector<KernelTarget> &kernelTargets) {
  std::vector<flatbuffers::Offset<fb::KernelTarget>> targets;
  for (const KernelTarget &target : kernelTargets) {
    std::vector<flatbuffers::Offset<fb::Kernel>> kernels;
    for (const Kernel &kernel : target.kernels)
      kernels.push_back(createKernel(builder, kernel));
    targets.push_back(fb::CreateKernelTarget(builder, createString(builder, target.target),
                                             builder.CreateVector(kernels)));
  }
  return builder.CreateVector(targets);
}

flatbuffers::Offset<fb::Tokenizer> createTokenizer(flatbuffers::FlatBufferBuilder &builder,
                                                   const ArtifactContents &contents) {
  auto tokenizerJson = createString(builder, contents.tokenizerJson);
  flatbuffers::Offset<flatbuffers::String> chatTemplate;
  if (contents.chatTemplate)
    chatTemplate = createString(builder, *contents.chatTemplate);
  AttributeVector specialTokens;
  if (!contents.chatSpecialTokens.empty())
    specialTokens = createAttributes(builder, contents.chatSpecialTokens);
  return fb::CreateTokenizer(builder, tokenizerJson, chatTemplate, specialTokens);
}

// Where the weights are: their placements, the artifact's own weight section size and, when they
// live in a parameter file, its record.
struct WeightLocation {
  const std::vector<WeightPlacement> *placements = nullptr;
  uint64_t sectionSize = 0;
  const ParameterFileReference *parameters = nullptr;
};

// Builds the size-prefixed flatbuffer for `contents` and seals it (sealMetadata: the weight
// section's start depends on the buffer's size, so it is patched in after finishing, then the
// hash). Returns the section's start.
uint64_t buildMetadata(flatbuffers::FlatBufferBuilder &builder, const ArtifactContents &contents,
                       const WeightLocation &location) {
  // Every scalar is stored even when it equals its default, so the section start can be patched
  // in place (and tests can damage any field without rebuilding the buffer).
  builder.ForceDefaults(true);

  auto producer = createString(builder, contents.producer);
  auto config = createConfig(builder, contents.config);
  auto tokenizer = createTokenizer(builder, contents);
  auto program = createDecodingProgram(builder, contents.program);
  std::vector<flatbuffers::Offset<fb::DecodingProgram>> decodeProgramList;
  for (const DecodingProgram &decodeProgram : contents.decodePrograms)
    decodeProgramList.push_back(createDecodingProgram(builder, decodeProgram));
  auto decodePrograms = builder.CreateVector(decodeProgramList);
  auto kernelTargets = createKernelTargets(builder, contents.kernelTargets);
  auto weights = createWeightIndex(builder, contents.weights, *location.placements);
  flatbuffers::Offset<fb::ExternalParameters> parameters;
  if (location.parameters)
    parameters = fb::CreateExternalParameters(builder,
                                              createString(builder, location.parameters->path),
                                              location.parameters->weightSectionSize,
                                              location.parameters->metadataHash,
                                              location.parameters->randomSeed);

  const fb::SchemaVersion version(kSchemaMajor, kSchemaMinor);
  auto root = fb::CreateArtifact(builder, &version, producer, config, tokenizer, program,
                                 kernelTargets, weights, /*weight_section_offset=*/0,
                                 location.sectionSize, decodePrograms, /*metadata_hash=*/0,
                                 parameters);
  fb::FinishSizePrefixedArtifactBuffer(builder, root);
  return sealMetadata(builder, kArtifactContainer);
}

// Writes the metadata and the `embedded` weights (all of them, or none when they live in a
// parameter file).
Status writeFile(const std::string &path, const ArtifactContents &contents,
                 const WeightLocation &location, const std::vector<WeightSource> &embedded) {
  const uint64_t metadataEstimate = estimateMetadataBytes(contents);
  DLM_RETURN_IF_ERROR(checkMetadataEstimate(metadataEstimate));
  flatbuffers::FlatBufferBuilder builder(
      static_cast<size_t>(std::min<uint64_t>(metadataEstimate, uint64_t{64} << 20)));
  const uint64_t sectionStart = buildMetadata(builder, contents, location);
  const std::vector<WeightPlacement> none;
  return writeContainerFile(path, builder, sectionStart, embedded,
                            embedded.empty() ? none : *location.placements);
}

Status writeEmbedded(const std::string &path, const ArtifactContents &contents) {
  DLM_RETURN_IF_ERROR(checkContents(contents));
  StatusOr<WeightLayout> layout = layOutWeights(contents.weights);
  if (!layout)
    return layout.status();
  return writeFile(path, contents, {&layout->placements, layout->sectionSize, nullptr},
                   contents.weights);
}

Status writeReferencing(const std::string &path, const ArtifactContents &contents,
                        const ParameterFileReference &parameters) {
  DLM_RETURN_IF_ERROR(checkContents(contents));
  if (parameters.path.empty())
    return Status::error("the parameter file has an empty path");
  if (parameters.placements.size() != contents.weights.size())
    return Status::error("the parameter file places " +
                         std::to_string(parameters.placements.size()) + " weights but there are " +
                         std::to_string(contents.weights.size()));
  return writeFile(path, contents, {&parameters.placements, 0, &parameters}, {});
}

} // namespace

Status writeArtifact(const std::string &path, const ArtifactContents &contents) {
  return writeEmbedded(path, contents).withContext("artifact '" + path + "'");
}

Status writeArtifact(const std::string &path, const ArtifactContents &contents,
                     const ParameterFileReference &parameters) {
  return writeReferencing(path, contents, parameters).withContext("artifact '" + path + "'");
}

} // namespace dlm::artifact
