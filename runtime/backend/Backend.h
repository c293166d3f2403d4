// A backend runs one model's forwards on one kind of device for one session, executing the
// artifact's kernel records. Required: the DecodeModel forwards and reserve(); the rest has
// defaults. Backends are created by name through the BackendRegistry (BackendRegistry.h), where
// each registers itself; nothing above this folder knows them.
#pragma once

#include "runtime/backend/SequenceForwards.h"
#include "runtime/sampling/DecodeModel.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::profile {
class Profiler;
}
namespace dlm::program {
struct ProgramRecord;
}

namespace dlm {

// Bumped when a hook is added or changes meaning. 2: memoryUsage(). 3: denoisesBlock() and
// denoiseBlock() (DecodeModel's optional device block loop; the cuda backend implements it).
// 4: they take a sampling::LoopPlan (the loop's resolved records) instead of a policy's request.
// 5: forwardWindow() (the dual cache; optional, "not supported yet" by default). 6: supports().
// 7: forwardWindow() is gone: a window forward is ForwardSpec::Mode::window; forward(spec) is
// DecodeModel's one forward (forwardFull and forwardCached call it). 8: kernelPaths().
// 9: forEachRow() (DecodeModel's rows of a step over the backend's threads; the cpu backend's).
inline constexpr int kBackendApiVersion = 9;

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
  // Batch-invariant kernels (docs/design/serving.md §3): a row's result does not depend on the
  // other rows of its forward, so a request decodes the same alone or under load. On the CPU the
  // projections and the LM head then run on InvariantGemm (weights packed once at creation),
  // and a mixture of experts multiplies its router and each expert a row at a time.
  bool batchInvariant = false;
  // cpu: bf16-stored projection weights multiply in bf16, the activations rounded to bf16, where
  // the CPU has bf16 arithmetic (else weight-only, float32 activations). Set by the registry from
  // the artifact's cpu_activations (dlmc compile --activations bf16), not by callers.
  bool bf16Arithmetic = false;
  // Prefix sharing across the backend's sequences (docs/design/serving.md §4): full committed KV
  // pages are published by their tokens and adopted by later prefills of the same tokens, for
  // the functions whose K/V of a slot depend on the tokens up to it alone
  // (kvDependsOnPrefixOnly, SequenceForwards.h); exact, since such a page holds what the
  // adopting sequence would compute (bit for bit when batchInvariant).
  bool sharePrefixes = false;
  // Records forward and kernel timings when set (not owned; must outlive the backend). Null:
  // no timing at all, one branch per timer site.
  profile::Profiler *profiler = nullptr;
};


// Host or device bytes a backend holds, for profiling.
struct MemoryUsage {
  // Weights as the kernels read them, and the part converted at load time (owned, not mapped).
  size_t weightBytes = 0;
  size_t convertedWeightBytes = 0;
  // The KV pool: every page, the pages in use now, and the most ever in use at once.
  size_t kvPoolBytes = 0;
  size_t kvInUseBytes = 0;
  size_t kvPeakBytes = 0;
  // Activation workspace reserved for forwards (hidden states, projections, attention scratch,
  // logits).
  size_t activationBytes = 0;
};

class Backend : public sampling::DecodeModel {
public:
  virtual std::string_view name() const = 0;
  virtual int apiVersion() const { return kBackendApiVersion; }
  // The longest sequence this backend was set up for.
  virtual int64_t maxSequenceLength() const = 0;
  // Optional: what the backend holds (zeros when it does not say).
  virtual MemoryUsage memoryUsage() const { return {}; }
  // Optional: the paths its heavy kernels took on this machine, a line each ("24 projections:
  // bf16 tiles, float32 arithmetic"), for profiles (dlm-prof prints them).
  virtual std::vector<std::string> kernelPaths() const { return {}; }
  // Optional: whether this backend runs `record`, else an error naming the record and why. A
  // backend that cannot run every kind asks it of each record when it is created (the CUDA
  // backend does; the CPU backend runs every kind), so that a program it cannot run fails by
  // name then, not in a forward.
  virtual Status supports(const program::ProgramRecord & /*record*/) const {
    return Status::ok();
  }

  // Optional: several requests' forwards packed into one run, each on its own KV sequence
  // (docs/design/serving.md §2; the serving scheduler's forward). The logits are every
  // forward's requested rows in order; capturedRows() then holds every fed row, in order.
  virtual bool batchesSequences() const { return false; }
  // Sizes every buffer for packed runs of up to `tokens` fed tokens (all sequences together,
  // which may pass the longest sequence) and `logitRows` rows.
  virtual Status reservePacked(int64_t /*tokens*/, int64_t /*logitRows*/) {
    return createSequence().status();
  }
  virtual StatusOr<kv::SequenceId> createSequence() {
    return Status::error("not supported yet: several sequences on the " + std::string(name()) +
                         " backend");
  }
  virtual Status removeSequence(kv::SequenceId /*sequence*/) { return createSequence().status(); }
  // Optional: the pool every sequence shares (zeros when the backend does not say).
  virtual KvPoolStats kvPoolStats() const { return {}; }
  virtual Status trimSequence(kv::SequenceId /*sequence*/, int64_t /*length*/) {
    return createSequence().status();
  }
  virtual StatusOr<sampling::LogitsView>
  forwardBatch(std::string_view /*function*/, const std::vector<SequenceForward> & /*forwards*/) {
    return createSequence().status();
  }
};

} // namespace dlm
