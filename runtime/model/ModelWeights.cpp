#include "runtime/model/ModelWeights.h"

#include "runtime/model/ModelSpec.h"
#include "support/FloatFormats.h"

#include <cstring>

namespace dlm::model {

namespace {

using artifact::AttentionMaskKind;
using artifact::DType;

const artifact::AttributeValue *findExtra(const artifact::ModelConfig &config,
                                          std::string_view key) {
  auto it = config.extra.find(key);
  return it == config.extra.end() ? nullptr : &it->second;
}

} // namespace

StatusOr<ModelDims> modelDims(const artifact::ModelConfig &config) {
  ModelDims dims;
  dims.vocabSize = config.vocabSize;
  dims.embeddingSize = config.embeddingSize ? config.embeddingSize : config.vocabSize;
  dims.hidden = config.hiddenSize;
  dims.layers = config.numLayers;
  dims.heads = config.numHeads;
  dims.kvHeads = config.numKvHeads ? config.numKvHeads : config.numHeads;
  dims.headDim =
      config.headDim ? config.headDim : (config.numHeads ? config.hiddenSize / config.numHeads : 0);
  dims.intermediate = config.intermediateSize;
  dims.ropeTheta = config.ropeTheta;
  dims.rmsNormEps = config.rmsNormEps;

  auto positive = [](const char *field, int64_t value) -> Status {
    if (value <= 0)
      return Status::error(std::string("model config: ") + field + " is " + std::to_string(value) +
                           ", expected a positive number");
    return Status::ok();
  };
  DLM_RETURN_IF_ERROR(positive("vocab_size", dims.vocabSize));
  DLM_RETURN_IF_ERROR(positive("hidden_size", dims.hidden));
  DLM_RETURN_IF_ERROR(positive("num_layers", dims.layers));
  DLM_RETURN_IF_ERROR(positive("num_heads", dims.heads));
  DLM_RETURN_IF_ERROR(positive("num_kv_heads", dims.kvHeads));
  DLM_RETURN_IF_ERROR(positive("head_dim", dims.headDim));
  DLM_RETURN_IF_ERROR(positive("intermediate_size", dims.intermediate));
  if (dims.embeddingSize < dims.vocabSize)
    return Status::error("model config: embedding_size " + std::to_string(dims.embeddingSize) +
                         " is smaller than vocab_size " + std::to_string(dims.vocabSize));
  if (dims.heads % dims.kvHeads)
    return Status::error("model config: num_kv_heads " + std::to_string(dims.kvHeads) +
                         " does not divide num_heads " + std::to_string(dims.heads));
  if (dims.headDim % 2)
    return Status::error("model config: head_dim " + std::to_string(dims.headDim) +
                         " is odd; rotary embeddings need pairs");
  if (!(dims.ropeTheta > 0))
    return Status::error("model config: rope_theta must be positive");
  if (!(dims.rmsNormEps > 0))
    return Status::error("model config: rms_norm_eps must be positive");

  switch (config.attentionMask) {
  case AttentionMaskKind::causal:
    dims.causal = true;
    break;
  case AttentionMaskKind::bidirectional:
  case AttentionMaskKind::block_causal: // the kernel records carry the block size
    dims.causal = false;
    break;
  case AttentionMaskKind::unspecified:
    return Status::error("model config: the attention mask kind is unspecified");
  default:
    return Status::error(std::string("not supported yet: attention mask '") +
                         artifact::fb::EnumNameAttentionMaskKind(config.attentionMask) + "'");
  }

  if (const auto *shift = findExtra(config, spec::kExtraLogitShift)) {
    if (!std::holds_alternative<bool>(*shift))
      return Status::error("model config: logit_shift must be a bool");
    dims.logitShift = std::get<bool>(*shift);
  }
  if (config.attentionMask == AttentionMaskKind::block_causal) {
    const auto *block = findExtra(config, spec::kExtraAttentionBlock);
    if (!block || !std::holds_alternative<int64_t>(*block) || std::get<int64_t>(*block) <= 0)
      return Status::error("model config: a block_causal model needs a positive attention_block");
    dims.attentionBlock = std::get<int64_t>(*block);
  }
  if (const auto *style = findExtra(config, spec::kExtraRopeStyle)) {
    if (!std::holds_alternative<std::string>(*style))
      return Status::error("model config: rope_style must be a string");
    if (std::get<std::string>(*style) != spec::kRopeStyleNeox)
      return Status::error("not supported yet: rope_style '" + std::get<std::string>(*style) + "'");
  }
  return dims;
}

float storedValue(const StoredTensor &tensor, size_t i) {
  switch (tensor.dtype) {
  case DType::f32:
    return static_cast<const float *>(tensor.data)[i];
  case DType::bf16:
    return floatFromBf16(static_cast<const uint16_t *>(tensor.data)[i]);
  case DType::i8:
    return static_cast<float>(static_cast<const int8_t *>(tensor.data)[i]) *
           tensor.rowScales[i / static_cast<size_t>(tensor.cols)];
  case DType::fp8_e4m3:
    return floatFromE4m3(static_cast<const uint8_t *>(tensor.data)[i]) *
           tensor.rowScales[i / static_cast<size_t>(tensor.cols)];
  case DType::i4: {
    const size_t cols = static_cast<size_t>(tensor.cols), row = i / cols;
    const size_t group = row * static_cast<size_t>(tensor.groups()) +
                         (i % cols) / static_cast<size_t>(tensor.groupSize);
    return static_cast<float>(int4Value(static_cast<const uint8_t *>(tensor.data), i)) *
           floatFromF16(tensor.groupScales[group]);
  }
  default:
    return floatFromF16(static_cast<const uint16_t *>(tensor.data)[i]);
  }
}

void widenStored(const StoredTensor &tensor, size_t first, size_t count, float *out) {
  if (tensor.dtype == DType::f32) {
    std::memcpy(out, static_cast<const float *>(tensor.data) + first, count * sizeof(float));
    return;
  }
  if (tensor.dtype == DType::fp8_e4m3) {
    const uint8_t *q = static_cast<const uint8_t *>(tensor.data);
    for (size_t i = first; i < first + count; ++i)
      out[i - first] = floatFromE4m3(q[i]) * tensor.rowScales[i / static_cast<size_t>(tensor.cols)];
    return;
  }
  if (tensor.dtype == DType::i4) {
    for (size_t i = first; i < first + count; ++i)
      out[i - first] = storedValue(tensor, i);
    return;
  }
  if (tensor.dtype == DType::i8) {
    const int8_t *q = static_cast<const int8_t *>(tensor.data);
    for (size_t i = first; i < first + count; ++i)
      out[i - first] =
          static_cast<float>(q[i]) * tensor.rowScales[i / static_cast<size_t>(tensor.cols)];
    return;
  }
  const uint16_t *bits = static_cast<const uint16_t *>(tensor.data) + first;
  if (tensor.dtype == DType::bf16)
    for (size_t i = 0; i < count; ++i)
      out[i] = floatFromBf16(bits[i]);
  else
    for (size_t i = 0; i < count; ++i)
      out[i] = floatFromF16(bits[i]);
}

StatusOr<std::shared_ptr<const ModelWeights>>
ModelWeights::load(const artifact::ArtifactReader &reader) {
  auto weights = std::make_shared<ModelWeights>();
  StatusOr<ModelDims> dims = modelDims(reader.config());
  if (!dims)
    return dims.status().withContext("artifact '" + reader.path() + "'");
  weights->dims_ = *dims;
  weights->reader_ = &reader;
  auto error = [&](const std::string &message) {
    return Status::error("artifact '" + reader.path() + "': " + message);
  };
  for (const artifact::WeightView &view : reader.weights()) {
    const std::vector<int64_t> shape = view.shape.toVector();
    // The kernels read vectors, matrices and rank-3 stacks of matrices ([E, N, K] held as E * N
    // rows of K: a moe record's experts); another tensor is left out, and a record that names it
    // reports it missing.
    if (shape.empty() || shape.size() > 3)
      continue;
    // i8 and FP8 E4M3 matrices and stacks come with row scales, i4 ones with group scales
    // (attachScales).
    const bool scaled =
        (view.dtype == DType::i8 || view.dtype == DType::fp8_e4m3 || view.dtype == DType::i4) &&
        shape.size() >= 2;
    if (view.dtype != DType::f32 && view.dtype != DType::bf16 && view.dtype != DType::f16 &&
        !scaled)
      return error("weight '" + std::string(view.name) + "' has dtype " +
                   artifact::dtypeName(view.dtype) +
                   "; the runtime reads f32, bf16 and f16, i8 and fp8_e4m3 matrices (and "
                   "stacks of them) with row scales, and i4 ones with group scales");
    Entry entry;
    entry.host.rows = shape.size() == 1 ? 1 : shape[0] * (shape.size() == 3 ? shape[1] : 1);
    entry.host.cols = shape.back();
    entry.stored = {view.dtype, view.data, entry.host.rows, entry.host.cols};
    auto [it, added] = weights->byName_.emplace(std::string(view.name), entry);
    // Vectors (norms, biases, scalars) are small and read by every backend: widened now.
    if (shape.size() == 1)
      DLM_RETURN_IF_ERROR(weights->widen(it->first, it->second.host, it->second.stored));
  }
  DLM_RETURN_IF_ERROR(weights->attachScales());
  return std::shared_ptr<const ModelWeights>(std::move(weights));
}

Status ModelWeights::attachScales() {
  for (auto &[name, entry] : byName_) {
    if (entry.stored.dtype == DType::i4) {
      DLM_RETURN_IF_ERROR(attachGroupScales(name, entry.stored));
      continue;
    }
    if (entry.stored.dtype != DType::i8 && entry.stored.dtype != DType::fp8_e4m3)
      continue;
    const std::string scaleName = name + std::string(kRowScaleSuffix);
    auto scale = byName_.find(scaleName);
    if (scale == byName_.end() || scale->second.host.rows != 1 ||
        scale->second.host.cols != entry.stored.rows)
      return Status::error("artifact '" + reader_->path() +
                           "': " + artifact::dtypeName(entry.stored.dtype) + " weight '" + name +
                           "' needs its " + std::to_string(entry.stored.rows) +
                           " row scales in a vector '" + scaleName + "'");
    entry.stored.rowScales = scale->second.host.data;
  }
  return Status::ok();
}

// An i4 weight's f16 scales [rows, groups] (a stack's [E, N, groups]), each over cols / groups
// consecutive values of a row.
Status ModelWeights::attachGroupScales(const std::string &name, StoredTensor &stored) {
  const std::string scaleName = name + std::string(kRowScaleSuffix);
  auto scale = byName_.find(scaleName);
  const StoredTensor *g = scale == byName_.end() ? nullptr : &scale->second.stored;
  if (!g || g->dtype != DType::f16 || g->rows != stored.rows || g->cols <= 0 ||
      stored.cols % g->cols != 0)
    return Status::error("artifact '" + reader_->path() + "': i4 weight '" + name +
                         "' needs its group scales in an f16 matrix '" + scaleName + "' of " +
                         std::to_string(stored.rows) + " rows, a number of groups that divides " +
                         std::to_string(stored.cols));
  stored.groupSize = stored.cols / g->cols;
  stored.groupScales = static_cast<const uint16_t *>(g->data);
  return Status::ok();
}

// Every widened weight is copied out of the mapping (f32 ones too), under the reader's guard: a
// file truncated by another program then fails this call by name, and cannot fault a forward
// later.
Status ModelWeights::widen(std::string_view name, HostTensor &host,
                           const StoredTensor &stored) const {
  const size_t count = static_cast<size_t>(stored.rows * stored.cols);
  std::unique_ptr<float[]> converted(new float[count]);
  float *out = converted.get();
  Status read = readStored([&] { widenStored(stored, 0, count, out); });
  if (!read)
    return read.withContext("weight '" + std::string(name) + "'");
  host.data = out;
  owned_.push_back(std::move(converted));
  ownedBytes_ += count * sizeof(float);
  return Status::ok();
}

StatusOr<const HostTensor *> ModelWeights::widened(std::string_view name) const {
  auto it = byName_.find(name);
  if (it == byName_.end())
    return Status::error("missing weight '" + std::string(name) + "'");
  std::lock_guard<std::mutex> lock(mutex_);
  // The entry is written only here, under the lock, and never moves (a map node).
  HostTensor &host = const_cast<HostTensor &>(it->second.host);
  if (!host.data)
    DLM_RETURN_IF_ERROR(widen(name, host, it->second.stored));
  return &host;
}

Status ModelWeights::readStored(const std::function<void()> &read) const {
  return reader_->guardedRead(read);
}

StatusOr<std::shared_ptr<const void>>
ModelWeights::derivedForm(std::string_view name, std::string_view kind, const Maker &make) const {
  auto it = byName_.find(name);
  if (it == byName_.end())
    return Status::error("missing weight '" + std::string(name) + "'");
  const std::string key = std::string(kind) + ":" + std::string(name);
  std::lock_guard<std::mutex> lock(mutex_);
  auto cached = derived_.find(key);
  if (cached != derived_.end())
    return cached->second;
  StatusOr<std::shared_ptr<const void>> form = make(it->second.stored);
  if (!form)
    return form.status().withContext("weight '" + std::string(name) + "'");
  derived_.emplace(key, *form);
  return *form;
}

size_t ModelWeights::ownedBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ownedBytes_;
}

} // namespace dlm::model
