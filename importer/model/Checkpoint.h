// A Hugging Face checkpoint directory, read and checked: config.json described, tokenizer.json
// parsed, every weight the model needs found in the safetensors with the right shape and dtype.
#pragma once

#include "importer/model/ChatTemplateConfig.h"
#include "importer/model/ModelFamily.h"
#include "importer/safetensors/Safetensors.h"
#include "support/Status.h"

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dlm::importer {

struct ImportedCheckpoint {
  std::string directory;
  ModelDescription model;
  std::string tokenizerJson;
  // The chat template and its special-token variables (ChatTemplateConfig.h); not yet parsed.
  CheckpointChat chat;
  std::optional<safetensors::SafetensorsCheckpoint> tensors; // always set on success
  // views[i] backs model.weights[i]; they point into `tensors`' mappings, or for a stacked
  // weight into `stacked`.
  std::vector<const safetensors::TensorView *> views;
  // The stacked weights (WeightBinding::stackedFrom), copied together: their views and bytes.
  std::deque<safetensors::TensorView> stacked;
  std::deque<std::vector<uint8_t>> stackedBytes;
  // The per-row (output channel) scales of the FP8 E4M3 weights, by canonical name: a
  // compressed-tensors checkpoint's "<...>.weight_scale" ([N, 1], [N], [1] or a scalar),
  // widened to float32 and broadcast to the weight's N rows.
  std::map<std::string, std::vector<float>> rowScales;
  // What an importer recognised in the file beyond the plain form, one line each, for the
  // import report (e.g. "batch dimension of 1 removed" from an ONNX export).
  std::vector<std::string> recognised;
};

// Named errors: missing or unreadable config.json / tokenizer.json, bad tokenizer_config.json
// (readCheckpointChat), bad config field, unknown
// or not-yet-supported architecture, bad tokenizer.json, truncated or malformed safetensors,
// tensor missing, shape mismatch, unsupported dtype.
StatusOr<ImportedCheckpoint> importCheckpoint(const std::string &directory);

// The artifact dtype of a checkpoint dtype the runtime can compute with (f32, bf16, f16, and
// F8_E4M3 with row scales).
StatusOr<artifact::DType> weightDType(const safetensors::TensorView &view);

} // namespace dlm::importer
