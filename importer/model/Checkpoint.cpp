#include "importer/model/Checkpoint.h"

#include "support/FloatFormats.h"

#include "runtime/tokenizer/Tokenizer.h"
#include "support/JsonText.h"
#include "support/ShapeText.h"
#include "support/TextFile.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>

namespace dlm::importer {
namespace {

// The scales of FP8 weight `view` as compressed-tensors stores them beside it ("X.weight" ->
// "X.weight_scale": [N, 1] or [N] per output channel, [1] or a scalar per tensor; a stack of
// experts [E, N, K] ("X.gate_up_proj" -> "X.gate_up_proj_scale"): [E, N, 1], [E, N] or [E * N] per
// channel of every expert, [E, 1, 1], [E, 1] or [E] per expert), one per row (E * N for a stack).
StatusOr<std::vector<float>> fp8RowScales(const safetensors::SafetensorsCheckpoint &tensors,
                                          const safetensors::TensorView &view) {
  const std::string scaleName = view.name + "_scale";
  if (view.shape.size() != 2 && view.shape.size() != 3)
    return Status::error("FP8 tensor '" + view.name + "' is not a matrix or a stack of them");
  const int64_t experts = view.shape.size() == 3 ? view.shape[0] : 1;
  const int64_t rows = experts * view.shape[view.shape.size() - 2];
  // Static activation scales (FP8 "static" schemes) would change what the GEMM computes; dlm
  // quantizes activations itself, per row at run time, as FP8-dynamic checkpoints intend.
  const std::string weightSuffix = "weight";
  const std::string inputScale =
      view.name.size() > weightSuffix.size() &&
              view.name.compare(view.name.size() - weightSuffix.size(), weightSuffix.size(),
                                weightSuffix) == 0
          ? view.name.substr(0, view.name.size() - weightSuffix.size()) + "input_scale"
          : view.name + "_input_scale";
  if (tensors.find(inputScale))
    return Status::error("not supported yet: a static FP8 activation scale ('" + inputScale +
                         "'); FP8-dynamic checkpoints (weight scales only) import");
  const safetensors::TensorView *scale = tensors.find(scaleName);
  if (!scale)
    return Status::error("FP8 E4M3 tensor '" + view.name + "' has no scale '" + scaleName +
                         "' (the compressed-tensors layout puts one beside each FP8 weight)");
  int64_t count = 1;
  for (int64_t d : scale->shape)
    count *= d;
  // Trailing 1s aside, a per-row scale has the weight's leading shape (or is flat), a per-expert
  // one the stack's first dimension.
  std::vector<int64_t> leading(scale->shape);
  while (leading.size() > 1 && leading.back() == 1)
    leading.pop_back();
  const std::vector<int64_t> weightRows(view.shape.begin(), view.shape.end() - 1);
  const bool perRow = count == rows && (leading.size() == 1 || leading == weightRows);
  const bool perExpert = experts > 1 && count == experts && leading.size() == 1;
  if (!perRow && !perExpert && count != 1) {
    const std::string n = std::to_string(view.shape[view.shape.size() - 2]);
    return Status::error(
        "scale '" + scaleName + "' has shape " + shapeText(scale->shape) + "; expected " +
        (experts > 1
             ? "[" + std::to_string(experts) + ", " + n + ", 1], [" + std::to_string(experts) +
                   ", " + n + "], [" + std::to_string(rows) + "], [" + std::to_string(experts) + "]"
             : "[" + n + ", 1], [" + n + "]") +
        ", [1] or a scalar");
  }
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    switch (scale->dtype) {
    case safetensors::DType::F32:
      std::memcpy(&values[i], static_cast<const uint8_t *>(scale->data) + 4 * i, 4);
      break;
    case safetensors::DType::BF16:
    case safetensors::DType::F16: {
      uint16_t bits;
      std::memcpy(&bits, static_cast<const uint8_t *>(scale->data) + 2 * i, 2);
      values[i] =
          scale->dtype == safetensors::DType::BF16 ? floatFromBf16(bits) : floatFromF16(bits);
      break;
    }
    default:
      return Status::error("scale '" + scaleName + "' has dtype " +
                           std::string(safetensors::dtypeName(scale->dtype)) +
                           "; expected F32, BF16 or F16");
    }
    // 0 is a row of zeros.
    if (!std::isfinite(values[i]) || values[i] < 0)
      return Status::error("scale '" + scaleName + "' holds " + std::to_string(values[i]) +
                           ", not a finite number >= 0");
  }
  if (perRow)
    return values;
  // One scale per expert (or for the whole tensor), repeated over its rows.
  std::vector<float> perRows;
  perRows.reserve(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    perRows.push_back(values[perExpert ? static_cast<size_t>(r / (rows / experts)) : 0]);
  return perRows;
}

// The checkpoint tensor `name`, loaded (its bytes checked to lie in the file) and of `shape`.
StatusOr<const safetensors::TensorView *> loadTensor(const ImportedCheckpoint &checkpoint,
                                                     const std::string &name,
                                                     const std::vector<int64_t> &shape,
                                                     const std::string &canonicalName) {
  if (!checkpoint.tensors->find(name))
    return Status::error("tensor '" + name + "' is missing (needed for weight '" + canonicalName +
                         "')");
  DLM_ASSIGN_OR_RETURN(const safetensors::TensorView *view, checkpoint.tensors->load(name));
  if (view->shape != shape)
    return Status::error("tensor '" + name + "' has shape " + shapeText(view->shape) +
                         ", expected " + shapeText(shape) + " from config.json");
  return view;
}

// Rows [binding.firstRow, + binding.shape[0]) of binding.rowsOf: a view into its bytes.
StatusOr<const safetensors::TensorView *> bindRows(ImportedCheckpoint &checkpoint,
                                                   const WeightBinding &binding) {
  DLM_ASSIGN_OR_RETURN(
      const safetensors::TensorView *whole,
      loadTensor(checkpoint, binding.rowsOf, binding.partShape, binding.canonicalName));
  if (whole->dtype == safetensors::DType::F8_E4M3)
    return Status::error("not supported yet: FP8 weights split from a fused tensor ('" +
                         binding.rowsOf + "')");
  const size_t rowBytes = whole->byteSize / static_cast<size_t>(binding.partShape[0]);
  return &checkpoint.stacked.emplace_back(
      safetensors::TensorView{binding.checkpointName, whole->dtype, binding.shape,
                              whole->data + static_cast<size_t>(binding.firstRow) * rowBytes,
                              static_cast<size_t>(binding.shape[0]) * rowBytes, whole->shardFile});
}

// The tensor behind `binding`: the checkpoint's own, rows of one, or its parts copied into one
// stack.
StatusOr<const safetensors::TensorView *> bindWeight(ImportedCheckpoint &checkpoint,
                                                     const WeightBinding &binding) {
  if (!binding.rowsOf.empty())
    return bindRows(checkpoint, binding);
  if (binding.stackedFrom.empty() ||
      (binding.fusedOrStacked && checkpoint.tensors->find(binding.checkpointName)))
    return loadTensor(checkpoint, binding.checkpointName, binding.shape, binding.canonicalName);
  std::vector<const safetensors::TensorView *> parts;
  std::vector<float> scales; // FP8 parts: every part's row scales, in stacking order
  for (const std::string &name : binding.stackedFrom) {
    if (binding.fusedOrStacked && !checkpoint.tensors->find(name))
      return Status::error("tensor '" + binding.checkpointName +
                           "' is missing (needed for weight '" + binding.canonicalName +
                           "'), and so is '" + name + "' of its parts stored apart");
    DLM_ASSIGN_OR_RETURN(const safetensors::TensorView *part,
                         loadTensor(checkpoint, name, binding.partShape, binding.canonicalName));
    if (!parts.empty() && part->dtype != parts.front()->dtype)
      return Status::error(
          "tensor '" + name + "' is " + std::string(safetensors::dtypeName(part->dtype)) +
          " but '" + parts.front()->name + "' is " +
          std::string(safetensors::dtypeName(parts.front()->dtype)) + " (one weight stacks them)");
    if (part->dtype == safetensors::DType::F8_E4M3) {
      DLM_ASSIGN_OR_RETURN(std::vector<float> partScales, fp8RowScales(*checkpoint.tensors, *part));
      scales.insert(scales.end(), partScales.begin(), partScales.end());
    }
    parts.push_back(part);
  }
  if (!scales.empty())
    checkpoint.rowScales[binding.canonicalName] = std::move(scales);
  // A copy: the runtime reads one [E, ...] tensor (the import holds the experts twice until
  // the artifact is written).
  std::vector<uint8_t> &bytes = checkpoint.stackedBytes.emplace_back();
  bytes.reserve(parts.size() * parts.front()->byteSize);
  for (const safetensors::TensorView *part : parts)
    bytes.insert(bytes.end(), part->data, part->data + part->byteSize);
  return &checkpoint.stacked.emplace_back(
      safetensors::TensorView{binding.checkpointName, parts.front()->dtype, binding.shape,
                              bytes.data(), bytes.size(), parts.front()->shardFile});
}

// The mask token of a model whose config.json names none (LLaDA2, LLaDA-MoE, SDAR):
// tokenizer_config.json's
// mask_token, as diffusers' LLaDA2 pipeline takes tokenizer.mask_token_id.
Status maskTokenFromTokenizer(const CheckpointChat &chat, const Tokenizer &tokenizer,
                              artifact::ModelConfig &config) {
  auto named = chat.specialTokens.find("mask_token");
  if (named == chat.specialTokens.end() || !std::holds_alternative<std::string>(named->second))
    return Status::error(config.architecture +
                         " needs a mask token: config.json has no mask_token_id and the "
                         "tokenizer files name no mask_token");
  const std::string &text = std::get<std::string>(named->second);
  std::optional<int32_t> id = tokenizer.tokenToId(text);
  if (!id)
    return Status::error("tokenizer_config.json: mask_token '" + text +
                         "' is not in tokenizer.json's vocabulary");
  if (*id >= config.vocabSize)
    return Status::error("tokenizer_config.json: mask_token '" + text + "' has id " +
                         std::to_string(*id) + ", outside the model's vocabulary (" +
                         std::to_string(config.vocabSize) + ")");
  config.maskTokenId = *id;
  return Status::ok();
}

} // namespace

StatusOr<artifact::DType> weightDType(const safetensors::TensorView &view) {
  switch (view.dtype) {
  case safetensors::DType::F32:
    return artifact::DType::f32;
  case safetensors::DType::BF16:
    return artifact::DType::bf16;
  case safetensors::DType::F16:
    return artifact::DType::f16;
  case safetensors::DType::F8_E4M3:
    return artifact::DType::fp8_e4m3;
  default:
    return Status::error("tensor '" + view.name + "' has dtype " +
                         std::string(safetensors::dtypeName(view.dtype)) +
                         "; weights must be F32, BF16, F16 or F8_E4M3 (with a weight_scale)");
  }
}

StatusOr<ImportedCheckpoint> importCheckpoint(const std::string &directory) {
  namespace fs = std::filesystem;
  fs::path dir(directory);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::error("checkpoint '" + directory + "' is not a directory");

  ImportedCheckpoint result;
  result.directory = directory;

  auto configText = readTextFile(dir / "config.json");
  if (!configText)
    return configText.status().withContext("checkpoint '" + directory + "'");
  StatusOr<nlohmann::json> config = parseJsonText(*configText, "config.json");
  if (!config)
    return config.status().withContext("checkpoint '" + directory + "'");
  // generation_config.json is optional; DiffusionGemma takes its EOS and sampler defaults there,
  // SDAR its stop ids.
  nlohmann::json generation;
  const bool hasGeneration = fs::exists(dir / "generation_config.json", ec);
  if (hasGeneration) {
    auto generationText = readTextFile(dir / "generation_config.json");
    if (!generationText)
      return generationText.status().withContext("checkpoint '" + directory + "'");
    StatusOr<nlohmann::json> parsed = parseJsonText(*generationText, "generation_config.json");
    if (!parsed)
      return parsed.status().withContext("checkpoint '" + directory + "'");
    generation = std::move(*parsed);
  }
  auto description = describeModel(*config, hasGeneration ? &generation : nullptr);
  if (!description)
    return description.status().withContext("checkpoint '" + directory + "'");
  result.model = std::move(*description);

  auto tokenizerText = readTextFile(dir / "tokenizer.json");
  if (!tokenizerText)
    return tokenizerText.status().withContext("checkpoint '" + directory + "'");
  auto tokenizer = Tokenizer::fromJson(*tokenizerText);
  if (!tokenizer)
    return tokenizer.status().withContext("checkpoint '" + directory + "': tokenizer.json");
  result.tokenizerJson = std::move(*tokenizerText);
  auto chat = readCheckpointChat(directory);
  if (!chat)
    return chat.status().withContext("checkpoint '" + directory + "'");
  result.chat = std::move(*chat);

  if (result.model.maskTokenFromTokenizer) {
    Status resolved = maskTokenFromTokenizer(result.chat, *tokenizer, result.model.config);
    if (!resolved.isOk())
      return resolved.withContext("checkpoint '" + directory + "'");
  }

  auto tensors = safetensors::SafetensorsCheckpoint::open(directory);
  if (!tensors)
    return tensors.status().withContext("checkpoint '" + directory + "'");
  result.tensors.emplace(std::move(*tensors));

  for (const WeightBinding &binding : result.model.weights) {
    StatusOr<const safetensors::TensorView *> view = bindWeight(result, binding);
    if (!view)
      return view.status().withContext("checkpoint '" + directory + "'");
    auto dtype = weightDType(**view);
    if (!dtype)
      return dtype.status().withContext("checkpoint '" + directory + "'");
    if (*dtype == artifact::DType::fp8_e4m3 && !result.rowScales.count(binding.canonicalName)) {
      StatusOr<std::vector<float>> scales = fp8RowScales(*result.tensors, **view);
      if (!scales)
        return scales.status().withContext("checkpoint '" + directory + "'");
      result.rowScales[binding.canonicalName] = std::move(*scales);
    }
    result.views.push_back(*view);
  }
  return std::move(result);
}

} // namespace dlm::importer
