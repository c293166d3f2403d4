// The CUDA backend: DecodeModel's forwards on one device and one stream, executing the
// artifact's kernel program record by record (runtime/program/KernelProgram.h), as the CPU
// backend does: each record launches the generated kernels it names (embedding with its scale,
// soft embedding of the forward's input rows, RMSNorm with or without weight, RoPE of all or some
// pairs, kv_store, paged attention under its mask, window and scale, add, SiLU and GELU gating,
// the layer scale, the mixture of experts' routing and grouped expert products, the logit
// soft-cap) or a cuBLASLt GEMM with the epilogue the compiler chose (bias; the residual
// accumulated as beta = 1; norm_linear's norm first; the LM head over only the requested rows).
// Every forward function of the artifact is held (DiffusionGemma: "encode" and "decode");
// forward() runs any of them in the full, cached or append mode, its input rows uploaded for the
// soft embedding; forwardBatch() packs several KV sequences' forwards into one run (the serving
// scheduler's; forward() is its one-part case). Nothing here knows what a layer is. The same code
// drives a real driver (libcuda + cuBLASLt, cubin or PTX) and the emulated one (dlm-run --device
// cuda-emu, the kernels' source compiled on the host).
//
// By concern: setup, binding and the forward entry points (CudaBackend.cpp), the workspace and
// staging buffers (CudaWorkspace.cpp), the records' launches (CudaRecordLaunch.cpp), CUDA graphs
// (ForwardGraphs.cpp) and the device block loop (CudaBackendBlockLoop.cpp).
//
// Weights are uploaded once at the kernels' precision (f32 or bf16). The KV pool lives on the
// device (each layer its own K/V width), its pages handed out by kv::PagedKvCache as on the CPU.
// reserve() sizes every buffer, the activations laid out by the largest function's per-token-row
// memory plan; a forward only copies its inputs (tokens, positions, block table, input rows) in,
// enqueues the work and copies the logits out. A forward whose shape (function, token count,
// first position, key length, logit rows, input width) was seen before is captured once as a CUDA
// graph and replayed from then on: every denoising step of a block repeats its shape. A packed
// run of several sequences is enqueued eagerly.
//
// Profiled (BackendOptions::profiler set), every forward runs eagerly, each record between a pair
// of CUDA events (KernelTimer.h) and recorded as the CPU backend records it
// (program/RecordProfile.h), and blocks decode from the host: a graph replay or the device loop
// would run the records without a host call between them to record an event at.
//
// A whole block's denoising steps can also run on the device (denoiseBlock,
// CudaBackendBlockLoop.cpp): per step of the loop plan the forward, the artifact's sampler,
// accept, gate and renoise kernels, unrolled into CUDA graphs of `deviceLoopChunkSteps` steps,
// with one 8-byte loop state read back per chunk instead of the logits per step.
#pragma once

#include "runtime/artifact/ArtifactReader.h"
#include "runtime/backend/PackedForwards.h"
#include "runtime/backend/SequenceBackend.h"
#include "runtime/backend/SequenceForwards.h"
#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/DeviceMemory.h"
#include "runtime/cuda/DeviceWeights.h"
#include "runtime/cuda/ForwardGraphs.h"
#include "runtime/cuda/KernelModules.h"
#include "runtime/cuda/KernelTimer.h"
#include "runtime/cuda/LinearGemm.h"
#include "runtime/kv/PagedKvCache.h"
#include "runtime/model/DeclaredLaunch.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/profile/Profiler.h"
#include "runtime/program/KernelProgram.h"

#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace dlm::cuda {

struct CudaBackendSettings {
  // Capture repeated forwards as CUDA graphs and replay them (off: every forward is enqueued
  // kernel by kernel). createBackend turns it off when DLM_CUDA_GRAPHS=0.
  bool graphs = true;
  // Graphs kept at once (the oldest is dropped beyond this).
  size_t maxGraphs = 8;
  // Run a block's denoising steps on the device when the artifact has the plan's kernels (off:
  // the host loop, one logits copy per step). createBackend turns it off when
  // DLM_CUDA_DEVICE_LOOP=0.
  bool deviceLoop = true;
  // Fail a block the device loop cannot run, naming why, instead of running it on the host
  // (tests: proves the device loop ran). createBackend sets it for DLM_CUDA_DEVICE_LOOP=require.
  bool requireDeviceLoop = false;
  // Steps unrolled per graph launch of the device loop. The generated kernels and the gate stop
  // changing the block once it is finished, but a finished block's remaining forwards in the
  // chunk still run (cuBLASLt GEMMs cannot be skipped): up to K - 1 wasted forwards per block,
  // against one host round trip per K steps. 0: the plan's unroll (the program's
  // denoise_loop), else 4. createBackend sets it from DLM_CUDA_DEVICE_LOOP_CHUNK.
  int64_t deviceLoopChunkSteps = 0;
  // Device-loop graphs kept at once.
  size_t maxLoopGraphs = 32;
};

