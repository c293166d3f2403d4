#include "runtime/program/KernelProgram.h"

#include "runtime/model/KernelProgram.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <variant>

namespace dlm::program {

namespace kp = spec::kernels;

namespace {

std::string str(int64_t value) { return std::to_string(value); }

// a * b of record fields, which a damaged artifact makes anything: nullopt past int64 (the
// product would be undefined), which no width equals.
std::optional<int64_t> product(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

struct KindInfo {
  std::string_view name;
  KernelKind kind;
  size_t operands; // without the residual of an accumulating linear; kAnyOperands: one or more
  bool hasResult;
};

constexpr size_t kAnyOperands = ~size_t(0);

constexpr KindInfo kKinds[] = {
    {kp::kEmbedding, KernelKind::embedding, 1, true},
    {kp::kRmsNorm, KernelKind::rmsNorm, 1, true},
    {kp::kNormLinear, KernelKind::normLinear, 1, true},
    {kp::kLinear, KernelKind::linear, 1, true},
    {kp::kRope, KernelKind::rope, 2, true},
    {kp::kKvStore, KernelKind::kvStore, 2, false},
    {kp::kAttention, KernelKind::attention, 3, true},
    {kp::kAdd, KernelKind::add, 2, true},
    {kp::kSiluMul, KernelKind::siluMul, 2, true},
    {kp::kLmHead, KernelKind::lmHead, 1, true},
    {kp::kScale, KernelKind::scale, 1, true},
    {kp::kGeluMul, KernelKind::geluMul, 2, true},
    {kp::kSoftEmbedding, KernelKind::softEmbedding, 0, true},
    {kp::kMoe, KernelKind::moe, 2, true},
    {kp::kForwardInput, KernelKind::forwardInput, 0, true},
    {kp::kSelectInputRows, KernelKind::selectInputRows, 2, true},
    {kp::kCapture, KernelKind::capture, kAnyOperands, false},
};

// The most KV cache layers a program may address (a corrupt layer index would size the cache).
constexpr int64_t kMaxKvLayers = int64_t(1) << 16;

// Elementwise kernels read each element before writing it, so their result may sit exactly on an
// operand (planned in place).
bool elementwise(KernelKind kind) {
  return kind == KernelKind::rmsNorm || kind == KernelKind::rope || kind == KernelKind::add ||
         kind == KernelKind::siluMul || kind == KernelKind::scale || kind == KernelKind::geluMul ||
         kind == KernelKind::selectInputRows;
}

// The profile label of a record name: "layers.0.rope#2" → "rope"; a function's prefix goes too
// ("decode.layers.0.q_proj" → "q_proj" for the record of function "decode").
std::string labelOf(const std::string &name, const std::string &function) {
  std::string label = name;
  if (!function.empty() && label.rfind(function + ".", 0) == 0)
    label = label.substr(function.size() + 1);
  if (label.rfind("layers.", 0) == 0) {
    size_t dot = label.find('.', 7);
    if (dot != std::string::npos)
      label = label.substr(dot + 1);
  }
  size_t hash = label.find('#');
  return hash == std::string::npos ? label : label.substr(0, hash);
}

// One record being read; errors carry its position and name.
class RecordReader {
public:
  RecordReader(const artifact::Kernel &record, size_t index)
      : record_(record),
        where_("kernel record " + std::to_string(index) + " ('" + record.name + "')") {}

  Status error(const std::string &message) const { return Status::error(where_ + ": " + message); }
  const std::string &where() const { return where_; }

  bool has(std::string_view key) const { return record_.parameters.count(key) != 0; }

  template <typename T> StatusOr<T> get(std::string_view key, const char *type) const {
    auto it = record_.parameters.find(key);
    if (it == record_.parameters.end() || !std::holds_alternative<T>(it->second))
      return error("parameter '" + std::string(key) + "' is missing or not " + type);
    return std::get<T>(it->second);
  }
  StatusOr<int64_t> integer(std::string_view key) const { return get<int64_t>(key, "an integer"); }
  StatusOr<double> real(std::string_view key) const { return get<double>(key, "a real"); }
  StatusOr<std::string> text(std::string_view key) const { return get<std::string>(key, "text"); }
  StatusOr<bool> flag(std::string_view key) const { return get<bool>(key, "a boolean"); }

  StatusOr<std::vector<int64_t>> slots(std::string_view key) const {
    StatusOr<std::string> list = text(key);
    if (!list)
      return list.status();
    std::vector<int64_t> slots;
    size_t start = 0;
    while (start <= list->size()) {
      size_t end = list->find(',', start);
      if (end == std::string::npos)
        end = list->size();
      std::string item = list->substr(start, end - start);
      if (item.empty() || item.size() > 9 ||
          !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return error("operands '" + *list + "' is not a comma-separated list of slot numbers");
      slots.push_back(std::stoll(item));
      start = end + 1;
    }
    return slots;
  }

  // The tensor named by parameter `key`, its name kept in `name`.
  StatusOr<const model::HostTensor *> weight(std::string_view key,
                                             const model::ModelWeights &weights, std::string &name,
                                             bool optional = false, bool widen = true) const {
    if (optional && !has(key))
      return static_cast<const model::HostTensor *>(nullptr);
    StatusOr<std::string> given = text(key);
    if (!given)
      return given.status();
    const model::HostTensor *tensor = weights.find(*given);
    if (!tensor)
      return error("missing weight '" + *given + "'");
    if (widen) {
      StatusOr<const model::HostTensor *> widened = weights.widened(*given);
      if (!widened)
        return error(widened.status().message());
    }
    name = *given;
    return tensor;
  }

private:
  const artifact::Kernel &record_;
  std::string where_;
};

#define DLM_ASSIGN(target, expr)                                                                   \
  do {                                                                                             \
    auto value_ = (expr);                                                                          \
    if (!value_)                                                                                   \
      return value_.status();                                                                      \
    target = *value_;                                                                              \
  } while (0)

} // namespace

// The most floats the memory plan may give one token row (a 1M-wide hidden state would be far
// below it); a record past it is corrupt.
constexpr int64_t kMaxRowElements = int64_t(1) << 26;

namespace {

// The function of a record: its `function` parameter, kDefaultFunction when absent.
StatusOr<std::string> functionOf(const artifact::Kernel &record, size_t index) {
  auto it = record.parameters.find(kp::kFunction);
  if (it == record.parameters.end())
    return std::string(kp::kDefaultFunction);
  if (!std::holds_alternative<std::string>(it->second) || std::get<std::string>(it->second).empty())
    return RecordReader(record, index).error("parameter 'function' is not a function name");
  return std::get<std::string>(it->second);
}

// An optional parameter: `fallback` when absent, else it must have the type.
template <typename T>
StatusOr<T> optional(const RecordReader &r, std::string_view key, const char *type, T fallback) {
  if (!r.has(key))
    return fallback;
  return r.get<T>(key, type);
}

// One function: records[indices[i]], in order. Errors carry the records' indices in the whole
// list. `kvWidths` (one per model layer, 0 = not seen yet) is shared by every function.
StatusOr<KernelProgram> buildFunction(const std::vector<artifact::Kernel> &records,
                                      const std::vector<size_t> &indices,
                                      const model::ModelWeights &weights,
                                      const std::string &function, std::vector<int64_t> &kvWidths,
                                      KernelProgram::ProjectionWeights projections) {
  const bool widenProjections = projections == KernelProgram::ProjectionWeights::widened;
  const model::ModelDims &d = weights.dims();
  KernelProgram program;
  program.function = function;
  program.slots.resize(kp::kFirstResultSlot, SlotPlace{-1, 1});
  std::vector<bool> defined(kp::kFirstResultSlot, true);
  // The slots each KV layer's kv_store stored, grown with the layers this function stores.
  std::vector<int64_t> storedK, storedV;
  const std::string inFunction =
      function == kp::kDefaultFunction ? "" : "function '" + function + "': ";
  if (indices.empty())
    return Status::error("the kernel program is empty");

  for (size_t position = 0; position < indices.size(); ++position) {
    const size_t index = indices[position];
    const artifact::Kernel &record = records[index];
    RecordReader r(record, index);
    const KindInfo *info = nullptr;
    for (const KindInfo &k : kKinds)
      if (k.name == record.kind)
        info = &k;
    if (!info)
      return Status::error("not supported yet: kernel kind '" + record.kind + "' (" +
                           r.where() + ")");
    ProgramRecord kernel;
    kernel.kind = info->kind;
    kernel.function = function;
    kernel.fullName = record.name.empty() ? record.kind : record.name;
    kernel.name = labelOf(kernel.fullName, function == kp::kDefaultFunction ? "" : function);
    DLM_ASSIGN(kernel.layer, r.integer(kp::kLayer));
    StatusOr<std::string> operandList =
        r.has(kp::kOperands) ? r.text(kp::kOperands) : StatusOr<std::string>(std::string());
    if (info->operands == 0 && operandList && operandList->empty())
      kernel.operands.clear(); // a record without operands may leave the list out
    else
      DLM_ASSIGN(kernel.operands, r.slots(kp::kOperands));
    if (r.has(kp::kAccumulate)) {
      if (info->kind != KernelKind::linear && info->kind != KernelKind::normLinear)
        return r.error("only linear and norm_linear records accumulate");
      DLM_ASSIGN(kernel.accumulate, r.flag(kp::kAccumulate));
    }
    if (r.has(kp::kCudaKernel))
      DLM_ASSIGN(kernel.cudaKernel, r.text(kp::kCudaKernel));
    const size_t operandCount =
        info->operands == kAnyOperands
            ? std::max<size_t>(kernel.operands.size(), 1)
            : info->operands + (kernel.accumulate ? 1 : 0);
    if (kernel.operands.size() != operandCount)
      return r.error(record.kind + " takes " + str(static_cast<int64_t>(operandCount)) +
                     " operands, got " + str(static_cast<int64_t>(kernel.operands.size())));
    std::vector<int64_t> widths;
    for (int64_t slot : kernel.operands) {
      if (slot >= static_cast<int64_t>(defined.size()) || !defined[slot])
        return r.error("operand slot " + str(slot) + " is not defined by an earlier record");
      widths.push_back(program.slots[slot].width);
    }
    // The two inputs are read only where they mean something.
    for (size_t i = 0; i < kernel.operands.size(); ++i) {
      const int64_t slot = kernel.operands[i];
      const int64_t wanted = info->kind == KernelKind::embedding        ? kp::kTokensSlot
                             : info->kind == KernelKind::rope && i == 1 ? kp::kPositionsSlot
                                                                        : -1;
      if (wanted >= 0 && slot != wanted)
        return r.error("operand " + str(static_cast<int64_t>(i)) + " must be slot " + str(wanted) +
                       (wanted == kp::kTokensSlot ? " (the token ids)" : " (the positions)"));
      if (wanted < 0 && slot < kp::kFirstResultSlot)
        return r.error("operand slot " + str(slot) + " is a forward input, not a tensor of rows");
    }

    SlotPlace place;
    if (info->hasResult) {
      DLM_ASSIGN(kernel.result, r.integer(kp::kResult));
      DLM_ASSIGN(place.width, r.integer(kp::kWidth));
      // At most one result per record: the slots are dense.
      if (kernel.result < kp::kFirstResultSlot ||
          kernel.result >= kp::kFirstResultSlot + static_cast<int64_t>(indices.size()))
        return r.error("result slot " + str(kernel.result) + " is out of range");
      if (kernel.result < static_cast<int64_t>(defined.size()) && defined[kernel.result])
        return r.error("result slot " + str(kernel.result) + " is already defined");
      if (place.width <= 0)
        return r.error("result width " + str(place.width) + " is not positive");
      if (info->kind != KernelKind::lmHead) {
        DLM_ASSIGN(place.offset, r.integer(kp::kOffset));
        if (place.offset < 0)
          return r.error("result offset " + str(place.offset) + " is negative");
        // Bounds the workspace (floats per token row) before it is ever sized from it.
        if (place.width > kMaxRowElements || place.offset > kMaxRowElements - place.width)
          return r.error("result offset " + str(place.offset) + " + width " + str(place.width) +
                         " exceeds the " + str(kMaxRowElements) + " floats a token row may plan");
      }
    }
    const int64_t width = place.width;
    auto expectWidth = [&](int64_t actual, int64_t expected, const std::string &what) {
      return actual == expected
                 ? Status::ok()
                 : r.error(what + " is " + str(actual) + ", expected " + str(expected));
    };
    switch (info->kind) {
    case KernelKind::embedding:
      DLM_ASSIGN(kernel.weight, r.weight(kp::kWeight, weights, kernel.weightName));
      DLM_RETURN_IF_ERROR(expectWidth(kernel.weight->cols, width, "the table's row width"));
      if (kernel.weight->rows < d.embeddingSize)
        return r.error("the table has " + str(kernel.weight->rows) + " rows for " +
                       str(d.embeddingSize) + " token ids");
      DLM_ASSIGN(kernel.scale, optional<double>(r, kp::kScaleParameter, "a real", 1.0));
      if (!std::isfinite(kernel.scale))
        return r.error("the embedding scale is not finite");
      break;
    case KernelKind::softEmbedding:
      DLM_ASSIGN(kernel.weight, r.weight(kp::kWeight, weights, kernel.weightName));
      DLM_RETURN_IF_ERROR(expectWidth(kernel.weight->cols, width, "the table's row width"));
      DLM_ASSIGN(kernel.scale, optional<double>(r, kp::kScaleParameter, "a real", 1.0));
      if (!std::isfinite(kernel.scale))
        return r.error("the embedding scale is not finite");
      break;
    case KernelKind::rmsNorm:
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
      break;
    case KernelKind::scale:
      DLM_ASSIGN(kernel.weight, r.weight(kp::kWeight, weights, kernel.weightName));
      DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the input width"));
      if (kernel.weight->rows * kernel.weight->cols != 1)
        return r.error("the scale weight has " + str(kernel.weight->rows * kernel.weight->cols) +
                       " values, expected 1");
      break;
    case KernelKind::normLinear:
    case KernelKind::linear:
      if (info->kind == KernelKind::normLinear) {
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
        if (info->kind == KernelKind::linear && kernel.operands[0] == kernel.operands[1])
          return r.error("an accumulating linear reads its residual as its input");
        DLM_RETURN_IF_ERROR(expectWidth(widths[1], width, "the residual's width"));
      }
      break;
    case KernelKind::rope:
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
      break;
    case KernelKind::kvStore:
    case KernelKind::attention: {
      // A kv_store past the model's layers adds a KV layer (a drafter's, after its target's).
      if (kernel.layer < 0 || kernel.layer >= kMaxKvLayers)
        return r.error("layer " + str(kernel.layer) + " has no KV cache (KV layers are [0, " +
                       str(kMaxKvLayers) + "))");
      const size_t layer = static_cast<size_t>(kernel.layer);
      if (info->kind == KernelKind::kvStore && layer >= storedK.size()) {
        storedK.resize(layer + 1, -1);
        storedV.resize(layer + 1, -1);
      }
      if (info->kind == KernelKind::kvStore && layer >= kvWidths.size())
        kvWidths.resize(layer + 1, 0);
      if (info->kind == KernelKind::kvStore) {
        // The layer's KV width is what its kv_store records store; every one of them, in every
        // function, agrees.
        DLM_RETURN_IF_ERROR(expectWidth(widths[1], widths[0], "the values' width"));
        if (kvWidths[layer] != 0 && kvWidths[layer] != widths[0])
          return r.error("layer " + str(kernel.layer) + " stores K/V of " + str(widths[0]) +
                         " values per token where another kv_store of it stores " +
                         str(kvWidths[layer]));
        kvWidths[layer] = widths[0];
        storedK[layer] = kernel.operands[0];
        storedV[layer] = kernel.operands[1];
        break;
      }
      if (layer >= storedK.size() || storedK[layer] != kernel.operands[1] ||
          storedV[layer] != kernel.operands[2])
        return r.error("attention reads keys and values that no kv_store of layer " +
                       str(kernel.layer) + " stored");
      const int64_t kvWidth = kvWidths[layer];
      std::string mask;
      DLM_ASSIGN(mask, r.text(kp::kMask));
      if (mask != "causal" && mask != "bidirectional")
        return r.error("not supported yet: attention mask '" + mask + "'");
      kernel.causal = mask == "causal";
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
      DLM_ASSIGN(kernel.scale,
                 optional<double>(r, kp::kScaleParameter, "a real",
                                  1.0 / std::sqrt(static_cast<double>(kernel.headDim))));
      // Positive: a kernel reads 0 as "1 / sqrt(head_dim)" (AttentionShape).
      if (!(kernel.scale > 0) || !std::isfinite(kernel.scale))
        return r.error("the attention scale " + std::to_string(kernel.scale) +
                       " is not positive and finite");
      DLM_ASSIGN(kernel.window, optional<int64_t>(r, kp::kWindow, "an integer", 0));
      if (r.has(kp::kWindow) && kernel.window <= 0)
        return r.error("window " + str(kernel.window) + " is not positive");
      break;
    }
    case KernelKind::moe: {
      DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the router input's width"));
      DLM_RETURN_IF_ERROR(expectWidth(widths[1], width, "the expert input's width"));
      DLM_ASSIGN(kernel.experts, r.integer(kp::kExperts));
      DLM_ASSIGN(kernel.topK, r.integer(kp::kTopK));
      DLM_ASSIGN(kernel.eps, r.real(kp::kEps));
      DLM_ASSIGN(kernel.routerInputScale, r.real(kp::kRouterInputScale));
      std::string activation;
      DLM_ASSIGN(activation, r.text(kp::kActivation));
      if (activation != kp::kActivationGeluTanh && activation != kp::kActivationSilu)
        return r.error("not supported yet: expert activation '" + activation +
                       "' (gelu_tanh or silu)");
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
      auto shape = [&](const model::HostTensor *t, int64_t rows, int64_t cols,
                       std::string_view what) {
        return t->rows == rows && t->cols == cols
                   ? Status::ok()
                   : r.error("the " + std::string(what) + " weight is [" + str(t->rows) + ", " +
                             str(t->cols) + "], expected [" + str(rows) + ", " + str(cols) + "]");
      };
      DLM_RETURN_IF_ERROR(shape(m.router, e, width, kp::kRouter));
      DLM_RETURN_IF_ERROR(shape(m.routerScale, 1, width, kp::kRouterScale));
      DLM_RETURN_IF_ERROR(shape(m.expertScale, 1, e, kp::kExpertScale));
      const std::optional<int64_t> downRows = product(e, width);
      if (m.gateUp->cols != width || !downRows || e > m.gateUp->rows ||
          m.gateUp->rows % (2 * e) != 0 || m.gateUp->rows == 0)
        return r.error("the gate_up weight of " + str(m.gateUp->rows) + " rows of " +
                       str(m.gateUp->cols) + " is not " + str(e) + " experts of [2I, " +
                       str(width) + "]");
      kernel.expertWidth = m.gateUp->rows / (2 * e);
      DLM_RETURN_IF_ERROR(shape(m.down, *downRows, kernel.expertWidth, kp::kDownWeight));
      break;
    }
    case KernelKind::forwardInput:
      // Every forward_input of a function reads the same input rows.
      if (program.forwardInputWidth != 0 && program.forwardInputWidth != width)
        return r.error("forward_input of width " + str(width) + " where another reads " +
                       str(program.forwardInputWidth));
      program.forwardInputWidth = width;
      break;
    case KernelKind::capture:
      if (program.captureWidth != 0)
        return r.error("a function captures its rows once (a second capture record)");
      for (size_t i = 1; i < widths.size(); ++i)
        DLM_RETURN_IF_ERROR(expectWidth(widths[i], widths[0],
                                        "operand " + str(static_cast<int64_t>(i)) + "'s width"));
      if (std::optional<int64_t> captured = product(widths[0], static_cast<int64_t>(widths.size())))
        program.captureWidth = *captured;
      else
        return r.error("a capture of " + str(static_cast<int64_t>(widths.size())) + " x " +
                       str(widths[0]) + " values is past 64-bit integers");
      break;
    case KernelKind::selectInputRows:
    case KernelKind::add:
    case KernelKind::siluMul:
    case KernelKind::geluMul:
      DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the first operand's width"));
      DLM_RETURN_IF_ERROR(expectWidth(widths[1], width, "the second operand's width"));
      break;
    case KernelKind::lmHead:
      if (position + 1 != indices.size())
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
      break;
    }
    if (kernel.kind == KernelKind::normLinear && !program.kernels.empty()) {
      const ProgramRecord &previous = program.kernels.back();
      kernel.reusesNorm = previous.kind == KernelKind::normLinear &&
                          previous.operands[0] == kernel.operands[0] &&
                          previous.norm == kernel.norm &&
                          previous.eps == kernel.eps;
    }
    if (info->hasResult) {
      if (kernel.result >= static_cast<int64_t>(defined.size())) {
        defined.resize(static_cast<size_t>(kernel.result) + 1, false);
        program.slots.resize(static_cast<size_t>(kernel.result) + 1);
      }
      defined[kernel.result] = true;
      program.slots[kernel.result] = place;
      if (place.offset >= 0)
        program.rowElements = std::max(program.rowElements, place.offset + place.width);
    }
    program.kernels.push_back(std::move(kernel));
  }
  if (program.kernels.back().kind != KernelKind::lmHead)
    return Status::error(inFunction + "the kernel program does not end with an lm_head record");

  // The memory plan: a result may not land on a value that is still to be read, except exactly on
  // an operand of an elementwise kernel (in place).
  std::vector<int64_t> lastRead(program.slots.size(), -1);
  for (size_t i = 0; i < program.kernels.size(); ++i)
    for (int64_t slot : program.kernels[i].operands)
      lastRead[slot] = static_cast<int64_t>(i);
  std::vector<int64_t> live; // slots defined so far
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    const ProgramRecord &k = program.kernels[i];
    const SlotPlace &out = program.slots[std::max<int64_t>(k.result, 0)];
    if (k.result >= 0 && out.offset >= 0) {
      for (int64_t slot : live) {
        const SlotPlace &other = program.slots[slot];
        const bool overlaps =
            other.offset < out.offset + out.width && out.offset < other.offset + other.width;
        if (!overlaps || lastRead[slot] < static_cast<int64_t>(i))
          continue;
        const bool operand =
            std::find(k.operands.begin(), k.operands.end(), slot) != k.operands.end();
        // silu_mul and rope overwrite their first operand only; an add commutes, and a row
        // selection reads each row of either operand before writing it; an accumulating GEMM
        // adds its product to the residual it sits on.
        const bool eitherOperand =
            k.kind == KernelKind::add || k.kind == KernelKind::selectInputRows;
        const bool inPlaceOperand =
            operand && (k.accumulate ? slot == k.operands[1]
                                     : elementwise(k.kind) &&
                                           (slot == k.operands[0] || eitherOperand));
        const bool inPlace = inPlaceOperand && other.offset == out.offset &&
                             other.width == out.width && lastRead[slot] == static_cast<int64_t>(i);
        if (!inPlace)
          return Status::error("kernel record " + str(static_cast<int64_t>(indices[i])) + " ('" +
                               k.name + "'): result slot " + str(k.result) + " overlaps slot " +
                               str(slot) + ", which is read later");
      }
      live.push_back(k.result);
    }
  }
  return program;
}

} // namespace

StatusOr<std::map<std::string, KernelProgram>>
KernelProgram::buildFunctions(const std::vector<artifact::Kernel> &records,
                              const model::ModelWeights &weights, ProjectionWeights projections) {
  if (records.empty())
    return Status::error("the kernel program is empty");
  // The records of each function, in their order.
  std::map<std::string, std::vector<size_t>> grouped;
  for (size_t i = 0; i < records.size(); ++i) {
    std::string function;
    DLM_ASSIGN(function, functionOf(records[i], i));
    grouped[function].push_back(i);
  }
  std::vector<int64_t> kvWidths(static_cast<size_t>(std::max<int64_t>(weights.dims().layers, 0)),
                                0);
  std::map<std::string, KernelProgram> functions;
  for (const auto &[name, indices] : grouped) {
    StatusOr<KernelProgram> program =
        buildFunction(records, indices, weights, name, kvWidths, projections);
    if (!program)
      return program.status();
    functions.emplace(name, std::move(*program));
  }
  for (auto &[name, program] : functions)
    program.kvLayerWidths = kvWidths;
  return functions;
}

StatusOr<KernelProgram> KernelProgram::build(const std::vector<artifact::Kernel> &records,
                                             const model::ModelWeights &weights,
                                             ProjectionWeights projections) {
  StatusOr<std::map<std::string, KernelProgram>> functions =
      buildFunctions(records, weights, projections);
  if (!functions)
    return functions.status();
  auto it = functions->find(std::string(kp::kDefaultFunction));
  if (it == functions->end()) {
    std::string names;
    for (const auto &[name, program] : *functions)
      names += (names.empty() ? "'" : ", '") + name + "'";
    return Status::error("the kernel program has no '" + std::string(kp::kDefaultFunction) +
                         "' function (it has " + names + ")");
  }
  return std::move(it->second);
}

bool KernelProgram::readsInput() const {
  return std::any_of(kernels.begin(), kernels.end(), [](const ProgramRecord &k) {
    return k.kind == KernelKind::softEmbedding || k.kind == KernelKind::forwardInput;
  });
}

std::vector<const model::HostTensor *> ProgramRecord::tensors() const {
  std::vector<const model::HostTensor *> all;
  for (const model::HostTensor *t : {weight, bias, norm, moeWeights.router, moeWeights.routerScale,
                                     moeWeights.expertScale, moeWeights.gateUp, moeWeights.down})
    if (t)
      all.push_back(t);
  return all;
}

std::vector<std::string> ProgramRecord::tensorNames() const {
  std::vector<std::string> all;
  for (const std::string *name : {&weightName, &biasName, &normWeightName})
    if (!name->empty())
      all.push_back(*name);
  for (const std::string &name : moeWeightNames)
    if (!name.empty())
      all.push_back(name);
  return all;
}

} // namespace dlm::program
