#include "importer/model/Checkpoint.h"

#include "runtime/tokenizer/Tokenizer.h"
#include "support/JsonText.h"
#include "support/TextFile.h"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace dlm::importer {
namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
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
  default:
    return Status::error("tensor '" + view.name + "' has dtype " +
                         std::string(safetensors::dtypeName(view.dtype)) +
                         "; weights must be F32, BF16 or F16");
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
  // generation_config.json is optional; DiffusionGemma takes its EOS and sampler defaults there.
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

  auto tensors = safetensors::SafetensorsCheckpoint::open(directory);
  if (!tensors)
    return tensors.status().withContext("checkpoint '" + directory + "'");
  result.tensors.emplace(std::move(*tensors));

  for (const WeightBinding &binding : result.model.weights) {
    const safetensors::TensorView *view = result.tensors->find(binding.checkpointName);
    if (!view)
      return Status::error("checkpoint '" + directory + "': tensor '" + binding.checkpointName +
                           "' is missing (needed for weight '" + binding.canonicalName + "')");
    auto loaded = result.tensors->load(binding.checkpointName);
    if (!loaded)
      return loaded.status().withContext("checkpoint '" + directory + "'");
    if (view->shape != binding.shape)
      return Status::error("checkpoint '" + directory + "': tensor '" + binding.checkpointName +
                           "' has shape " + shapeText(view->shape) + ", expected " +
                           shapeText(binding.shape) + " from config.json");
    auto dtype = weightDType(*view);
    if (!dtype)
      return dtype.status().withContext("checkpoint '" + directory + "'");
    result.views.push_back(view);
  }
  return std::move(result);
}

} // namespace dlm::importer
