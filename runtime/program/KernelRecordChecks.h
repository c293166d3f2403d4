// The kernel kinds as KernelProgram::build reads them: each kind's contract
// (runtime/schema/KernelOps.td: name, operand count, result, parameter table), the check of its
// parameters against that table, and the check of its own shapes and ranges (one function per
// kind, through the generated dispatch table), which also fills its ProgramRecord. What every
// record has (its operands' slots, its result's place, its layer) is read before, by the builder.
#pragma once

#include "runtime/program/KernelProgram.h"
#include "runtime/program/KernelRecordReader.h"

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace dlm::program::detail {

// The KV layers the records of a program store: per layer, its K/V width (shared by every
// function, 0 = not seen yet) and the slots the function's kv_store stored (-1 = none).
struct KvLayers {
  std::vector<int64_t> &widths;
  std::vector<int64_t> storedK, storedV;
};

// The checks of one record, whose common part is read: its operands' widths and its result's.
class RecordChecker {
public:
  RecordChecker(const RecordReader &r, ProgramRecord &kernel, KernelProgram &program,
                const std::vector<int64_t> &widths, int64_t width,
                const model::ModelWeights &weights, bool widenProjections, KvLayers &kv, bool last)
      : r(r), kernel(kernel), program(program), widths(widths), width(width), weights(weights),
        d(weights.dims()), widenProjections(widenProjections), kvWidths(kv.widths),
        storedK(kv.storedK), storedV(kv.storedV), last(last) {}

  // Each kind's check, named by runtime/schema/KernelOps.td (kvStore for kv_store; linear for
  // linear and norm_linear, constraintsOnly for the kinds its constraints describe whole: rope,
  // add, silu_mul, gelu_mul, select_input_rows).
#define DLM_KERNEL_RECORD_CHECKS_MEMBERS
#define DLM_KERNEL_MEMBER(member) Status member();
#include "runtime/schema/KernelRecordSpec.inc"
  // The constraints runtime/schema/KernelOps.td declares for the record's kind that read a weight
  // (`weightsResolved`: after its check has resolved them), or those that read none (before it).
  Status declaredConstraints(bool weightsResolved);

private:
  // The record's parameters, as its kind declares them.
  template <typename P> P &params() { return std::get<P>(kernel.params); }
  // The tensor `weight` names (widened to float32 unless `widen` is false); an absent optional
  // weight stays absent.
  Status resolve(spec::kernels::WeightRef &weight, bool widen = true) const;
  Status fusedNorm(spec::kernels::WeightRef &norm);
  Status expectWidth(int64_t actual, int64_t expected, const std::string &what) const {
    return actual == expected
               ? Status::ok()
               : r.error(what + " is " + str(actual) + ", expected " + str(expected));
  }

  const RecordReader &r;
  ProgramRecord &kernel;
  KernelProgram &program;
  const std::vector<int64_t> &widths; // the operands'
  const int64_t width;                // the result's (0: none)
  const model::ModelWeights &weights;
  const model::ModelDims &d;
  const bool widenProjections;
  std::vector<int64_t> &kvWidths, &storedK, &storedV;
  const bool last; // the function's last record
};

// A kind as the builder reads it: its contract (runtime/schema/KernelOps.td) and its check.
struct KernelKindSpec {
  const spec::kernels::KindContract &contract;
  Status (RecordChecker::*check)();
  KernelKind kind() const { return static_cast<KernelKind>(contract.kind); }
};

// The kind named `name`; nullopt when there is none.
std::optional<KernelKindSpec> findKernelKind(std::string_view name);

// Every parameter of the record is one its kind or every record declares, of its declared type
// and within its choices, and every required one is there.
Status checkDeclaredParameters(const RecordReader &r, const KernelKindSpec &kind);

} // namespace dlm::program::detail
