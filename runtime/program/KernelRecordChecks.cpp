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

// A value in a declared constraint's message.
[[maybe_unused]] std::string valueText(int64_t value) { return std::to_string(value); }
[[maybe_unused]] std::string valueText(double value) { return std::to_string(value); }
[[maybe_unused]] std::string valueText(bool value) { return value ? "true" : "false"; }
[[maybe_unused]] std::string valueText(const std::string &value) { return "'" + value + "'"; }
template <typename T> std::string valueText(const std::optional<T> &value) {
  return value ? valueText(*value) : std::string("absent");
}

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

Status RecordChecker::resolve(kp::WeightRef &weight, bool widen) const {
  if (!weight)
    return Status::ok(); // an optional weight left out (the reader requires the others)
  weight.tensor = weights.find(weight.name);
  if (!weight.tensor)
    return r.error("missing weight '" + weight.name + "'");
  if (widen) {
    StatusOr<const model::HostTensor *> widened = weights.widened(weight.name);
    if (!widened)
      return r.error(widened.status().message());
    program.widenedWeights.insert(*widened);
  }
  return Status::ok();
}

// The table as the projections: a backend that reads weights as stored (the CPU) decodes the
// rows a forward looks up, so a bf16 or 8-bit table is not widened in memory.
Status RecordChecker::embedding() {
  auto &p = params<kp::EmbeddingParams>();
  DLM_RETURN_IF_ERROR(resolve(p.weight, widenProjections));
  DLM_RETURN_IF_ERROR(expectWidth(p.weight.tensor->cols, width, "the table's row width"));
  if (p.weight.tensor->rows < d.embeddingSize)
    return r.error("the table has " + str(p.weight.tensor->rows) + " rows for " +
                   str(d.embeddingSize) + " token ids");
  return Status::ok();
}

// The table as an embedding's: the CPU multiplies it as stored (runtime/cpu/Kernels.h).
Status RecordChecker::softEmbedding() {
  auto &p = params<kp::SoftEmbeddingParams>();
  DLM_RETURN_IF_ERROR(resolve(p.weight, widenProjections));
  DLM_RETURN_IF_ERROR(expectWidth(p.weight.tensor->cols, width, "the table's row width"));
  if (p.maskToken && (*p.maskToken < 0 || *p.maskToken >= d.embeddingSize))
    return r.error("mask_token " + str(*p.maskToken) + " is not a token id of the " +
                   str(d.embeddingSize) + "-row embedding");
  return Status::ok();
}

Status RecordChecker::rmsNorm() {
  auto &p = params<kp::RmsNormParams>();
  DLM_RETURN_IF_ERROR(resolve(p.weight));
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the input width"));
  if (const model::HostTensor *w = p.weight.tensor) {
    if (w->rows != 1 || width % w->cols != 0)
      return r.error("norm weight of " + str(w->cols) + " values does not divide rows of " +
                     str(width));
    kernel.normWidth = w->cols;
    if (p.normWidth)
      DLM_RETURN_IF_ERROR(expectWidth(*p.normWidth, kernel.normWidth, "norm_width"));
  } else {
    kernel.normWidth = p.normWidth.value_or(width);
    if (kernel.normWidth <= 0 || width % kernel.normWidth != 0)
      return r.error("norm_width " + str(kernel.normWidth) + " does not divide rows of " +
                     str(width));
  }
  return Status::ok();
}

Status RecordChecker::scale() {
  auto &p = params<kp::ScaleParams>();
  DLM_RETURN_IF_ERROR(resolve(p.weight));
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the input width"));
  const int64_t values = p.weight.tensor->rows * p.weight.tensor->cols;
  if (values != 1)
    return r.error("the scale weight has " + str(values) + " values, expected 1");
  return Status::ok();
}

// A fused norm's weight (norm_linear, lm_head): the input's size; its label names the profile's
// norm events.
Status RecordChecker::fusedNorm(kp::WeightRef &norm) {
  DLM_RETURN_IF_ERROR(resolve(norm));
  DLM_RETURN_IF_ERROR(expectWidth(norm.tensor->cols, widths[0], "the norm weight's size"));
  kernel.normName = std::string(kp::weightRole(norm.name));
  return Status::ok();
}

