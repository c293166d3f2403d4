#include "runtime/profile/ChromeTrace.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <set>
#include <vector>

namespace dlm::profile {

namespace {

// A JSON string literal: names are ours, labels may come from the user.
std::string quoted(const std::string &text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Nanoseconds as microseconds with three decimals, exactly.
std::string micros(int64_t ns) {
  char text[40];
  const int64_t whole = ns / 1000;
  const int64_t frac = ns % 1000;
  if (ns < 0)
    std::snprintf(text, sizeof text, "%.3f", static_cast<double>(ns) / 1000.0);
  else
    std::snprintf(text, sizeof text, "%" PRId64 ".%03" PRId64, whole, frac);
  return text;
}

void metadata(std::ostream &out, bool &first, const char *name, int pid, uint64_t tid,
              const std::string &argName, const std::string &argValue) {
  out << (first ? "\n" : ",\n") << "{\"name\":\"" << name << "\",\"ph\":\"M\",\"pid\":" << pid
      << ",\"tid\":" << tid << ",\"args\":{\"" << argName << "\":" << argValue << "}}";
  first = false;
}

} // namespace

void writeChromeTrace(const Profiler &profiler, const TraceLabels &labels, std::ostream &out) {
  std::set<uint64_t> threads, requests;
  for (const Event &e : profiler)
    (e.track == TrackKind::thread ? threads : requests).insert(e.trackId);

  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":" << profiler.dropped()
      << "},\"traceEvents\":[";
  bool first = true;
  metadata(out, first, "process_name", kThreadsPid, 0, "name", quoted(labels.backend));
  metadata(out, first, "process_sort_index", kThreadsPid, 0, "sort_index", "1");
  for (uint64_t t : threads) {
    metadata(out, first, "thread_name", kThreadsPid, t, "name",
             quoted(t == 0 ? "thread 0 (caller)" : "worker " + std::to_string(t)));
    metadata(out, first, "thread_sort_index", kThreadsPid, t, "sort_index", std::to_string(t));
  }
  if (!requests.empty()) {
    metadata(out, first, "process_name", kRequestsPid, 0, "name", quoted("requests"));
    metadata(out, first, "process_sort_index", kRequestsPid, 0, "sort_index", "2");
  }
  for (uint64_t r : requests)
    metadata(out, first, "thread_name", kRequestsPid, r, "name",
             quoted("request " + std::to_string(r)));

  // By track and start, parents before their children, so that viewers nest them at once.
  std::vector<const Event *> events;
  events.reserve(profiler.size());
  for (const Event &e : profiler)
    events.push_back(&e);
  std::sort(events.begin(), events.end(), [](const Event *a, const Event *b) {
    if (a->track != b->track)
      return a->track < b->track;
    if (a->trackId != b->trackId)
      return a->trackId < b->trackId;
    if (a->startNs != b->startNs)
      return a->startNs < b->startNs;
    if (a->durationNs != b->durationNs)
      return a->durationNs > b->durationNs;
    return a < b; // recording order
  });
  for (const Event *e : events) {
    const int pid = e->track == TrackKind::thread ? kThreadsPid : kRequestsPid;
    out << ",\n{\"name\":" << quoted(e->name) << ",\"cat\":\"" << categoryName(e->category)
        << "\",\"ph\":\"X\",\"ts\":" << micros(e->startNs)
        << ",\"dur\":" << micros(std::max<int64_t>(e->durationNs, 0)) << ",\"pid\":" << pid
        << ",\"tid\":" << e->trackId << ",\"args\":{";
    const char *separator = "";
    auto arg = [&](const char *name, int64_t value) {
      if (value < 0)
        return;
      out << separator << "\"" << name << "\":" << value;
      separator = ",";
    };
    arg("layer", e->layer);
    arg("tokens", e->tokens);
    arg(e->category == Category::block ? "block" : "step", e->index);
    out << "}}";
  }
  out << "\n]}\n";
}

Status writeChromeTrace(const Profiler &profiler, const TraceLabels &labels,
                        const std::string &path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out)
    return Status::error("cannot write trace '" + path + "'");
  writeChromeTrace(profiler, labels, out);
  out.flush();
  if (!out)
    return Status::error("cannot write trace '" + path + "'");
  return Status::ok();
}

} // namespace dlm::profile