// What the device block loop did, for tests and profiling.
struct BlockLoopStatistics {
  int64_t blocks = 0;
  // Chunk graphs captured and replayed (eager chunks when graphs are off count in neither).
  int64_t captures = 0;
  int64_t replays = 0;
  int64_t chunks = 0;
  // Steps executed on the device, and those the decoder used (the rest ran after the block was
  // finished, inside its last chunk).
  int64_t stepsRun = 0;
  int64_t stepsUsed = 0;
};

class CudaBackend final : public SequenceBackend {
public:
  // `artifact` must outlive the backend (kernel records point into it). `maxPositions` is the
  // model's limit (0 = unknown).
  static StatusOr<std::unique_ptr<CudaBackend>>
  create(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const CublasLt> lt,
         const artifact::ArtifactReader &artifact,
         std::shared_ptr<const model::ModelWeights> weights, int64_t maxPositions,
         const BackendOptions &options, const CudaBackendSettings &settings = {});
  ~CudaBackend() override;

  std::string_view name() const override { return driver_->emulated() ? "cuda-emu" : "cuda"; }
  int64_t vocabSize() const override { return dims_.vocabSize; }

  Status reserve(int64_t tokens, int64_t logitRows) override;

  // Several sequences at once (docs/design/serving.md §2; the serving scheduler's forward): each
  // a ForwardSpec (any mode) of `function` on its own KV sequence, packed
  // into one run. Row-wise records and the cuBLASLt GEMMs run once over every part's rows, rope
  // reads a position per row, attention runs every part in one launch (a request per grid z,
  // each with its own block table, key length and query rows), kv_store, soft embeddings, input
  // rows and the LM head's rows go part by part. The logits are each forward's requested rows,
  // in order. A run of one part is the single-sequence forward, CUDA graphs included; a run of
  // several is enqueued eagerly. The sequences come from createSequence; the session's own one
  // is not among them.
  Status reservePacked(int64_t tokens, int64_t logitRows) override;
  StatusOr<sampling::LogitsView>
  forwardBatch(std::string_view function, const std::vector<SequenceForward> &forwards) override;
  MemoryUsage memoryUsage() const override;
  Status supports(const program::ProgramRecord &record) const override;
  bool denoisesBlock(const sampling::LoopPlan &plan) const override;
  StatusOr<sampling::BlockLoopResult> denoiseBlock(const sampling::LoopPlan &plan,
                                                   int32_t *canvas) override;

