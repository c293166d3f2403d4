// How a kernel record's work shows in a profile, one mapping for every backend: the category and
// fields of the profiler event a backend records for the record (or, for a record that
// normalises its input first, of its two events). dlm-prof's per-kernel-kind rows and GEMM
// GFLOP/s then compare backends kind by kind, because the CPU and CUDA backends both derive their
// events from here rather than each from its own switch.
#pragma once

#include "runtime/profile/Profiler.h"
#include "runtime/program/KernelProgram.h"

#include <cstdint>

namespace dlm::program {

struct RecordProfile {
  // The record's own work: a projection's or the LM head's GEMM, attention, a copy of rows, ...
  profile::Category category = profile::Category::elementwise;
  // The record's layer; -1 for the LM head, which belongs to none.
  int64_t layer = -1;
  // A separate `rmsnorm` event named by the record's normName comes first: a norm_linear that
  // normalises its input itself (not reusing the previous record's rows), an lm_head with a final
  // norm. Timed apart because the norm is a kernel of its own on every backend.
  bool normFirst = false;
  // A GEMM's output and input widths (N, K beside the event's M tokens), -1 for other records.
  int64_t outputs = -1;
  int64_t inputs = -1;
};

RecordProfile recordProfile(const KernelProgram &program, const ProgramRecord &record);

// The event of `record`'s own work (its norm's when `norm`), over `tokens` rows, on the calling
// thread's track; the backend fills in startNs and durationNs.
profile::Event recordEvent(const ProgramRecord &record, const RecordProfile &profile, bool norm,
                           int64_t tokens);

} // namespace dlm::program
