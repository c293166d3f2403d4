#include "runtime/program/KernelProgram.h"

#include "runtime/model/KernelProgram.h"
#include "runtime/program/KernelRecordChecks.h"
#include "runtime/program/KernelRecordReader.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <variant>

namespace dlm::program {

namespace kp = spec::kernels;

namespace {

using namespace detail;

// Whether the result of `k` may sit exactly on operand `slot`, which it reads last: its kind's
// in-place rule (KernelOps.td); an accumulating GEMM adds its product to the residual it sits on.
bool mayPlaceOn(const ProgramRecord &k, int64_t slot) {
  if (k.accumulates())
    return slot == k.operands[1];
  switch (kp::kKindContracts[static_cast<size_t>(k.kind())].inPlace) {
  case kp::InPlace::none:
    return false;
  case kp::InPlace::firstOperand:
    return slot == k.operands[0];
  case kp::InPlace::anyOperand:
    return true;
  }
  return false;
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

// The most floats the memory plan may give one token row (a 1M-wide hidden state would be far
// below it); a record past it is corrupt.
constexpr int64_t kMaxRowElements = int64_t(1) << 26;

// The function of a record: its `function` parameter, kDefaultFunction when absent.
StatusOr<std::string> functionOf(const artifact::Kernel &record, size_t index) {
  auto it = record.parameters.find(kp::kFunction);
  if (it == record.parameters.end())
    return std::string(kp::kDefaultFunction);
  if (!std::holds_alternative<std::string>(it->second) || std::get<std::string>(it->second).empty())
    return RecordReader(record, index).error("parameter 'function' is not a function name");
  return std::get<std::string>(it->second);
}

// One function: records[indices[i]], in order. Errors carry the records' indices in the whole
// list. The KV layers' widths are shared by every function.
class FunctionBuilder {
public:
  FunctionBuilder(const std::vector<artifact::Kernel> &records, const std::vector<size_t> &indices,
                  const model::ModelWeights &weights, const std::string &function,
                  std::vector<int64_t> &kvWidths, KernelProgram::ProjectionWeights projections)
      : records_(records), indices_(indices), weights_(weights), function_(function),
        widenProjections_(projections == KernelProgram::ProjectionWeights::widened),
        kv_(KvLayers{kvWidths, {}, {}}) {
    program_.function = function;
    program_.slots.resize(kp::kFirstResultSlot, SlotPlace{-1, 1});
    defined_.assign(kp::kFirstResultSlot, true);
  }

  StatusOr<KernelProgram> build() {
    if (indices_.empty())
      return Status::error("the kernel program is empty");
    for (size_t position = 0; position < indices_.size(); ++position)
      DLM_RETURN_IF_ERROR(add(position));
    if (program_.kernels.back().kind() != KernelKind::lmHead)
      return Status::error(
          std::string(function_ == kp::kDefaultFunction ? "" : "function '" + function_ + "': ") +
          "the kernel program does not end with an lm_head record");
    DLM_RETURN_IF_ERROR(checkMemoryPlan());
    return std::move(program_);
  }

private:
  Status add(size_t position) {
    const size_t index = indices_[position];
    const artifact::Kernel &record = records_[index];
    RecordReader r(record, index);
    const std::optional<KernelKindSpec> spec = findKernelKind(record.kind);
    if (!spec)
      return Status::error("not supported yet: kernel kind '" + record.kind + "' (" + r.where() +
                           ")");
    DLM_RETURN_IF_ERROR(checkDeclaredParameters(r, *spec));
    ProgramRecord kernel;
    StatusOr<kp::KernelParams> params = kp::readKernelParams(spec->kind(), record.parameters);
    if (!params)
      return r.error(params.status().message());
    kernel.params = std::move(*params);
    kernel.function = function_;
    kernel.fullName = record.name.empty() ? record.kind : record.name;
    kernel.name = labelOf(kernel.fullName, function_ == kp::kDefaultFunction ? "" : function_);
    DLM_ASSIGN(kernel.layer, r.integer(kp::kLayer));
    std::vector<int64_t> widths;
    DLM_RETURN_IF_ERROR(readOperands(r, *spec, kernel, widths));
    SlotPlace place;
    if (spec->contract.hasResult)
      DLM_RETURN_IF_ERROR(readResult(r, kernel, place));
    RecordChecker checker(r, kernel, program_, widths, place.width, weights_, widenProjections_,
                          kv_, position + 1 == indices_.size());
    // Scalars and widths first, then what needs the model: the kind's check resolves the weights.
    DLM_RETURN_IF_ERROR(checker.declaredConstraints(false));
    DLM_RETURN_IF_ERROR((checker.*(spec->check))());
    DLM_RETURN_IF_ERROR(checker.declaredConstraints(true));
    if (kernel.kind() == KernelKind::normLinear && !program_.kernels.empty()) {
      const ProgramRecord &previous = program_.kernels.back();
      kernel.reusesNorm =
          previous.kind() == KernelKind::normLinear && previous.operands[0] == kernel.operands[0] &&
          previous.norm() == kernel.norm() &&
          previous.as<kp::NormLinearParams>().eps == kernel.as<kp::NormLinearParams>().eps;
    }
    if (spec->contract.hasResult)
      define(kernel.result, place);
    program_.kernels.push_back(std::move(kernel));
    return Status::ok();
  }

  // The operand slots (defined by earlier records; the forward's inputs only where they mean
  // something) and the CUDA kernel; `widths` gets the operands' widths.
  Status readOperands(const RecordReader &r, const KernelKindSpec &spec, ProgramRecord &kernel,
                      std::vector<int64_t> &widths) const {
    StatusOr<std::string> operandList =
        r.has(kp::kOperands) ? r.text(kp::kOperands) : StatusOr<std::string>(std::string());
    if (spec.contract.operands == 0 && operandList && operandList->empty())
      kernel.operands.clear(); // a record without operands may leave the list out
    else
      DLM_ASSIGN(kernel.operands, r.slots(kp::kOperands));
    if (r.has(kp::kCudaKernel))
      DLM_ASSIGN(kernel.cudaKernel, r.text(kp::kCudaKernel));
    const int operands = spec.contract.operands;
    const size_t operandCount =
        operands == kp::kAnyOperandCount
            ? std::max<size_t>(kernel.operands.size(), 1)
            : static_cast<size_t>(operands) + (kernel.accumulates() ? 1 : 0);
    if (kernel.operands.size() != operandCount)
      return r.error(std::string(spec.contract.name) + " takes " +
                     str(static_cast<int64_t>(operandCount)) + " operands, got " +
                     str(static_cast<int64_t>(kernel.operands.size())));
    for (size_t i = 0; i < kernel.operands.size(); ++i) {
      const int64_t slot = kernel.operands[i];
      if (slot >= static_cast<int64_t>(defined_.size()) || !defined_[slot])
        return r.error("operand slot " + str(slot) + " is not defined by an earlier record");
      widths.push_back(program_.slots[slot].width);
      const int64_t wanted = spec.kind() == KernelKind::embedding        ? kp::kTokensSlot
                             : spec.kind() == KernelKind::rope && i == 1 ? kp::kPositionsSlot
                                                                         : -1;
      if (wanted >= 0 && slot != wanted)
        return r.error("operand " + str(static_cast<int64_t>(i)) + " must be slot " + str(wanted) +
                       (wanted == kp::kTokensSlot ? " (the token ids)" : " (the positions)"));
      if (wanted < 0 && slot < kp::kFirstResultSlot)
        return r.error("operand slot " + str(slot) + " is a forward input, not a tensor of rows");
    }
    return Status::ok();
  }

  // The result's slot (new, in range: at most one result per record, so the slots are dense)
  // and its place in the memory plan (none for lm_head's logits).
  Status readResult(const RecordReader &r, ProgramRecord &kernel, SlotPlace &place) const {
    DLM_ASSIGN(kernel.result, r.integer(kp::kResult));
    DLM_ASSIGN(place.width, r.integer(kp::kWidth));
    if (kernel.result < kp::kFirstResultSlot ||
        kernel.result >= kp::kFirstResultSlot + static_cast<int64_t>(indices_.size()))
      return r.error("result slot " + str(kernel.result) + " is out of range");
    if (kernel.result < static_cast<int64_t>(defined_.size()) && defined_[kernel.result])
      return r.error("result slot " + str(kernel.result) + " is already defined");
    if (place.width <= 0)
      return r.error("result width " + str(place.width) + " is not positive");
    if (kernel.kind() == KernelKind::lmHead)
      return Status::ok();
    DLM_ASSIGN(place.offset, r.integer(kp::kOffset));
    if (place.offset < 0)
      return r.error("result offset " + str(place.offset) + " is negative");
    // Bounds the workspace (floats per token row) before it is ever sized from it.
    if (place.width > kMaxRowElements || place.offset > kMaxRowElements - place.width)
      return r.error("result offset " + str(place.offset) + " + width " + str(place.width) +
                     " exceeds the " + str(kMaxRowElements) + " floats a token row may plan");
    return Status::ok();
  }

  void define(int64_t slot, const SlotPlace &place) {
    if (slot >= static_cast<int64_t>(defined_.size())) {
      defined_.resize(static_cast<size_t>(slot) + 1, false);
      program_.slots.resize(static_cast<size_t>(slot) + 1);
    }
    defined_[slot] = true;
    program_.slots[slot] = place;
    if (place.offset >= 0)
      program_.rowElements = std::max(program_.rowElements, place.offset + place.width);
  }

  // The memory plan: a result may not land on a value that is still to be read, except exactly
  // on an operand of an elementwise kernel (in place).
  Status checkMemoryPlan() const {
    std::vector<int64_t> lastRead(program_.slots.size(), -1);
    for (size_t i = 0; i < program_.kernels.size(); ++i)
      for (int64_t slot : program_.kernels[i].operands)
        lastRead[slot] = static_cast<int64_t>(i);
    std::vector<int64_t> live; // slots defined so far
    for (size_t i = 0; i < program_.kernels.size(); ++i) {
      const ProgramRecord &k = program_.kernels[i];
      const SlotPlace &out = program_.slots[std::max<int64_t>(k.result, 0)];
      if (k.result >= 0 && out.offset >= 0) {
        for (int64_t slot : live) {
          const SlotPlace &other = program_.slots[slot];
          const bool overlaps =
              other.offset < out.offset + out.width && out.offset < other.offset + other.width;
          if (!overlaps || lastRead[slot] < static_cast<int64_t>(i))
            continue;
          const bool operand =
              std::find(k.operands.begin(), k.operands.end(), slot) != k.operands.end();
          const bool inPlace = operand && mayPlaceOn(k, slot) && other.offset == out.offset &&
                               other.width == out.width &&
                               lastRead[slot] == static_cast<int64_t>(i);
          if (!inPlace)
            return Status::error("kernel record " + str(static_cast<int64_t>(indices_[i])) + " ('" +
                                 k.name + "'): result slot " + str(k.result) + " overlaps slot " +
                                 str(slot) + ", which is read later");
        }
        live.push_back(k.result);
      }
    }
    return Status::ok();
  }

  const std::vector<artifact::Kernel> &records_;
  const std::vector<size_t> &indices_;
  const model::ModelWeights &weights_;
  const std::string &function_;
  const bool widenProjections_;
  KvLayers kv_;
  KernelProgram program_;
  std::vector<bool> defined_; // per slot: written by an earlier record (or an input)
};

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
        FunctionBuilder(records, indices, weights, name, kvWidths, projections).build();
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
    return k.kind() == KernelKind::softEmbedding || k.kind() == KernelKind::forwardInput;
  });
}

