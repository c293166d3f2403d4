// What CUDA codegen knows of one kernel record while it chooses the kernels the record launches
// (kernelsForProgram, ModelKernels.cpp): RecordKernels has one member per kind, named by
// runtime/schema/KernelOps.td and defined beside the kind's generator
// (compiler/codegen/kernels/<Kind>.cpp), so that a new kind adds its file and no list.
#pragma once

#include "compiler/codegen/Kernels.h"
#include "compiler/codegen/ModelKernels.h"
#include "runtime/model/KernelParams.h"
#include "runtime/model/KernelProgram.h"

#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace dlm::codegen {

namespace kp = spec::kernels;

// One record's parameters, with errors that name it.
class RecordView {
public:
  RecordView(const artifact::Kernel &record, size_t index)
      : record_(record),
        where_("kernel record " + std::to_string(index) + " ('" + record.name + "')") {}

  Status error(const std::string &message) const {
    return Status::error("--target cuda: " + where_ + ": " + message);
  }
  template <typename T> StatusOr<T> get(std::string_view key) const {
    auto it = record_.parameters.find(std::string(key));
    if (it == record_.parameters.end() || !std::holds_alternative<T>(it->second))
      return error("parameter '" + std::string(key) + "' is missing or of the wrong type");
    return std::get<T>(it->second);
  }
  bool has(std::string_view key) const { return record_.parameters.count(std::string(key)) != 0; }
  const std::string &kind() const { return record_.kind; }
  // The first slot of the comma-separated operand list.
  StatusOr<int64_t> firstOperand() const {
    DLM_ASSIGN_OR_RETURN(std::string list, get<std::string>(kp::kOperands));
    const std::optional<std::vector<int64_t>> slots = kp::parseSlots(list);
    if (!slots)
      return error("operands '" + list + "' is not a list of slots");
    return slots->front();
  }

private:
  const artifact::Kernel &record_;
  std::string where_;
};

// Result slot → elements per token row, per forward function (each numbers its own slots).
using SlotWidths = std::map<std::pair<std::string, int64_t>, int64_t>;

// The CUDA kernels one record launches: a member per kind (runtime/schema/KernelOps.td names
// it), each adding to `launched` what its record needs (nothing: cuBLASLt alone, or a device
// copy in runtime/cuda/CudaBackend.cpp).
class RecordKernels {
public:
  RecordKernels(const RecordView &r, const kp::KernelParams &params, std::string function,
                int64_t width, const SlotWidths &slotWidths, const WeightShapes &weightShapes,
                const ModelKernelOptions &options)
      : r(r), params(params), function(std::move(function)), width(width), element(options.element),
        slotWidths(slotWidths), weightShapes(weightShapes), options(options) {}

  // Each kind's generator, named by runtime/schema/KernelOps.td (rope for rope; gatedActivation
  // for silu_mul and gelu_mul, deviceCopy for the records the runtime runs as device copies).
#define DLM_KERNEL_CUDA_KERNELS_MEMBERS
#define DLM_KERNEL_MEMBER(member) Status member();
#include "runtime/schema/KernelRecordSpec.inc"

  std::vector<StatusOr<KernelSource>> launched;

private:
  // The width of the first operand's slot.
  StatusOr<int64_t> inputWidth() const {
    DLM_ASSIGN_OR_RETURN(int64_t operand, r.firstOperand());
    auto it = slotWidths.find({function, operand});
    if (it == slotWidths.end())
      return r.error("operand slot " + std::to_string(operand) + " is no earlier result");
    return it->second;
  }
  template <typename P> const P &as() const { return std::get<P>(params); }
  StatusOr<std::vector<int64_t>> shapeOf(const kp::WeightRef &weight) const {
    auto shape = weightShapes.find(weight.name);
    if (shape == weightShapes.end() || shape->second.empty())
      return r.error("no weight '" + weight.name + "'");
    return shape->second;
  }
  // A norm over rows of the norm weight's length (a per-head norm has one row per head).
  StatusOr<KernelSource> normOf(const kp::WeightRef &weight) const {
    DLM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, shapeOf(weight));
    return generateRmsNorm({shape.back(), true, element});
  }
  // A narrow projection weight is widened before its cuBLASLt GEMM; an FP8 one may instead
  // meet FP8 activations in an FP8 GEMM where the GPU has one (the runtime chooses).
  Status widenIfNarrow(const kp::WeightRef &weight) {
    auto narrow = options.narrowWeights.find(weight.name);
    if (narrow == options.narrowWeights.end())
      return Status::ok();
    launched.push_back(
        generateWidenWeight({narrow->second.stored, element, narrow->second.groupSize}));
    if (narrow->second.stored == StoredWeight::fp8E4m3) {
      DLM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, shapeOf(weight));
      launched.push_back(generateQuantizeRows({shape.back(), element}));
    }
    return Status::ok();
  }

  const RecordView &r;
  const kp::KernelParams &params;
  const std::string function;
  const int64_t width; // the result's (0: none)
  const ElementType element;
  const SlotWidths &slotWidths;
  const WeightShapes &weightShapes;
  const ModelKernelOptions &options;
};

} // namespace dlm::codegen