  const GraphStatistics &graphStatistics() const { return graphs_->statistics(); }
  const BlockLoopStatistics &blockLoopStatistics() const { return loopStatistics_; }
  // Which kernel target runs ("sm_90 (cubin)", "sm_90 (emulated, from source)").
  const std::string &kernelTarget() const { return modules_->description(); }
  DeviceElement precision() const { return element_; }

private:
  struct Function;
  // What a forward's enqueued work depends on besides the input buffers' contents: `count`
  // tokens at positions (and K/V slots) first.. attending to the slots [0, keys)
  // (SequenceForwards.h's ForwardSpan), returning rows [rowsBegin, rowsEnd) of them.
  struct Shape {
    int64_t count = 0, first = 0, keys = 0, rowsBegin = 0, rowsEnd = 0;
    // The device input buffer the forward reads (tokens, positions, KV lengths, block table).
    CUdeviceptr inputs = 0;
    // The function run (null: the default one), and the width of its uploaded input rows (0:
    // none, the soft embeddings are zero rows).
    const Function *function = nullptr;
    int64_t inputWidth = 0;
    // How many fed rows (from the first) the input gives: select_input_rows splits there.
    int64_t inputRows = 0;
    // The fed row of the input's first row (ForwardInput::first): the soft embedding's launch.
    int64_t inputFirst = 0;
    // A packed run's parts (null: one part, the session's sequence, as the fields above say).
    // Only one-part forwards are captured as graphs, so the key leaves them out.
    const std::vector<PackedPart> *parts = nullptr;
    // A window forward's keys run past its tokens; the key length is an uploaded input, but
    // keying graphs by it keeps most windows and cached forwards apart (a window reaching the
    // sequence end has a cached forward's shape: the same launches, only the host's cache
    // bookkeeping differs).
    ForwardGraphs::Shape key() const {
      return std::tuple(count, first, keys, rowsBegin, rowsEnd,
                        static_cast<int64_t>(reinterpret_cast<uintptr_t>(function)), inputWidth,
                        inputRows, inputFirst);
    }
  };
  // One step of the device loop as its accept and gate kernels are launched: the step's
  // parameters that are baked into a chunk's graph (CudaBackendBlockLoop.cpp).
  struct LoopStepLaunch {
    const DeviceKernel *accept = nullptr;
    double bound = 0, threshold = 0, confidence = 0;
    int topK = 0, stability = 0, excluded = -1, lastStep = 0, gateMode = 0;
  };
  // A loop plan resolved into kernels, launches and forwards (CudaBackendBlockLoop.cpp).
  struct LoopLaunch {
    // How the steps' forwards use the K/V cache: every step a full forward (the cache rebuilt,
    // [0, keep) kept at the end); every step cached over the [0, keep) the cache holds; a full
    // forward keeping [0, keep) first, then cached steps over it; or (the dual cache) a full
    // forward keeping the whole sequence first, then window steps feeding [keep, block end)
    // over it.
    enum class Cache { rebuilt, cached, prefixFirst, dualFirst };
    const DeviceKernel *sampler = nullptr, *gate = nullptr, *renoise = nullptr;
    std::vector<LoopStepLaunch> steps;
    Cache cache = Cache::rebuilt;
    // The prefix kept (a window's first fed position), and the slots the cache holds after the
    // loop, as the host's forwards leave it.
    int64_t keep = 0;
    int64_t keptAfter = 0;
    // Step 0's forward and every later one's.
    Shape first, later;
  };
  // The device block loop's buffers, at capacity for `canvas` positions and `steps` steps.
  struct LoopBuffers {
    int64_t canvas = 0, steps = 0;
    DeviceAllocation allocation;
    PinnedHostAllocation host;
    // Uploaded per block: seed, id (u64), stepTable (i64), temperatures (f32), canvas,
    // rowPosition, rowRequest (i32), in this order from `uploaded`.
    CUdeviceptr uploaded = 0, seed = 0, id = 0, stepTable = 0, temperatures = 0, canvasTokens = 0,
                rowPosition = 0, rowRequest = 0;
    size_t uploadedBytes = 0;
    // Reset per block: previousArgmax (-1); counters = stableSteps, converged, loopState[2] (0).
    CUdeviceptr previousArgmax = 0, counters = 0;
    // Written per step.
    CUdeviceptr sampled = 0, argmax = 0, entropy = 0, confidence = 0, keep = 0;
  };
  // What one kernel record launches: its generated kernel (function null when it has none:
  // a plain GEMM; an lm_head's norm), the lm_head's soft-cap, a moe record's five kernels, and
  // its device weights (null when absent).
  struct BoundRecord {
    DeviceKernel kernel;
    DeviceKernel softcap;
    // linear / norm_linear of an 8-bit weight: the kernel that widens it before the GEMM, and
    // for an FP8 weight the one that quantizes the input rows for an FP8 GEMM; fp8Gemm when this
    // device runs that GEMM (sm_90 and shapes cuBLASLt's FP8 GEMMs take), else it widens.
    DeviceKernel widen;
    DeviceKernel quantize;
    bool fp8Gemm = false;
    DeviceKernel moeRoute, moePlan, moeGateUp, moeDown, moeCombine;
    const DeviceTensor *weight = nullptr;
    const DeviceTensor *bias = nullptr;
    const DeviceTensor *norm = nullptr;
    // moe's weights (the optional ones null when absent).
    struct MoeWeights {
      const DeviceTensor *router = nullptr, *routerScale = nullptr, *expertScale = nullptr,
                         *expertBias = nullptr, *gateUp = nullptr, *down = nullptr;
    } moe;
    // "<record>: cuLaunchKernel", what a failed launch names (made once, not per launch).
    std::string launchName;
    // A kind the declared launcher runs: its kernel's arguments (runtime/model/DeclaredLaunch.h),
    // each with the record's value it binds (a weight's device tensor once the weights are up, a
    // scalar parameter), and the grid.
    struct DeclaredArgument {
      spec::kernels::LaunchArgument argument;
      std::string weightName; // weight, weightRows: the record's weight
      const DeviceTensor *weight = nullptr;
      double real = 0;
      int64_t integer = 0;
    };
    std::vector<DeclaredArgument> declared;
    spec::kernels::GridDimension gridX, gridY;
  };
  // One forward function: its records and what each launches.
  struct Function {
    program::KernelProgram program;
    std::vector<BoundRecord> bound; // one per program.kernels entry
    // Its prefills adopt and its commits publish prefix pages (BackendOptions::sharePrefixes).
    bool sharesPrefix = false;
  };

