#include "runtime/program/KernelProgram.h"

#include "runtime/model/KernelProgram.h"

#include <algorithm>
#include <variant>

namespace dlm::program {

namespace kp = spec::kernels;

namespace {

std::string str(int64_t value) { return std::to_string(value); }

struct KindInfo {
  std::string_view name;
  KernelKind kind;
  size_t operands; // without the residual of an accumulating linear
  bool hasResult;
};

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
};

// Elementwise kernels read each element before writing it, so their result may sit exactly on an
// operand (planned in place).
bool elementwise(KernelKind kind) {
  return kind == KernelKind::rmsNorm || kind == KernelKind::rope || kind == KernelKind::add ||
         kind == KernelKind::siluMul;
}

// The role of a canonical name, the profile label of a fused norm: "layers.0.attn_norm" →
// "attn_norm".
// The profile label of a record name: "layers.0.rope#2" → "rope".
std::string labelOf(const std::string &name) {
  std::string label = name;
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
                                             const model::ModelWeights &weights,
                                             std::string &name, bool optional = false) const {
    if (optional && !has(key))
      return static_cast<const model::HostTensor *>(nullptr);
    StatusOr<std::string> given = text(key);
    if (!given)
      return given.status();
    const model::HostTensor *tensor = weights.find(*given);
    if (!tensor)
      return error("missing weight '" + *given + "'");
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

StatusOr<KernelProgram> KernelProgram::build(const std::vector<artifact::Kernel> &records,
                                             const model::ModelWeights &weights) {
  const model::ModelDims &d = weights.dims();
  KernelProgram program;
  program.slots.resize(kp::kFirstResultSlot, SlotPlace{-1, 1});
  std::vector<bool> defined(kp::kFirstResultSlot, true);
  std::vector<int64_t> storedK(static_cast<size_t>(d.layers), -1),
      storedV(static_cast<size_t>(d.layers), -1);
  if (records.empty())
    return Status::error("the kernel program is empty");

  for (size_t index = 0; index < records.size(); ++index) {
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
    kernel.fullName = record.name.empty() ? record.kind : record.name;
    kernel.name = labelOf(kernel.fullName);
    DLM_ASSIGN(kernel.layer, r.integer(kp::kLayer));
    DLM_ASSIGN(kernel.operands, r.slots(kp::kOperands));
    if (r.has(kp::kAccumulate)) {
      if (info->kind != KernelKind::linear && info->kind != KernelKind::normLinear)
        return r.error("only linear and norm_linear records accumulate");
      DLM_ASSIGN(kernel.accumulate, r.flag(kp::kAccumulate));
    }
    if (r.has(kp::kCudaKernel))
      DLM_ASSIGN(kernel.cudaKernel, r.text(kp::kCudaKernel));
    const size_t operandCount = info->operands + (kernel.accumulate ? 1 : 0);
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
          kernel.result >= kp::kFirstResultSlot + static_cast<int64_t>(records.size()))
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
      break;
    case KernelKind::rmsNorm:
      DLM_ASSIGN(kernel.weight, r.weight(kp::kWeight, weights, kernel.weightName));
      DLM_ASSIGN(kernel.eps, r.real(kp::kEps));
      DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the input width"));
      if (kernel.weight->rows != 1 || width % kernel.weight->cols != 0)
        return r.error("norm weight of " + str(kernel.weight->cols) +
                       " values does not divide rows of " + str(width));
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
      DLM_ASSIGN(kernel.weight, r.weight(kp::kWeight, weights, kernel.weightName));
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
      break;
    case KernelKind::kvStore:
    case KernelKind::attention: {
      if (kernel.layer < 0 || kernel.layer >= d.layers)
        return r.error("layer " + str(kernel.layer) + " has no KV cache (the model has " +
                       str(d.layers) + " layers)");
      const size_t layer = static_cast<size_t>(kernel.layer);
      const size_t k = info->kind == KernelKind::kvStore ? 0 : 1;
      DLM_RETURN_IF_ERROR(expectWidth(widths[k], d.kvWidth(), "the keys' width"));
      DLM_RETURN_IF_ERROR(expectWidth(widths[k + 1], d.kvWidth(), "the values' width"));
      if (info->kind == KernelKind::kvStore) {
        storedK[layer] = kernel.operands[0];
        storedV[layer] = kernel.operands[1];
        break;
      }
      if (storedK[layer] != kernel.operands[1] || storedV[layer] != kernel.operands[2])
        return r.error("attention reads keys and values that no kv_store of layer " +
                       str(kernel.layer) + " stored");
      std::string mask;
      DLM_ASSIGN(mask, r.text(kp::kMask));
      if (mask != "causal" && mask != "bidirectional")
        return r.error("not supported yet: attention mask '" + mask + "'");
      kernel.causal = mask == "causal";
      DLM_ASSIGN(kernel.heads, r.integer(kp::kHeads));
      DLM_ASSIGN(kernel.kvHeads, r.integer(kp::kKvHeads));
      DLM_ASSIGN(kernel.headDim, r.integer(kp::kHeadDim));
      if (kernel.kvHeads <= 0 || kernel.heads % kernel.kvHeads != 0 ||
          kernel.kvHeads * kernel.headDim != d.kvWidth())
        return r.error(str(kernel.heads) + " heads over " + str(kernel.kvHeads) + " KV heads of " +
                       str(kernel.headDim) + " do not fit the KV cache's " + str(d.kvWidth()) +
                       " values per token");
      DLM_RETURN_IF_ERROR(expectWidth(widths[0], kernel.heads * kernel.headDim, "the queries' width"));
      DLM_RETURN_IF_ERROR(expectWidth(width, widths[0], "the result width"));
      break;
    }
    case KernelKind::add:
    case KernelKind::siluMul:
      DLM_RETURN_IF_ERROR(expectWidth(widths[0], width, "the first operand's width"));
      DLM_RETURN_IF_ERROR(expectWidth(widths[1], width, "the second operand's width"));
      break;
    case KernelKind::lmHead:
      if (index + 1 != records.size())
        return r.error("lm_head must be the last record");
      DLM_ASSIGN(kernel.norm, r.weight(kp::kNormWeight, weights, kernel.normWeightName, true));
      if (kernel.norm) {
        DLM_ASSIGN(kernel.eps, r.real(kp::kEps));
        DLM_RETURN_IF_ERROR(expectWidth(kernel.norm->cols, widths[0], "the norm weight's size"));
        kernel.normName = std::string(kp::weightRole(*r.text(kp::kNormWeight)));
      }
      DLM_ASSIGN(kernel.weight, r.weight(kp::kWeight, weights, kernel.weightName));
      DLM_ASSIGN(kernel.logitShift, r.flag(kp::kLogitShift));
      DLM_RETURN_IF_ERROR(expectWidth(kernel.weight->cols, widths[0], "the weight's input width"));
      DLM_RETURN_IF_ERROR(expectWidth(width, d.vocabSize, "the logits' width"));
      DLM_RETURN_IF_ERROR(expectWidth(widths[0], d.hidden, "the input width"));
      if (kernel.weight->rows < width)
        return r.error("the weight has " + str(kernel.weight->rows) + " rows for " + str(width) +
                       " logits");
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
    return Status::error("the kernel program does not end with an lm_head record");

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
        // silu_mul and rope overwrite their first operand only; an add commutes; an
        // accumulating GEMM adds its product to the residual it sits on.
        const bool inPlaceOperand =
            operand && (k.accumulate ? slot == k.operands[1]
                                     : elementwise(k.kind) &&
                                           (slot == k.operands[0] || k.kind == KernelKind::add));
        const bool inPlace = inPlaceOperand && other.offset == out.offset &&
                             other.width == out.width && lastRead[slot] == static_cast<int64_t>(i);
        if (!inPlace)
          return Status::error("kernel record " + str(static_cast<int64_t>(i)) + " ('" +
                               k.name + "'): result slot " + str(k.result) + " overlaps slot " +
                               str(slot) + ", which is read later");
      }
      live.push_back(k.result);
    }
  }
  return program;
}

} // namespace dlm::program