// linear and norm_linear (which normalises its input first).
Status RecordChecker::linear() {
  if (kernel.kind() == KernelKind::normLinear) {
    DLM_RETURN_IF_ERROR(fusedNorm(params<kp::NormLinearParams>().normWeight));
    program.normRowElements = std::max(program.normRowElements, widths[0]);
  }
  kp::WeightRef &weight = kernel.kind() == KernelKind::normLinear
                              ? params<kp::NormLinearParams>().weight
                              : params<kp::LinearParams>().weight;
  kp::WeightRef &bias = kernel.kind() == KernelKind::normLinear
                            ? params<kp::NormLinearParams>().bias
                            : params<kp::LinearParams>().bias;
  DLM_RETURN_IF_ERROR(resolve(weight, widenProjections));
  DLM_RETURN_IF_ERROR(resolve(bias));
  DLM_RETURN_IF_ERROR(expectWidth(weight.tensor->cols, widths[0], "the weight's input width"));
  DLM_RETURN_IF_ERROR(expectWidth(weight.tensor->rows, width, "the weight's output width"));
  if (bias)
    DLM_RETURN_IF_ERROR(expectWidth(bias.tensor->cols, width, "the bias's size"));
  if (kernel.accumulates()) {
    // Planned in place on its residual, a GEMM reading the same rows would overwrite its
    // own input (norm_linear reads a normalised copy).
    if (kernel.kind() == KernelKind::linear && kernel.operands[0] == kernel.operands[1])
      return r.error("an accumulating linear reads its residual as its input");
    DLM_RETURN_IF_ERROR(expectWidth(widths[1], width, "the residual's width"));
  }
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
  const auto &p = params<kp::AttentionParams>();
  const std::optional<int64_t> queryWidth = product(p.heads, p.headDim);
  if (p.kvHeads <= 0 || p.headDim <= 0 || p.heads % p.kvHeads != 0 ||
      product(p.kvHeads, p.headDim) != kvWidth || !queryWidth)
    return r.error(str(p.heads) + " heads over " + str(p.kvHeads) + " KV heads of " +
                   str(p.headDim) + " do not fit the KV cache's " + str(kvWidth) +
                   " values per token");
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], *queryWidth, "the queries' width"));
  DLM_RETURN_IF_ERROR(expectWidth(width, widths[0], "the result width"));
  return Status::ok();
}

// Its widths and scalars are KernelOps.td's constraints, checked before this.
Status RecordChecker::moe() {
  auto &p = params<kp::MoeParams>();
  const int64_t e = p.experts;
  for (kp::WeightRef *w : {&p.router, &p.routerScale, &p.expertScale, &p.expertBias})
    DLM_RETURN_IF_ERROR(resolve(*w));
  // The experts as the projections: a backend widens or packs them itself.
  for (kp::WeightRef *w : {&p.gateUp, &p.down})
    DLM_RETURN_IF_ERROR(resolve(*w, widenProjections));
  auto shape = [&](const model::HostTensor *t, int64_t rows, int64_t cols, std::string_view what) {
    return t->rows == rows && t->cols == cols
               ? Status::ok()
               : r.error("the " + std::string(what) + " weight is [" + str(t->rows) + ", " +
                         str(t->cols) + "], expected [" + str(rows) + ", " + str(cols) + "]");
  };
  DLM_RETURN_IF_ERROR(shape(p.router.tensor, e, width, kp::kRouter));
  if (p.routerScale)
    DLM_RETURN_IF_ERROR(shape(p.routerScale.tensor, 1, width, kp::kRouterScale));
  if (p.expertScale)
    DLM_RETURN_IF_ERROR(shape(p.expertScale.tensor, 1, e, kp::kExpertScale));
  if (p.expertBias)
    DLM_RETURN_IF_ERROR(shape(p.expertBias.tensor, 1, e, kp::kExpertBias));
  const model::HostTensor &gateUp = *p.gateUp.tensor;
  const std::optional<int64_t> downRows = product(e, width);
  if (gateUp.cols != width || !downRows || e > gateUp.rows || gateUp.rows % (2 * e) != 0 ||
      gateUp.rows == 0)
    return r.error("the gate_up weight of " + str(gateUp.rows) + " rows of " + str(gateUp.cols) +
                   " is not " + str(e) + " experts of [2I, " + str(width) + "]");
  kernel.expertWidth = gateUp.rows / (2 * e);
  DLM_RETURN_IF_ERROR(shape(p.down.tensor, *downRows, kernel.expertWidth, kp::kDownWeight));
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

// A kind whose constraints (KernelOps.td) say all: its weights resolved, in declaration order.
Status RecordChecker::constraintsOnly() {
  Status status = Status::ok();
  std::visit(
      [&](auto &params) {
        params.forEachWeight([&](kp::WeightRef &weight) {
          if (status.isOk())
            status = resolve(weight);
        });
      },
      kernel.params);
  return status;
}

Status RecordChecker::declaredConstraints(bool weightsResolved) {
#define DLM_KERNEL_CONSTRAINTS
#define DLM_KERNEL_CONSTRAINT(Kind, Params, readsWeights, condition, message)                      \
  if (kernel.kind() == KernelKind::Kind && readsWeights == weightsResolved) {                      \
    [[maybe_unused]] const auto &p = kernel.as<kp::Params>();                                      \
    if (!condition)                                                                                \
      return r.error(message);                                                                     \
  }
#include "runtime/schema/KernelRecordSpec.inc"
  return Status::ok();
}

Status RecordChecker::lmHead() {
  if (!last)
    return r.error("lm_head must be the last record");
  auto &p = params<kp::LmHeadParams>();
  if (p.normWeight) {
    if (!p.eps)
      return r.error("parameter 'eps' is missing or not a real");
    DLM_RETURN_IF_ERROR(fusedNorm(p.normWeight));
  }
  DLM_RETURN_IF_ERROR(resolve(p.weight, widenProjections));
  const model::HostTensor &weight = *p.weight.tensor;
  DLM_RETURN_IF_ERROR(expectWidth(weight.cols, widths[0], "the weight's input width"));
  DLM_RETURN_IF_ERROR(expectWidth(width, d.vocabSize, "the logits' width"));
  DLM_RETURN_IF_ERROR(expectWidth(widths[0], d.hidden, "the input width"));
  if (weight.rows < width)
    return r.error("the weight has " + str(weight.rows) + " rows for " + str(width) + " logits");
  return Status::ok();
}

} // namespace dlm::program::detail
