#include "runtime/program/KernelRecordChecks.h"

#include "runtime/model/KernelProgram.h"

#include <cmath>
#include <iterator>
#include <variant>

namespace dlm::program::detail {

namespace kp = spec::kernels;

namespace {

// The most KV cache layers a program may address (a corrupt layer index would size the cache).
constexpr int64_t kMaxKvLayers = int64_t(1) << 16;

struct KindCheck {
  KernelKind kind;
  Status (RecordChecker::*check)();
};

// Each kind's check, in the order of the kinds (KernelOps.td names the member).
constexpr KindCheck kChecks[] = {
#define DLM_KERNEL_RECORD_CHECKS
#define DLM_KERNEL_HANDLER(kind, member) {KernelKind::kind, &RecordChecker::member},
#include "runtime/schema/KernelRecordSpec.inc"
};
static_assert(std::size(kChecks) == std::size(kp::kKindContracts));

constexpr bool checksInKindOrder() {
  for (size_t i = 0; i < std::size(kChecks); ++i)
    if (static_cast<size_t>(kChecks[i].kind) != i || kp::kKindContracts[i].kind != i)
      return false;
  return true;
}
static_assert(checksInKindOrder());

// What a parameter of `type` is in an error: "... is missing or not a real".
const char *typeName(kp::ParameterType type) {
  switch (type) {
  case kp::ParameterType::integer:
    return "an integer";
  case kp::ParameterType::real:
    return "a real";
  case kp::ParameterType::flag:
    return "a boolean";
  case kp::ParameterType::text:
  case kp::ParameterType::weight:
  case kp::ParameterType::slots:
    break;
  }
  return "text";
}

bool hasType(const artifact::AttributeValue &value, kp::ParameterType type) {
  switch (type) {
  case kp::ParameterType::integer:
    return std::holds_alternative<int64_t>(value);
  case kp::ParameterType::real:
    return std::holds_alternative<double>(value);
  case kp::ParameterType::flag:
    return std::holds_alternative<bool>(value);
  case kp::ParameterType::text:
  case kp::ParameterType::weight:
  case kp::ParameterType::slots:
    break;
  }
  return std::holds_alternative<std::string>(value);
}

Status checkChoice(const RecordReader &r, const KernelKindSpec &kind,
                   const kp::ParameterSpec &parameter, const std::string &value) {
  std::string listed;
  for (size_t i = 0; i < parameter.choiceCount; ++i) {
    if (parameter.choices[i] == value)
      return Status::ok();
    listed += (i ? ", " : "") + std::string(parameter.choices[i]);
  }
  return r.error("not supported yet: " + std::string(kind.contract.name) + " " +
                 std::string(parameter.name) + " '" + value + "' (" + listed + ")");
}

Status checkRequired(const RecordReader &r, const kp::ParameterSpec *parameters, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (parameters[i].required && !r.has(parameters[i].name))
      return r.error("parameter '" + std::string(parameters[i].name) + "' is missing or not " +
                     typeName(parameters[i].type));
  return Status::ok();
}

} // namespace

std::optional<KernelKindSpec> findKernelKind(std::string_view name) {
  const kp::KindContract *contract = kp::findKindContract(name);
  if (!contract)
    return std::nullopt;
  return KernelKindSpec{*contract, kChecks[contract->kind].check};
}

Status checkDeclaredParameters(const RecordReader &r, const KernelKindSpec &kind) {
  for (const auto &[key, value] : r.parameters()) {
    const kp::ParameterSpec *parameter = kp::findParameter(kind.contract, key);
    if (!parameter)
      return r.error("parameter '" + key + "' is not one of a " + std::string(kind.contract.name) +
                     " record's");
    if (!hasType(value, parameter->type))
      return r.error("parameter '" + key + "' is missing or not " + typeName(parameter->type));
    if (parameter->choiceCount)
      DLM_RETURN_IF_ERROR(checkChoice(r, kind, *parameter, std::get<std::string>(value)));
  }
  DLM_RETURN_IF_ERROR(checkRequired(r, kind.contract.parameters, kind.contract.parameterCount));
  return checkRequired(r, kp::kCommonParameters, std::size(kp::kCommonParameters));
}

Status RecordChecker::embedding() {
  DLM_ASSIGN(kernel.weight, r.weight(kp::kWeight, weights, kernel.weightName));
  DLM_RETURN_IF_ERROR(expectWidth(kernel.weight->cols, width, "the table's row width"));
  if (kernel.weight->rows < d.embeddingSize)
    return r.error("the table has " + str(kernel.weight->rows) + " rows for " +
                   str(d.embeddingSize) + " token ids");
  DLM_ASSIGN(kernel.scale, optional<double>(r, kp::kScaleParameter, "a real", 1.0));
  if (!std::isfinite(kernel.scale))
    return r.error("the embedding scale is not finite");
  return Status::ok();
}

Status RecordChecker::softEmbedding() {
  DLM_ASSIGN(kernel.weight, r.weight(kp::kWeight, weights, kernel.weightName));
  DLM_RETURN_IF_ERROR(expectWidth(kernel.weight->cols, width, "the table's row width"));
  DLM_ASSIGN(kernel.scale, optional<double>(r, kp::kScaleParameter, "a real", 1.0));
  if (!std::isfinite(kernel.scale))
    return r.error("the embedding scale is not finite");
  DLM_ASSIGN(kernel.maskToken, optional<int64_t>(r, kp::kMaskToken, "an integer", -1));
  if (r.has(kp::kMaskToken) && (kernel.maskToken < 0 || kernel.maskToken >= d.embeddingSize))
    return r.error("mask_token " + str(kernel.maskToken) + " is not a token id of the " +
                   str(d.embeddingSize) + "-row embedding");
  return Status::ok();
}

Status RecordChecker::rmsNorm() {
  DLM_ASSIGN(kernel.weight, r.weight(kp::kWeight, weights, kernel.weightName, true));
  DLM_ASSIGN(kernel.eps, r.real(kp::kEps));
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the input width"));
  if (kernel.weight) {
    if (kernel.weight->rows != 1 || width % kernel.weight->cols != 0)
      return r.error("norm weight of " + str(kernel.weight->cols) +
                     " values does not divide rows of " + str(width));
    kernel.normWidth = kernel.weight->cols;
    if (r.has(kp::kNormWidth)) {
      int64_t given = 0;
      DLM_ASSIGN(given, r.integer(kp::kNormWidth));
      DLM_RETURN_IF_ERROR(expectWidth(given, kernel.normWidth, "norm_width"));
    }
  } else {
    DLM_ASSIGN(kernel.normWidth, optional<int64_t>(r, kp::kNormWidth, "an integer", width));
    if (kernel.normWidth <= 0 || width % kernel.normWidth != 0)
      return r.error("norm_width " + str(kernel.normWidth) + " does not divide rows of " +
                     str(width));
  }
  return Status::ok();
}

Status RecordChecker::scale() {
  DLM_ASSIGN(kernel.weight, r.weight(kp::kWeight, weights, kernel.weightName));
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the input width"));
  if (kernel.weight->rows * kernel.weight->cols != 1)
    return r.error("the scale weight has " + str(kernel.weight->rows * kernel.weight->cols) +
                   " values, expected 1");
  return Status::ok();
}

// linear and norm_linear (which normalises its input first).
Status RecordChecker::linear() {
  if (kernel.kind == KernelKind::normLinear) {
    DLM_ASSIGN(kernel.norm, r.weight(kp::kNormWeight, weights, kernel.normWeightName));
    DLM_ASSIGN(kernel.eps, r.real(kp::kEps));
    DLM_RETURN_IF_ERROR(expectWidth(kernel.norm->cols, widths[0], "the norm weight's size"));
    kernel.normName = std::string(kp::weightRole(*r.text(kp::kNormWeight)));
    program.normRowElements = std::max(program.normRowElements, widths[0]);
  }
  DLM_ASSIGN(kernel.weight,
             r.weight(kp::kWeight, weights, kernel.weightName, false, widenProjections));
  DLM_ASSIGN(kernel.bias, r.weight(kp::kBias, weights, kernel.biasName, true));
  DLM_RETURN_IF_ERROR(expectWidth(kernel.weight->cols, widths[0], "the weight's input width"));
  DLM_RETURN_IF_ERROR(expectWidth(kernel.weight->rows, width, "the weight's output width"));
  if (kernel.bias)
    DLM_RETURN_IF_ERROR(expectWidth(kernel.bias->cols, width, "the bias's size"));
  if (kernel.accumulate) {
    // Planned in place on its residual, a GEMM reading the same rows would overwrite its
    // own input (norm_linear reads a normalised copy).
    if (kernel.kind == KernelKind::linear && kernel.operands[0] == kernel.operands[1])
      return r.error("an accumulating linear reads its residual as its input");
    DLM_RETURN_IF_ERROR(expectWidth(widths[1], width, "the residual's width"));
  }
  return Status::ok();
}

Status RecordChecker::rope() {
  DLM_ASSIGN(kernel.theta, r.real(kp::kTheta));
  DLM_ASSIGN(kernel.headDim, r.integer(kp::kHeadDim));
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the input width"));
  if (kernel.headDim <= 0 || kernel.headDim % 2 != 0 || width % kernel.headDim != 0)
    return r.error("head_dim " + str(kernel.headDim) + " does not split rows of " + str(width) +
                   " into heads of pairs");
  kernel.heads = width / kernel.headDim;
  DLM_ASSIGN(kernel.rotatedPairs,
             optional<int64_t>(r, kp::kRotatedPairs, "an integer", kernel.headDim / 2));
  if (kernel.rotatedPairs < 0 || kernel.rotatedPairs > kernel.headDim / 2)
    return r.error("rotated_pairs " + str(kernel.rotatedPairs) + " is outside [0, " +
                   str(kernel.headDim / 2) + "] (head_dim " + str(kernel.headDim) + ")");
  if (!(kernel.theta > 0))
    return r.error("theta must be positive");
  return Status::ok();
}

Status RecordChecker::kvStore() {
  // A kv_store past the model's layers adds a KV layer (a drafter's, after its target's).
  if (kernel.layer < 0 || kernel.layer >= kMaxKvLayers)
    return r.error("layer " + str(kernel.layer) + " has no KV cache (KV layers are [0, " +
                   str(kMaxKvLayers) + "))");
  const size_t layer = static_cast<size_t>(kernel.layer);
  if (layer >= storedK.size()) {
    storedK.resize(layer + 1, -1);
    storedV.resize(layer + 1, -1);
  }
  if (layer >= kvWidths.size())
    kvWidths.resize(layer + 1, 0);
  // The layer's KV width is what its kv_store records store; every one of them, in every
  // function, agrees.
  DLM_RETURN_IF_ERROR(expectWidth(widths[1], widths[0], "the values' width"));
  if (kvWidths[layer] != 0 && kvWidths[layer] != widths[0])
    return r.error("layer " + str(kernel.layer) + " stores K/V of " + str(widths[0]) +
                   " values per token where another kv_store of it stores " + str(kvWidths[layer]));
  kvWidths[layer] = widths[0];
  storedK[layer] = kernel.operands[0];
  storedV[layer] = kernel.operands[1];
  return Status::ok();
}

Status RecordChecker::attention() {
  if (kernel.layer < 0 || kernel.layer >= kMaxKvLayers)
    return r.error("layer " + str(kernel.layer) + " has no KV cache (KV layers are [0, " +
                   str(kMaxKvLayers) + "))");
  const size_t layer = static_cast<size_t>(kernel.layer);
  if (layer >= storedK.size() || storedK[layer] != kernel.operands[1] ||
      storedV[layer] != kernel.operands[2])
    return r.error("attention reads keys and values that no kv_store of layer " +
                   str(kernel.layer) + " stored");
  const int64_t kvWidth = kvWidths[layer];
  std::string mask; // one of its choices (checkDeclaredParameters)
  DLM_ASSIGN(mask, r.text(kp::kMask));
  kernel.causal = mask == kp::kMaskCausal;
  DLM_ASSIGN(kernel.heads, r.integer(kp::kHeads));
  DLM_ASSIGN(kernel.kvHeads, r.integer(kp::kKvHeads));
  DLM_ASSIGN(kernel.headDim, r.integer(kp::kHeadDim));
  const std::optional<int64_t> queryWidth = product(kernel.heads, kernel.headDim);
  if (kernel.kvHeads <= 0 || kernel.headDim <= 0 || kernel.heads % kernel.kvHeads != 0 ||
      product(kernel.kvHeads, kernel.headDim) != kvWidth || !queryWidth)
    return r.error(str(kernel.heads) + " heads over " + str(kernel.kvHeads) + " KV heads of " +
                   str(kernel.headDim) + " do not fit the KV cache's " + str(kvWidth) +
                   " values per token");
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], *queryWidth, "the queries' width"));
  DLM_RETURN_IF_ERROR(expectWidth(width, widths[0], "the result width"));
  DLM_ASSIGN(kernel.scale, optional<double>(r, kp::kScaleParameter, "a real",
                                            1.0 / std::sqrt(static_cast<double>(kernel.headDim))));
  // Positive: a kernel reads 0 as "1 / sqrt(head_dim)" (AttentionShape).
  if (!(kernel.scale > 0) || !std::isfinite(kernel.scale))
    return r.error("the attention scale " + std::to_string(kernel.scale) +
                   " is not positive and finite");
  DLM_ASSIGN(kernel.window, optional<int64_t>(r, kp::kWindow, "an integer", 0));
  if (r.has(kp::kWindow) && kernel.window <= 0)
    return r.error("window " + str(kernel.window) + " is not positive");
  return Status::ok();
}

