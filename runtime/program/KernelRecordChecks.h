// The kernel kinds as KernelProgram::build reads them (runtime/model/KernelProgram.h): each
// kind's name, operand count, whether it writes a result, and the check of its own parameters
// and shapes (one function per kind), which also fills its ProgramRecord. What every record has
// (its operands' slots, its result's place, its layer) is read before, by the builder.
#pragma once

#include "runtime/program/KernelProgram.h"
#include "runtime/program/KernelRecordReader.h"

#include <cstddef>
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

  Status embedding();
  Status softEmbedding();
  Status rmsNorm();
  Status scale();
  Status linear();
  Status rope();
  Status kvStore();
  Status attention();
  Status moe();
  Status forwardInput();
  Status capture();
  Status binary();
  Status lmHead();

private:
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

inline constexpr size_t kAnyOperands = ~size_t(0);

struct KernelKindSpec {
  std::string_view name;
  KernelKind kind;
  size_t operands; // without the residual of an accumulating linear; kAnyOperands: one or more
  bool hasResult;
  Status (RecordChecker::*check)(); // null: nothing beyond the common part
};

// The kind named `name`; null when there is none.
const KernelKindSpec *findKernelKind(std::string_view name);

} // namespace dlm::program::detail
