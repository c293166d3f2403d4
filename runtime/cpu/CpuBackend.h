// The CPU backend: runs the compiled forward functions — the artifact's kernel records
// (runtime/program/KernelProgram.h: embedding, soft embedding of the forward's input rows,
// RMSNorm with or without weight, norm + linear, linear with optional bias and residual
// accumulation, NeoX RoPE (all or some pairs), KV store and paged attention with GQA under the
// record's mask and window, add, scale, SiLU and GELU gating, mixture of experts, final norm + LM
// head with Dream's logit shift and a softcap, and speculative decoding's forward input, input
// row selection and capture) — over one sequence of a paged KV cache in host
// memory (each layer its own K/V width), every intermediate in one workspace laid out by the
// compiler's per-token-row memory plan of the function run (sized for the largest). GEMMs go to
// oneDNN; everything else is plain loops the compiler vectorises. Every buffer is sized by
// reserve(); forwards allocate nothing.
#pragma once

#include "runtime/backend/PackedForwards.h"
#include "runtime/backend/SequenceBackend.h"
#include "runtime/backend/SequenceForwards.h"
#include "runtime/cpu/HostKvPages.h"
#include "runtime/cpu/InvariantGemm.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/PackedLinear.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/kv/PagedKvCache.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/profile/Profiler.h"
#include "runtime/program/KernelProgram.h"
#include "runtime/program/RecordProfile.h"

#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

namespace dlm::cpu {

class CpuBackend final : public SequenceBackend {
public:
  // `records` are the artifact's "cpu" kernel records, one or several functions (validated here,
  // errors name the record);
  // `maxPositions` is the model's limit (0 = unknown).
  static StatusOr<std::unique_ptr<CpuBackend>>
  create(std::shared_ptr<const model::ModelWeights> weights,
         const std::vector<artifact::Kernel> &records, int64_t maxPositions,
         const BackendOptions &options);

  std::string_view name() const override { return "cpu"; }
  int64_t vocabSize() const override { return weights_->dims().vocabSize; }

  Status reserve(int64_t tokens, int64_t logitRows) override;

  // Several sequences at once (docs/design/serving.md §2; the serving scheduler's forward): each
  // a ForwardSpec (any mode) of `function` on its own KV sequence, packed
  // into one run. The logits are each forward's requested rows, in order. The sequences come
  // from createSequence; the session's own one is not among them.
  Status reservePacked(int64_t tokens, int64_t logitRows) override;
  StatusOr<sampling::LogitsView>
  forwardBatch(std::string_view function, const std::vector<SequenceForward> &forwards) override;

  MemoryUsage memoryUsage() const override;
  // "24 projections: bf16 tiles, float32 arithmetic", "1 LM head: f32 oneDNN brg:avx512_core",
  // the expert stacks, and the level of the vectorised loops (KernelPaths.cpp).
  std::vector<std::string> kernelPaths() const override;

  int threads() const { return pool_.threads(); }

  // The rows over the pool in `threads` interleaved shares, row j in share j % threads (a
  // window's masked rows, which cost the most, are not contiguous).
  void forEachRow(int64_t rows, sampling::RowBody body) override;

private:
  // The bytes this backend holds of a weight its records read.
  size_t heldBytes(const model::HostTensor *weight) const;
  using PackedWeights = std::map<const model::HostTensor *, std::shared_ptr<const PackedLinear>>;
  CpuBackend(std::shared_ptr<const model::ModelWeights> weights,
             std::map<std::string, program::KernelProgram> functions, PackedWeights packed,
             int64_t maxSequenceLength, int64_t kvPages, const BackendOptions &options);
  // The packed projection weights of `functions` (none when batch-invariant).
  static StatusOr<PackedWeights>
  packProjections(const model::ModelWeights &weights,
                  const std::map<std::string, program::KernelProgram> &functions,
                  const BackendOptions &options);
  using PackedExpertStacks =
      std::map<const model::HostTensor *, std::shared_ptr<const PackedExperts>>;
  // The moe records' expert stacks of `functions`: those stored bf16, i8 or FP8 packed (bf16 for
  // bf16 arithmetic when the options ask for it), the others (f32, f16) widened.
  static StatusOr<PackedExpertStacks>
  packExperts(const model::ModelWeights &weights,
              const std::map<std::string, program::KernelProgram> &functions,
              const BackendOptions &options);
  // An embedding table (of embedding and soft_embedding records) read as stored (bf16, f16, i8,
  // fp8, i4 with its group scales, or f32 nobody widened), copied out of the artifact's mapping
  // once, so that a file truncated after loading fails no forward.
  struct StoredTable {
    std::vector<uint8_t> bytes;
    model::StoredTensor view; // the stored tensor, its data the copy
  };
  using StoredTables = std::map<const model::HostTensor *, std::shared_ptr<const StoredTable>>;
  static StatusOr<StoredTables>
  copyStoredTables(const model::ModelWeights &weights,
                   const std::map<std::string, program::KernelProgram> &functions);