Status RecordChecker::moe() {
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the router input's width"));
  DLM_RETURN_IF_ERROR(expectWidth(widths[1], width, "the expert input's width"));
  DLM_ASSIGN(kernel.experts, r.integer(kp::kExperts));
  DLM_ASSIGN(kernel.topK, r.integer(kp::kTopK));
  DLM_ASSIGN(kernel.eps, r.real(kp::kEps));
  DLM_ASSIGN(kernel.routerInputScale, r.real(kp::kRouterInputScale));
  std::string activation; // one of its choices (checkDeclaredParameters)
  DLM_ASSIGN(activation, r.text(kp::kActivation));
  kernel.geluActivation = activation == kp::kActivationGeluTanh;
  if (!(kernel.eps > 0 && kernel.eps < 1))
    return r.error("eps " + std::to_string(kernel.eps) + " is not in (0, 1)");
  if (!(kernel.routerInputScale > 0) || !std::isfinite(kernel.routerInputScale))
    return r.error("router_input_scale " + std::to_string(kernel.routerInputScale) +
                   " is not positive and finite");
  const int64_t e = kernel.experts;
  if (e <= 0)
    return r.error("experts " + str(e) + " is not positive");
  if (kernel.topK < 1 || kernel.topK > e)
    return r.error("top_k " + str(kernel.topK) + " is outside [1, " + str(e) + "]");
  MoeTensors &m = kernel.moeWeights;
  kernel.moeWeightNames.resize(5);
  DLM_ASSIGN(m.router, r.weight(kp::kRouter, weights, kernel.moeWeightNames[0]));
  DLM_ASSIGN(m.routerScale, r.weight(kp::kRouterScale, weights, kernel.moeWeightNames[1]));
  DLM_ASSIGN(m.expertScale, r.weight(kp::kExpertScale, weights, kernel.moeWeightNames[2]));
  DLM_ASSIGN(m.gateUp, r.weight(kp::kGateUp, weights, kernel.moeWeightNames[3]));
  DLM_ASSIGN(m.down, r.weight(kp::kDownWeight, weights, kernel.moeWeightNames[4]));
  auto shape = [&](const model::HostTensor *t, int64_t rows, int64_t cols, std::string_view what) {
    return t->rows == rows && t->cols == cols
               ? Status::ok()
               : r.error("the " + std::string(what) + " weight is [" + str(t->rows) + ", " +
                         str(t->cols) + "], expected [" + str(rows) + ", " + str(cols) + "]");
  };
  DLM_RETURN_IF_ERROR(shape(m.router, e, width, kp::kRouter));
  DLM_RETURN_IF_ERROR(shape(m.routerScale, 1, width, kp::kRouterScale));
  DLM_RETURN_IF_ERROR(shape(m.expertScale, 1, e, kp::kExpertScale));
  const std::optional<int64_t> downRows = product(e, width);
  if (m.gateUp->cols != width || !downRows || e > m.gateUp->rows || m.gateUp->rows % (2 * e) != 0 ||
      m.gateUp->rows == 0)
    return r.error("the gate_up weight of " + str(m.gateUp->rows) + " rows of " +
                   str(m.gateUp->cols) + " is not " + str(e) + " experts of [2I, " + str(width) +
                   "]");
  kernel.expertWidth = m.gateUp->rows / (2 * e);
  DLM_RETURN_IF_ERROR(shape(m.down, *downRows, kernel.expertWidth, kp::kDownWeight));
  return Status::ok();
}