namespace {

// What `member` reads from the record's parameters (a lambda whose return type names the
// member, so that it is invocable only on the kinds that declare it); `absent` for the others.
template <typename Value, typename Member>
Value memberOf(const kp::KernelParams &params, Member member, Value absent) {
  return std::visit(
      [&](const auto &p) -> Value {
        if constexpr (std::is_invocable_v<Member, decltype(p)>)
          return member(p);
        return absent;
      },
      params);
}

const kp::WeightRef *present(const kp::WeightRef &w) { return w ? &w : nullptr; }
const model::HostTensor *tensorOf(const kp::WeightRef *w) { return w ? w->tensor : nullptr; }

} // namespace

const kp::WeightRef *ProgramRecord::weightParameter() const {
  return memberOf<const kp::WeightRef *>(
      params, [](const auto &p) -> decltype(present(p.weight)) { return present(p.weight); },
      nullptr);
}

const kp::WeightRef *ProgramRecord::biasParameter() const {
  return memberOf<const kp::WeightRef *>(
      params, [](const auto &p) -> decltype(present(p.bias)) { return present(p.bias); }, nullptr);
}

const kp::WeightRef *ProgramRecord::normParameter() const {
  return memberOf<const kp::WeightRef *>(
      params,
      [](const auto &p) -> decltype(present(p.normWeight)) { return present(p.normWeight); },
      nullptr);
}

const model::HostTensor *ProgramRecord::weight() const { return tensorOf(weightParameter()); }
const model::HostTensor *ProgramRecord::bias() const { return tensorOf(biasParameter()); }
const model::HostTensor *ProgramRecord::norm() const { return tensorOf(normParameter()); }

bool ProgramRecord::projects() const {
  return kind() == KernelKind::linear || kind() == KernelKind::normLinear ||
         kind() == KernelKind::lmHead;
}

bool ProgramRecord::accumulates() const {
  return memberOf<bool>(
      params, [](const auto &p) -> decltype(bool(p.accumulate)) { return p.accumulate; }, false);
}

std::vector<const kp::WeightRef *> ProgramRecord::weights() const {
  std::vector<const kp::WeightRef *> all;
  std::visit(
      [&](const auto &p) {
        p.forEachWeight([&](const kp::WeightRef &w) {
          if (w)
            all.push_back(&w);
        });
      },
      params);
  return all;
}

} // namespace dlm::program