  CudaBackend(std::shared_ptr<const CudaDriver> driver, std::shared_ptr<const CublasLt> lt,
              std::shared_ptr<const model::ModelWeights> hostWeights,
              const CudaBackendSettings &settings);
  Status initialise(const artifact::ArtifactReader &artifact, int64_t maxPositions,
                    const BackendOptions &options);
  // Parses the kernel program and binds each record to its kernel and weights.
  Status bindProgram(const artifact::ArtifactReader &artifact);
  // Binds one record to its kernels (the comma-separated cuda_kernel list) and checks that they
  // compute what the record asks.
  Status bindRecord(const program::KernelProgram &program, const program::ProgramRecord &record,
                    BoundRecord &bound, std::vector<DeviceKernel> &kernels);
  // The declared launch of the record's kernel, its parameters bound (not its weights: they are
  // found once uploaded).
  static Status bindDeclaredLaunch(const program::KernelProgram &program,
                                   const program::ProgramRecord &record, BoundRecord &bound);
  static Status bindParameter(const program::ProgramRecord &record,
                              BoundRecord::DeclaredArgument &declared);
  // The function called `name` (empty: the default), else an error listing them.
  StatusOr<const Function *> function(std::string_view name) const;

  // The packed run over `parts` (PackedForwards.h): lays them out, grows their sequences, uploads
  // their inputs, enqueues the function once (a one-part run through the graphs) and copies the
  // logits and captured rows out. `wroteKv` (optional) says whether it got as far as its kernels.
  StatusOr<sampling::LogitsView> runParts(const Function &function,
                                          std::vector<PackedPart> &parts,
                                          bool *wroteKv = nullptr);
  // Sizes every buffer for `tokens` fed rows, `logitRows` logit rows and packed runs of up to
  // `parts` sequences (each with a block table of the longest sequence's pages).
  Status reserveBuffers(int64_t tokens, int64_t logitRows, int64_t parts);
  // Copies the parts' input rows to the device, each part's after the previous ones': float rows
  // for a soft embedding (partInputFloats each), or the forward_input rows at the device
  // precision at the parts' row offsets, zero past each part's input rows.
  Status uploadInputRows(const Function &function, const std::vector<PackedPart> &parts,
                         int64_t count);
  static int64_t partInputFloats(const PackedPart &part) {
    return part.input.rows ? (part.span.count - part.input.first) * part.input.width : 0;
  }
  // The capture record's rows ([operand][T, w] on the device) into captured_ ([T, n*w] floats).
  Status downloadCapture(const Function &function, int64_t count);
  // The int32 inputs of a forward in an input buffer of reservedParts_ parts: tokens [T],
  // positions [T], queryStarts [parts + 1], kvLengths [parts], inputScales [parts], blockTables
  // [parts, tablePages] (T = reservedTokens_; one part: the layout of a single-sequence forward).
  struct InputLayout {
    // inputScales: each part's ForwardInput::scale, a float in an int32 slot (a graph's soft
    // embeddings read it from there, so a replay takes the new forward's).
    int64_t positions = 0, queryStarts = 0, kvLengths = 0, inputScales = 0, blockTables = 0,
            end = 0;
  };
  InputLayout inputLayout() const;
  // Copies the inputs of a forward of the session's sequence into `shape.inputs`.
  Status uploadInputs(const int32_t *tokens, const Shape &shape);
  // Copies the packed inputs of `parts` (laid out) into the device input buffer `inputs`.
  Status uploadParts(const std::vector<PackedPart> &parts, CUdeviceptr inputs);
  // Enqueues a run's records: `partCount` parts of `shape` (the profiled path, a graph or
  // eagerly).
  Status enqueueRun(const Shape &shape, size_t partCount);
  // Enqueues every kernel and GEMM of a forward of `shape`, reading the fixed buffers; `timed`:
  // each record between CUDA events of timer_.
  Status enqueueForward(const Shape &shape, bool timed = false);
  // A record's launches: each kind's launcher below, by KernelKind (the table
  // runtime/schema/KernelOps.td writes).
  Status enqueueRecord(const program::KernelProgram &program,
                       const program::ProgramRecord &record, const BoundRecord &bound,
                       const Shape &shape, const std::vector<PackedPart> &parts);
  using RecordLauncher = Status (CudaBackend::*)(const program::KernelProgram &,
                                                 const program::ProgramRecord &,
                                                 const BoundRecord &, const Shape &,
                                                 const std::vector<PackedPart> &);
  static const RecordLauncher kLaunchers[];
  // What a record's launch reads: its token count, its result's width and rows, its first
  // operands' rows (a capture reads the rest itself), and its name in errors. Nothing allocated:
  // it is made for every eager launch.
  static constexpr size_t kRowOperands = 4;
  struct RecordRows {
    int64_t count = 0;
    int tokens = 0;
    int64_t width = 0;
    CUdeviceptr result = 0;
    CUdeviceptr operands[kRowOperands] = {};
    const char *what = nullptr;
  };
  RecordRows rowsOf(const program::KernelProgram &program, const program::ProgramRecord &record,
                    const BoundRecord &bound, const Shape &shape) const;
  // `elements` elements from `from` to `to` on the stream (nothing when they are the same rows).
  Status copyRows(const program::ProgramRecord &record, CUdeviceptr to, CUdeviceptr from,
                  int64_t elements);
  // Each kind's launcher, named by runtime/schema/KernelOps.td: enqueueDeclared, the launch its
  // kernel declares (embedding, add, silu_mul, gelu_mul, scale, and any kind that names none), or
  // its own (enqueueRope for rope; enqueueProjection for linear, norm_linear and lm_head,
  // enqueuePerPart for the records that go part by part: kv_store, soft_embedding,
  // select_input_rows).
#define DLM_KERNEL_CUDA_LAUNCHES_MEMBERS
#define DLM_KERNEL_MEMBER(member)                                                                  \
  Status member(const program::KernelProgram &program, const program::ProgramRecord &record,       \
                const BoundRecord &bound, const Shape &shape,                                      \
                const std::vector<PackedPart> &parts);
#include "runtime/schema/KernelRecordSpec.inc"
  // enqueueRecord between CUDA events, in the parts the CPU backend times (a record that
  // normalises its input first: the norm, then the rest).
  Status enqueueTimedRecord(const program::KernelProgram &program,
                            const program::ProgramRecord &record, const BoundRecord &bound,
                            const Shape &shape, const std::vector<PackedPart> &parts);
  // A projecting record (linear, norm_linear, lm_head) in its two parts: its input rows
  // (norm_linear's norm into normed_; the LM head's requested rows, normalised or copied, into
  // headInput_), then its GEMM with its epilogue (the residual, the logits' soft-cap).
  Status enqueueProjectionInput(const program::KernelProgram &program,
                                const program::ProgramRecord &record, const BoundRecord &bound,
                                const Shape &shape, const std::vector<PackedPart> &parts);
  Status enqueueProjectionGemm(const program::KernelProgram &program,
                               const program::ProgramRecord &record, const BoundRecord &bound,
                               const Shape &shape, const std::vector<PackedPart> &parts);
  // The LM head's parts (enqueueProjectionInput, enqueueProjectionGemm).
  Status enqueueHeadInput(const program::KernelProgram &program,
                          const program::ProgramRecord &record, const BoundRecord &bound,
                          const Shape &shape, const std::vector<PackedPart> &parts);
  Status enqueueHeadGemm(const program::KernelProgram &program,
                         const program::ProgramRecord &record, const BoundRecord &bound,
                         const Shape &shape, const std::vector<PackedPart> &parts);
  // The logit rows a run computes: every part's requested rows.
  static int64_t logitRowCount(const std::vector<PackedPart> &parts);
  // Layer `layer`'s K and V pages in the pool, and their strides (elements).
  struct LayerPages {
    CUdeviceptr k = 0, v = 0;
    long long pageStride = 0, slotStride = 0;
  };
  LayerPages layerPages(int64_t layer) const;
  // The rows of value slot `index` of `program` in a forward of `count` tokens (the per-token-row
  // plan).
  CUdeviceptr slot(const program::KernelProgram &program, int64_t index, int64_t count) const;
  Status launch(const DeviceKernel &kernel, unsigned gridX, unsigned gridY, unsigned gridZ,
                void **arguments, const char *what);
  Status rmsNorm(const DeviceKernel &kernel, CUdeviceptr x, int64_t xStride, CUdeviceptr y,
                 int64_t yStride, CUdeviceptr weight, int64_t rows, int64_t rowsPerToken,
                 double eps, const char *what);
  // y[rows, weight.rows] (+)= x weight^T (+ bias), at the device precision.
  // A record that widens its weight reads an 8-bit weight of the dtype its kernel decodes, and
  // only such a record reads an 8-bit weight; errors name the record.
  Status checkNarrowWeight(const program::ProgramRecord &record, const BoundRecord &bound) const;
  // widenedWeight_, sized for the largest weight a record widens (none: nothing allocated).
  Status allocateWidenedWeight();
  // Whether the device runs FP8 GEMMs with per-row and per-column scales (compute capability
  // 9.0, where cuBLASLt has outer-vector scaling), and the records it runs them for.
  StatusOr<bool> hasFp8Gemms() const;
  Status chooseFp8Gemms();
  // y (+)= x weight^T through cuBLASLt for `bound`'s weight and bias: an 8-bit weight is widened
  // first, or for an FP8 GEMM the input rows are quantized.
  Status linear(const char *name, CUdeviceptr x, int64_t rows, const BoundRecord &bound,
                CUdeviceptr y, bool accumulate);
  Status copyPage(kv::PageIndex from, kv::PageIndex to);

