// A backend runs one model's forwards on one kind of device for one session. Required: the
// DecodeModel forwards and reserve(); the rest has defaults. Backends are created by name through
// createBackend (Session.cpp), which knows them all.
#pragma once

#include "runtime/sampling/DecodeModel.h"

#include <cstdint>
#include <string_view>

namespace dlm {

// Bumped when a hook is added or changes meaning.
inline constexpr int kBackendApiVersion = 1;

struct BackendOptions {
  // Threads for the backend's own loops, counting the caller; 0 = one per hardware thread.
  int threads = 0;
  // Token slots per KV page.
  int kvPageTokens = 16;
  // Longest sequence (prompt + generation) the session serves; 0 = the model's maxPositions
  // (or 4096 when the model does not say).
  int64_t maxSequenceLength = 0;
  // KV pool size in pages; 0 = enough for one sequence of maxSequenceLength.
  int64_t kvPages = 0;
};

class Backend : public sampling::DecodeModel {
public:
  virtual std::string_view name() const = 0;
  virtual int apiVersion() const { return kBackendApiVersion; }
  // The longest sequence this backend was set up for.
  virtual int64_t maxSequenceLength() const = 0;
};

} // namespace dlm