  using ForwardInput = dlm::ForwardInput;

  // A table an embedding or soft_embedding record reads: this backend's stored copy, else the
  // float32 table its records read widened (batch-invariant).
  model::StoredTensor tableAsStored(const model::HostTensor *table) const;
  // Whether a projection (a tied LM head) multiplies such a table where it lies rather than
  // packing a second copy: float32 (oneDNN's sgemm), or bf16 on CPUs with the AVX-512 kernels
  // (BlockedTileKernels.h), in bf16 arithmetic when the options ask for it and the CPU has
  // AVX-512-BF16. Not when batch-invariant: the table is then read widened.
  static bool readsInPlace(const model::StoredTensor &stored);
  Status projectInPlace(const float *x, int64_t rows, const model::StoredTensor &w, int64_t outputs,
                        float *y, bool accumulate);
  // Whether some projection reads a bf16 table in place (then its rows may be rounded to bf16).
  bool projectsABf16TableInPlace() const;

  // The function called `name` (empty: the default), else an error listing them.
  StatusOr<const program::KernelProgram *> function(std::string_view name) const;

  // One sequence's share of a packed forward (PackedForwards.h).
  using Part = PackedPart;

  // A forward over several sequences at once (each part's sequence grown to span.keys slots,
  // its tokens' K/V written to slots span.first.., attending to slots [0, span.keys)): the
  // records that act on every row (embeddings, norms, GEMMs, MLPs) run once over all parts'
  // rows, the ones that depend on a sequence (rope positions, kv_store, attention, input rows,
  // the LM head's rows) once per part. The logits are the parts' rows in order.
  // `wroteKv` (optional) says whether the run got as far as its kernels.
  StatusOr<sampling::LogitsView> runParts(const program::KernelProgram &program,
                                          std::vector<Part> &parts, bool *wroteKv = nullptr);
  Status runKernel(const program::ProgramRecord &kernel, const std::vector<Part> &parts,
                   int64_t count);
  // One record's run, as each kind's runner below reads it: the record, the parts, the token
  // count, its result's width, and its profile event (category, layer, GEMM shape).
  struct RecordRun {
    const program::ProgramRecord &k;
    const std::vector<Part> &parts;
    int64_t count;
    int64_t width;
    program::RecordProfile event;
    profile::Category category;
    int64_t layer;
  };
  // Each kind's runner, named by runtime/schema/KernelOps.td (runRope for rope; runLinear for
  // linear and norm_linear, runElementwise for add, silu_mul and gelu_mul), defined in the file of
  // the kernel it runs (Rope.cpp; Projection.cpp for the projections).
#define DLM_KERNEL_CPU_RUNNERS_MEMBERS
#define DLM_KERNEL_MEMBER(member) Status member(const RecordRun &run);
#include "runtime/schema/KernelRecordSpec.inc"
  // Each kind's runner above, by KernelKind (the table runtime/schema/KernelOps.td writes).
  static Status (CpuBackend::*const kRunners[])(const RecordRun &);
  // The width of `slot` of the running function.
  int64_t slotWidth(int64_t index) const {
    return program_->slots[static_cast<size_t>(index)].width;
  }
  // The rows of `slot` of the running function for a forward of `count` tokens.
  float *slot(int64_t index, int64_t count) {
    return workspace_.data() + program_->slots[static_cast<size_t>(index)].offset * count;
  }
  // A running record's result rows and its operand `index`'s rows.
  float *result(const RecordRun &run) { return slot(run.k.result, run.count); }
  const float *operand(const RecordRun &run, size_t index) {
    return slot(run.k.operands[index], run.count);
  }
  // The table of a rope record.
  const RopeTable &ropeTable(const program::ProgramRecord &kernel) const;

  // Runs body() inside a kernel timer on the calling thread (just body() without a profiler).
  template <typename Body>
  auto timed(profile::Category kind, const char *name, int64_t layer, int64_t tokens, Body &&body) {
    profile::Scope scope(profiler_, kind, name, profile::TrackKind::thread, 0, layer, tokens);
    return body();
  }
  // The same in a record's own event.
  template <typename Body> auto timedRecord(const RecordRun &run, Body &&body) {
    return timed(run.category, run.k.name.c_str(), run.layer, run.count,
                 std::forward<Body>(body));
  }
  // The same for a GEMM of [tokens, inputs] x [inputs, outputs] (the profile's FLOP rates).
  template <typename Body>
  auto timedGemm(profile::Category kind, const char *name, int64_t layer, int64_t tokens,
                 int64_t outputs, int64_t inputs, Body &&body) {
    profile::Scope scope(profiler_, kind, name, profile::TrackKind::thread, 0, layer, tokens);
    scope.setGemmShape(outputs, inputs);
    return body();
  }