  // The device block loop (CudaBackendBlockLoop.cpp).
  // The decoding kernel `kind` specialised as `match`; null when the artifact lacks it, an
  // error when it fails to load.
  StatusOr<const DeviceKernel *> loopKernel(std::string_view kind,
                                            const artifact::Attributes &match) const;
  // The plan's kernels and launches, or why the device loop cannot run it.
  StatusOr<LoopLaunch> resolveLoop(const sampling::LoopPlan &plan) const;
  Status resolveForwards(const sampling::LoopPlan &plan, LoopLaunch &launch) const;
  StatusOr<LoopStepLaunch> resolveStep(const sampling::StepPlan &step, int64_t canvas) const;
  // OK, or why the device loop cannot run this plan.
  Status deviceLoopSupport(const sampling::LoopPlan &plan) const;
  // resolveLoop, unless the device loop is off or the backend is profiled.
  StatusOr<LoopLaunch> resolveDeviceLoop(const sampling::LoopPlan &plan) const;
  Status reserveLoopBuffers(int64_t canvas, int64_t steps);
  // Sets the K/V cache and the input buffers up for the plan's forwards.
  Status enterLoopCache(const sampling::LoopPlan &plan, const LoopLaunch &launch);
  Status uploadLoopTables(const sampling::LoopPlan &plan);
  Status enqueueLoopStep(const sampling::LoopPlan &plan, const LoopLaunch &launch, int64_t step);
  // Runs chunk [start, end) of the plan's steps (a graph, captured or replayed), then reads
  // the loop state.
  Status runLoopChunk(const sampling::LoopPlan &plan, const LoopLaunch &launch,
                      const std::string &baked, int64_t start, int64_t end, int32_t *loopState);
  void clearLoopGraphs();

