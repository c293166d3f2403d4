// A Profiler's events in the Chrome trace event format (JSON object form), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open: one complete ("X") event per scope, timestamps in
// microseconds, and metadata ("M") events naming the tracks. Process 1 holds one thread track per
// backend thread (the caller and each pool worker); process 2 holds one track per request, with
// the request, its blocks, denoise steps and forwards.
#pragma once

#include "runtime/profile/Profiler.h"
#include "support/Status.h"

#include <ostream>
#include <string>

namespace dlm::profile {

inline constexpr int kThreadsPid = 1;
inline constexpr int kRequestsPid = 2;

struct TraceLabels {
  // Name of the process that holds the thread tracks ("dlm cpu backend").
  std::string backend = "dlm backend";
};

void writeChromeTrace(const Profiler &profiler, const TraceLabels &labels, std::ostream &out);
// Errors name the file.
Status writeChromeTrace(const Profiler &profiler, const TraceLabels &labels,
                        const std::string &path);

} // namespace dlm::profile