  std::shared_ptr<const model::ModelWeights> weights_;
  std::map<std::string, program::KernelProgram, std::less<>> functions_;
  const program::KernelProgram *program_ = nullptr; // the function running
  int64_t rowElements_ = 0, normRowElements_ = 0;   // the largest function's
  ThreadPool pool_;
  HostKvPages pages_;
  // The functions whose prefills adopt and whose commits publish pages (sharePrefixes).
  std::set<std::string, std::less<>> sharingFunctions_;
  // One table per distinct (theta, head_dim, rotary_dim, rotated_pairs) of the rope records.
  struct Rope {
    spec::kernels::RopeParams params;
    RopeTable table;
  };
  static bool sameRope(const spec::kernels::RopeParams &a, const spec::kernels::RopeParams &b) {
    return a.theta == b.theta && a.headDim == b.headDim && a.rotaryDim == b.rotaryDim &&
           a.rotatedPairs == b.rotatedPairs;
  }
  std::vector<Rope> ropes_;
  // The widest soft_embedding table (its rows: the most input columns a forward may give).
  int64_t softEmbeddingRows_ = 0;
  // The widest moe record's sizes (0 experts: none).
  int64_t moeHidden_ = 0, moeExperts_ = 0, moeTopK_ = 0, moeWidth_ = 0;
  profile::Profiler *profiler_;
  // The most KV pages the sequence has held at once.
  int64_t peakKvPages_ = 0;

  // Workspace, sized by reserve().
  int64_t reservedTokens_ = 0;
  int64_t reservedLogitRows_ = 0;
  std::vector<float> workspace_; // rowElements_ per token
  std::vector<float> normed_;    // norm_linear's normalised rows
  AttentionScratch attentionScratch_;
  std::vector<AttentionPart> attentionParts_;
  std::vector<float> softEmbeddingScratch_;
  MoeScratch moeScratch_;
  // The capture records' rows (the widest function's capture width per token; captured_ views
  // the last forward's).
  int64_t captureWidth_ = 0;
  std::vector<float> capture_;
  std::vector<float> headInput_, logits_;
  // The parts' fed tokens, packed (the embedding records read them).
  std::vector<int32_t> packedTokens_;
  // BackendOptions::batchInvariant: every projection's and LM head's weights packed for
  // InvariantGemm, by weight (a tied embedding serves the embedding and the head); empty
  // otherwise.
  std::map<const float *, InvariantGemm> invariantGemms_;
  std::vector<float> headScratch_; // an LM head's padded columns
  // Otherwise every projection's weights packed for oneDNN (PackedLinear), by weight; an LM head
  // tied to a table another record reads widened reads that float32 copy, and one tied to a
  // table read as stored reads that where readsInPlace, instead of packing a second one.
  PackedWeights packed_;
  PackedExpertStacks packedExperts_; // by stack
  StoredTables storedTables_;        // by table
  // BackendOptions::batchInvariant: the projections on InvariantGemm, a moe record's products a
  // row at a time.
  const bool batchInvariant_;
  // BackendOptions::bf16Arithmetic: a tied LM head read in place multiplies in bf16 where the CPU
  // has AVX-512-BF16, its input rows rounded into roundedInput_ (reserved only then, for the
  // forward's rows; a product of more rows stays float32 rather than allocate).
  const bool bf16Arithmetic_;
  std::vector<uint16_t> roundedInput_;
  // The weights the records read widened (KernelProgram::widenedWeights of every function).
  const std::set<const model::HostTensor *> widened_;
  PackedGemm packedGemm_;
  // A moe record's experts run one per thread (moeForward): each pool thread's GEMM state, and a
  // pool of one thread that runs their products inline.
  std::vector<std::unique_ptr<PackedGemm>> expertGemms_;
  ThreadPool onOneThread_{1, ThreadPool::Kind::own};

  // y (+)= x W^T over `rows`: InvariantGemm when the backend is batch-invariant, else the packed
  // weight's GEMM, or for a tied LM head the table where it lies (projectInPlace).
  Status project(const float *x, int64_t rows, const model::HostTensor &w, int64_t outputs,
                 const float *bias, float *y, bool accumulate);
};

} // namespace dlm::cpu