  std::shared_ptr<const CudaDriver> driver_;
  std::shared_ptr<const CublasLt> lt_;
  std::shared_ptr<const model::ModelWeights> hostWeights_;
  CudaBackendSettings settings_;
  model::ModelDims dims_;
  DeviceElement element_ = DeviceElement::f32;
  // Times each forward, and through timer_ each record on the device, when set (not owned).
  profile::Profiler *profiler_ = nullptr;
  // Exactly when profiler_ is set.
  std::unique_ptr<KernelTimer> timer_;

  CUcontext context_ = nullptr;
  bool ownsPrimaryContext_ = false;
  CUdevice device_ = 0;
  CUstream stream_ = nullptr;
  std::unique_ptr<KernelModules> modules_;
  // Every forward function by name; the default one ("forward") when the artifact has it (the
  // device block loop runs only that one).
  std::map<std::string, Function, std::less<>> functions_;
  const Function *default_ = nullptr;
  // The largest function's workspace rows (elements per token) and norm scratch.
  int64_t rowElements_ = 0, normRowElements_ = 0;
  // The widest soft_embedding table's rows (the most input columns a forward may give), and the
  // largest moe record's sizes (0 experts: none).
  int64_t softEmbeddingRows_ = 0;
  // The widest forward_input and capture rows of any function (0: none).
  int64_t forwardInputWidth_ = 0, captureWidth_ = 0;
  int64_t moeHidden_ = 0, moeExperts_ = 0, moeTopK_ = 0, moeWidth_ = 0;
  std::unique_ptr<DeviceWeights> weights_;
  std::unique_ptr<LinearGemm> gemm_;