Status RecordChecker::forwardInput() {
  // Every forward_input of a function reads the same input rows.
  if (program.forwardInputWidth != 0 && program.forwardInputWidth != width)
    return r.error("forward_input of width " + str(width) + " where another reads " +
                   str(program.forwardInputWidth));
  program.forwardInputWidth = width;
  return Status::ok();
}

Status RecordChecker::capture() {
  if (program.captureWidth != 0)
    return r.error("a function captures its rows once (a second capture record)");
  for (size_t i = 1; i < widths.size(); ++i)
    DLM_RETURN_IF_ERROR(
        expectWidth(widths[i], widths[0], "operand " + str(static_cast<int64_t>(i)) + "'s width"));
  if (std::optional<int64_t> captured = product(widths[0], static_cast<int64_t>(widths.size())))
    program.captureWidth = *captured;
  else
    return r.error("a capture of " + str(static_cast<int64_t>(widths.size())) + " x " +
                   str(widths[0]) + " values is past 64-bit integers");
  return Status::ok();
}

// add, silu_mul, gelu_mul and select_input_rows: two operands of the result's width.
Status RecordChecker::binary() {
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the first operand's width"));
  DLM_RETURN_IF_ERROR(expectWidth(widths[1], width, "the second operand's width"));
  return Status::ok();
}