  // KV pool: per layer a K and a V region of pageCount pages of pageTokens slots of the layer's
  // K/V width (kvWidths_; 0 for a layer without a cache), the layer's K region at kvOffsets_
  // (bytes), its V region right after it.
  DeviceAllocation kvPool_;
  std::vector<int64_t> kvWidths_;
  std::vector<size_t> kvOffsets_;
  int64_t pageTokens_ = 0;
  int64_t kvPageCount_ = 0;
  int64_t peakKvPages_ = 0;
  Status pageCopyStatus_ = Status::ok();

  // Workspace (reserve()): activations, inputs, logits, the cuBLASLt workspace.
  int64_t reservedTokens_ = 0;
  int64_t reservedLogitRows_ = 0;
  // Parts a packed run may have before the input buffers grow (1 until reservePacked).
  int64_t reservedParts_ = 0;
  // Block table entries per part: the longest sequence's pages.
  int64_t tablePages_ = 0;
  DeviceAllocation workspace_;
  DeviceAllocation gemmWorkspaceAllocation_;
  // The widest 8-bit weight at the device precision: each such GEMM widens its weight here
  // first (DeviceWeights keeps them narrow).
  DeviceAllocation widenedWeight_;
  // activations_: rowElements_ per token (the largest function's); normed_: norm_linear's
  // normalised rows.
  CUdeviceptr activations_ = 0, normed_ = 0, headInput_ = 0, logits_ = 0, gemmWorkspace_ = 0;
  size_t gemmWorkspaceBytes_ = 0;
  // int32 inputs (inputLayout()).
  CUdeviceptr inputs_ = 0;
  size_t inputBytes_ = 0;
  // The forward's float input rows [T, softEmbeddingRows_] (soft_embedding), and the moe
  // scratch: choice, weight [T, k], lists [E, T], counts [E], act [T * k, I], expert outputs
  // [T * k, H].
  CUdeviceptr inputRows_ = 0;
  // The capture record's operands, one [T, w] block each ([n][T, w]); the staging of the
  // forward_input rows at the device precision; the captured rows on the host ([T, n*w] floats)
  // and the view of the last forward's.
  CUdeviceptr captureRows_ = 0;
  std::vector<uint8_t> stagedInput_;
  PinnedHostAllocation hostCapture_;
  std::vector<float> capture_;
  CUdeviceptr moeChoice_ = 0, moeWeight_ = 0, moeLists_ = 0, moeCounts_ = 0, moeAct_ = 0,
              moeOut_ = 0;
  // FP8 GEMMs: the quantized input rows ([tokens, fp8InputWidth_] codes) and their scales.
  int64_t fp8InputWidth_ = 0;
  CUdeviceptr fp8Rows_ = 0, fp8RowScales_ = 0;
  PinnedHostAllocation hostInputs_;
  PinnedHostAllocation hostLogits_;

  // The forward's work by shape, replayed as CUDA graphs.
  std::unique_ptr<ForwardGraphs> graphs_;

  // The device block loop: a second input buffer (the full first step of a prefix-cached
  // low-confidence block, whose later steps read `inputs_`), the kernels per configuration
  // (nullopt: the artifact lacks one), the buffers and the chunk graphs by what they
  // bake in, most recently used first.
  CUdeviceptr loopInputs_ = 0;
  mutable std::map<std::string, std::optional<DeviceKernel>> loopKernels_;
  LoopBuffers loop_;
  std::list<std::pair<std::string, std::unique_ptr<CapturedGraph>>> loopGraphs_;
  BlockLoopStatistics loopStatistics_;
};

} // namespace dlm::cuda