Status RecordChecker::lmHead() {
  if (!last)
    return r.error("lm_head must be the last record");
  DLM_ASSIGN(kernel.norm, r.weight(kp::kNormWeight, weights, kernel.normWeightName, true));
  if (kernel.norm) {
    DLM_ASSIGN(kernel.eps, r.real(kp::kEps));
    DLM_RETURN_IF_ERROR(expectWidth(kernel.norm->cols, widths[0], "the norm weight's size"));
    kernel.normName = std::string(kp::weightRole(*r.text(kp::kNormWeight)));
  }
  DLM_ASSIGN(kernel.weight,
             r.weight(kp::kWeight, weights, kernel.weightName, false, widenProjections));
  DLM_ASSIGN(kernel.logitShift, r.flag(kp::kLogitShift));
  DLM_RETURN_IF_ERROR(expectWidth(kernel.weight->cols, widths[0], "the weight's input width"));
  DLM_RETURN_IF_ERROR(expectWidth(width, d.vocabSize, "the logits' width"));
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], d.hidden, "the input width"));
  if (kernel.weight->rows < width)
    return r.error("the weight has " + str(kernel.weight->rows) + " rows for " + str(width) +
                   " logits");
  DLM_ASSIGN(kernel.softcap, optional<double>(r, kp::kSoftcap, "a real", 0.0));
  if (r.has(kp::kSoftcap) && !(kernel.softcap > 0 && std::isfinite(kernel.softcap)))
    return r.error("softcap must be positive");
  return Status::ok();
}

} // namespace dlm::program::detail
