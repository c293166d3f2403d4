// The cuda backend's device block loop (DecodeModel::denoiseBlock): a denoise loop's steps
// without the logits ever reaching the host, driven by the loop plan (sampling/LoopPlan.h), the
// resolved parameters of each step's records. Per step, on the backend's one stream:
//
//   canvas -> the forward's token slots (a device-to-device copy), the forward (the step's full,
//   cached or window forward; a plan whose first step is the full forward keeping the prefix, or
//   the whole sequence, that later steps read reads a second input buffer for it), the
//   artifact's sampler over the block's logit rows, the step's accept kernel (keep mask,
//   convergence flag), the gate (compiler/codegen/kernels/BlockLoopGate.cpp: finished? then
//   freeze) and the renoise kernel (the next canvas).
//
// The steps are unrolled into graphs of `deviceLoopChunkSteps` steps (else the plan's unroll),
// captured once per chunk of step parameters: a graph's key is the canonical text of what its
// launches bake in, the chunk's steps without their RNG steps and temperatures, which are read
// from device tables uploaded per block, so later blocks of the same shape replay the same graphs
// at their own RNG steps. After each chunk the host reads the gate's 8-byte loop state and stops
// once the loop is finished; then it reads the canvas back. Every decision is the plan's: the
// backend knows no policy and no knob. A profiled backend declines the loop (resolveDeviceLoop):
// its blocks decode from the host, every forward's records timed.
#include "runtime/cuda/CudaBackend.h"

#include "runtime/model/KernelProgram.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace dlm::cuda {

namespace {

// The longest canvas the loop serves: the accept and gate kernels run a block's rows as one
// thread block.
constexpr int64_t kMaxLoopCanvas = 1024;
// Steps per graph when neither the settings nor the plan say (dlmc compile's default).
constexpr int64_t kDefaultUnrollSteps = 4;

// The loop plan's types (LoopPlan, StepPlan and its steps), which this file reads throughout.
using namespace sampling;

std::string str(int64_t value) { return std::to_string(value); }

const char *acceptKernelRule(AcceptStep::Rule rule) {
  switch (rule) {
  case AcceptStep::Rule::topK:
    return "top_k";
  case AcceptStep::Rule::threshold:
    return "confidence_threshold";
  case AcceptStep::Rule::entropyBound:
    return "entropy_bound";
  }
  return "?";
}

bool sameForward(const ForwardStep &a, const ForwardStep &b) {
  return a.mode == b.mode && a.count == b.count && a.keep == b.keep && a.feedEnd == b.feedEnd &&
         a.rowBegin == b.rowBegin && a.rowEnd == b.rowEnd;
}

// What a step bakes into a chunk's graph: its parameters but the table-driven ones.
std::string bakedStepText(StepPlan step) {
  step.sample.rngStep = 0;
  step.sample.temperature = 0;
  step.renoise.rngStep = 0;
  return sampling::stepPlanText(step);
}

// Checks what every step must share (one sampler and one renoise kernel; one RNG step table).
Status checkUniformSteps(const LoopPlan &plan) {
  const StepPlan &first = plan.steps.front();
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const StepPlan &step = plan.steps[s];
    if (step.sample.kind != first.sample.kind)
      return Status::error("step " + str(static_cast<int64_t>(s)) +
                           " samples differently from step 0");
    if (step.renoise.noise != first.renoise.noise ||
        step.renoise.candidates != first.renoise.candidates)
      return Status::error("step " + str(static_cast<int64_t>(s)) +
                           " renoises differently from step 0");
    if (step.sample.rngStep != step.renoise.rngStep)
      return Status::error("step " + str(static_cast<int64_t>(s)) +
                           " samples and renoises at different RNG steps");
  }
  return Status::ok();
}

} // namespace

StatusOr<const DeviceKernel *> CudaBackend::loopKernel(std::string_view kind,
                                                       const artifact::Attributes &match) const {
  std::string key(kind);
  for (const auto &[name, value] : match)
    key += " " + name + "=" + artifact::attributeValueText(value);
  auto found = loopKernels_.find(key);
  if (found != loopKernels_.end())
    return found->second ? &*found->second : nullptr;
  StatusOr<DeviceKernel> kernel = modules_->find(kind, match);
  // An artifact compiled for another program or block length lacks it: the host loop runs.
  // Any other failure (a module that does not load) is an error, and not remembered.
  if (!kernel && kernel.status().message().find(" has no ") == std::string::npos)
    return kernel.status();
  std::optional<DeviceKernel> stored;
  if (kernel)
    stored = *kernel;
  const std::optional<DeviceKernel> &entry = loopKernels_.emplace(key, stored).first->second;
  return entry ? &*entry : nullptr;
}

StatusOr<CudaBackend::LoopStepLaunch> CudaBackend::resolveStep(const StepPlan &step,
                                                               int64_t canvas) const {
  using artifact::AttributeValue;
  const AcceptStep &accept = step.accept;
  const bool masked = accept.candidates == AcceptStep::Candidates::masked;
  auto acceptKernel = [&](const char *rule) {
    return loopKernel("accept", {{"canvas", AttributeValue(canvas)},
                                 {"rule", AttributeValue(std::string(rule))},
                                 {"mask_absorbing", AttributeValue(masked)}});
  };
  LoopStepLaunch resolved;
  DLM_ASSIGN_OR_RETURN(resolved.accept, acceptKernel(acceptKernelRule(accept.rule)));
  if (accept.rule == AcceptStep::Rule::topK) {
    resolved.topK = static_cast<int>(std::clamp<int64_t>(accept.k, 0, canvas));
    if (!resolved.accept && accept.k >= canvas) {
      // Keeping every candidate (a step cap's last step) is also the threshold kernel at 0, which
      // an artifact compiled for the threshold rule has: a confidence is a probability.
      DLM_ASSIGN_OR_RETURN(resolved.accept, acceptKernel("confidence_threshold"));
      resolved.threshold = 0.0;
    }
  } else if (accept.rule == AcceptStep::Rule::threshold) {
    resolved.threshold = accept.threshold;
  } else {
    resolved.bound = accept.bound;
  }
  if (!resolved.accept)
    return Status::error("the artifact has no accept kernel (rule " +
                         std::string(acceptKernelRule(accept.rule)) + ") for blocks of " +
                         str(canvas) +
                         " (compile it with dlmc compile --target cuda for this program and "
                         "block length)");
  // Without a convergence test the accept kernel's flag must never be set.
  const bool converge = accept.converge == AcceptStep::Converge::stableConfident;
  resolved.stability =
      converge ? static_cast<int>(std::clamp<int64_t>(accept.stability, 0, INT_MAX)) : INT_MAX;
  resolved.confidence = converge ? accept.confidence : 0.0;
  resolved.excluded = static_cast<int>(step.sample.excluded);
  resolved.lastStep = step.gate.last ? 1 : 0;
  resolved.gateMode = step.gate.rule == GateStep::Rule::convergedOrLast ? 1 : 0;
  return resolved;
}

// The forwards the device chains: every step the same one, a full forward keeping the prefix
// followed by cached forwards over it, or (the dual cache) a full forward keeping the whole
// sequence followed by window forwards feeding [keep, feed end) over it (the block, or with
// a vicinity the positions around it too: they hold still while the block is decoded); each over
// sequence[0, total) returning the block's rows.
Status CudaBackend::resolveForwards(const LoopPlan &plan, LoopLaunch &loop) const {
  using Mode = ForwardStep::Mode;
  const ForwardStep &first = plan.steps.front().forward;
  const ForwardStep &later = plan.steps.size() > 1 ? plan.steps[1].forward : first;
  for (size_t s = 1; s < plan.steps.size(); ++s)
    if (!sameForward(plan.steps[s].forward, later))
      return Status::error("step " + str(static_cast<int64_t>(s)) +
                           "'s forward differs from step 1's");
  for (const ForwardStep *forward : {&first, &later})
    if (forward->count != plan.total || forward->rowBegin != plan.begin ||
        forward->rowEnd != plan.end)
      return Status::error("a forward over [0, " + str(forward->count) + ") returning rows [" +
                           str(forward->rowBegin) + ", " + str(forward->rowEnd) +
                           ") rather than the sequence's " + str(plan.total) +
                           " tokens and the block's rows");
  if (first.mode == Mode::window)
    return Status::error("a window forward first, over a cache the loop did not fill");
  const bool dual = later.mode == Mode::window;
  if (dual && (first.mode != Mode::full || first.keep != plan.total))
    return Status::error("window forwards after a forward that does not keep the whole sequence");
  if (dual && (later.feedEnd < plan.end || later.feedEnd > plan.total))
    return Status::error("a window forward feeding up to " + str(later.feedEnd) +
                         ", not between the block end " + str(plan.end) + " and the sequence end " +
                         str(plan.total));
  if (!dual && first.keep != later.keep)
    return Status::error("forwards keeping different prefixes");
  // A window's first fed position plays the kept prefix's part.
  const int64_t keep = later.keep;
  if (keep < 0 || keep > plan.begin)
    return Status::error("a forward keeping " + str(keep) + " tokens, past the block start " +
                         str(plan.begin));
  if (dual)
    loop.cache = LoopLaunch::Cache::dualFirst;
  else if (first.mode == later.mode)
    loop.cache = first.mode == Mode::full ? LoopLaunch::Cache::rebuilt : LoopLaunch::Cache::cached;
  else if (first.mode == Mode::full)
    loop.cache = LoopLaunch::Cache::prefixFirst;
  else
    return Status::error("a cached forward followed by full ones");
  loop.keep = keep;
  loop.keptAfter = dual ? plan.total : keep;
  const Shape full{plan.total, 0, plan.total, plan.begin, plan.end, inputs_};
  const Shape cached{plan.total - keep, keep, plan.total, plan.begin - keep, plan.end - keep,
                     inputs_};
  const Shape window{later.feedEnd - keep, keep,   plan.total, plan.begin - keep,
                     plan.end - keep,      inputs_};
  loop.first = loop.cache == LoopLaunch::Cache::rebuilt ? full : cached;
  loop.later = dual ? window : loop.first;
  if (loop.cache == LoopLaunch::Cache::prefixFirst || dual) {
    // The first forward reads its own buffer, which the later steps' inputs do not overwrite.
    loop.first = full;
    loop.first.inputs = loopInputs_;
  }
  return Status::ok();
}

StatusOr<CudaBackend::LoopLaunch> CudaBackend::resolveLoop(const LoopPlan &plan) const {
  using artifact::AttributeValue;
  const int64_t canvas = plan.end - plan.begin;
  if (!default_)
    return Status::error("the kernel program has no '" +
                         std::string(spec::kernels::kDefaultFunction) +
                         "' function (the device loop runs only that one)");
  if (plan.steps.empty())
    return Status::error("a loop of no steps");
  if (canvas <= 0 || canvas > kMaxLoopCanvas)
    return Status::error("a block of " + str(canvas) + " positions (the loop serves 1 to " +
                         str(kMaxLoopCanvas) + ")");
  if (canvas > reservedLogitRows_ || plan.total > reservedTokens_)
    return Status::error("a block of " + str(canvas) + " rows over " + str(plan.total) +
                         " tokens exceeds the reserved " + str(reservedLogitRows_) + " rows, " +
                         str(reservedTokens_) + " tokens");
  DLM_RETURN_IF_ERROR(checkUniformSteps(plan));
  LoopLaunch loop;
  DLM_RETURN_IF_ERROR(resolveForwards(plan, loop));
  const StepPlan &first = plan.steps.front();
  auto text = [](const char *value) { return AttributeValue(std::string(value)); };
  const bool tempered = first.sample.kind == SampleStep::Kind::tempered;
  DLM_ASSIGN_OR_RETURN(
      loop.sampler,
      loopKernel("sampler", {{"vocab", AttributeValue(dims_.vocabSize)},
                             {"logits", text("f32")},
                             {"softcap", AttributeValue(0.0)},
                             {"confidence", text(tempered ? "at_temperature" : "unit_temperature")},
                             {"softmax_statistics", AttributeValue(false)}}));
  DLM_ASSIGN_OR_RETURN(loop.gate,
                       loopKernel("block_loop_gate", {{"canvas", AttributeValue(canvas)}}));
  const RenoiseStep &renoise = first.renoise;
  DLM_ASSIGN_OR_RETURN(
      loop.renoise,
      loopKernel("renoise",
                 {{"vocab", AttributeValue(dims_.vocabSize)},
                  {"noise", text(renoise.noise == RenoiseStep::Noise::mask ? "mask" : "uniform")},
                  {"initial_canvas", AttributeValue(false)},
                  {"candidates", text(renoise.candidates == RenoiseStep::Candidates::maskedOnly
                                          ? "masked_only"
                                          : "every_rejected")}}));
  for (const auto &[kernel, what] :
       {std::pair{loop.sampler, "sampler"}, std::pair{loop.gate, "block_loop_gate"},
        std::pair{loop.renoise, "renoise"}})
    if (!kernel)
      return Status::error("the artifact has no " + std::string(what) +
                           " kernel for this loop's blocks of " + str(canvas) +
                           " (compile it with dlmc compile --target cuda for this program and "
                           "block length)");
  loop.steps.reserve(plan.steps.size());
  for (const StepPlan &step : plan.steps) {
    DLM_ASSIGN_OR_RETURN(LoopStepLaunch resolved, resolveStep(step, canvas));
    loop.steps.push_back(resolved);
  }
  return loop;
}

bool CudaBackend::denoisesBlock(const LoopPlan &plan) const {
  if (!settings_.deviceLoop)
    return false;
  // Looking the kernels up loads modules: the context must be this thread's.
  if (!driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent").isOk())
    return settings_.requireDeviceLoop;
  // Required: denoiseBlock names why it cannot.
  return settings_.requireDeviceLoop || deviceLoopSupport(plan).isOk();
}

Status CudaBackend::deviceLoopSupport(const LoopPlan &plan) const {
  StatusOr<LoopLaunch> loop = resolveDeviceLoop(plan);
  return loop ? Status::ok() : loop.status();
}

StatusOr<CudaBackend::LoopLaunch> CudaBackend::resolveDeviceLoop(const LoopPlan &plan) const {
  if (!settings_.deviceLoop)
    return Status::error("the device loop is off");
  // A chunk's steps run without a host call between their records, so none could be bracketed
  // by CUDA events (KernelTimer.h): profiled, each step's forward runs from the host instead.
  if (profiler_)
    return Status::error("the backend is profiled (profiled blocks decode from the host, each "
                         "forward's records timed)");
  return resolveLoop(plan);
}

void CudaBackend::clearLoopGraphs() { loopGraphs_.clear(); }

Status CudaBackend::reserveLoopBuffers(int64_t canvas, int64_t steps) {
  if (canvas <= loop_.canvas && steps <= loop_.steps)
    return Status::ok();
  canvas = std::max(canvas, loop_.canvas);
  steps = std::max(steps, loop_.steps);
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuStreamSynchronize(stream_),
                                     "device block loop: cuStreamSynchronize"));
  // The loop's graphs read the old buffers' addresses.
  clearLoopGraphs();
  const size_t c = static_cast<size_t>(canvas), n = static_cast<size_t>(steps);
  // The uploaded region: 8-byte fields first, then the 4-byte ones.
  const size_t uploadedBytes = 16 + 8 * n + 4 * n + 4 * c * 3;
  ArenaLayout layout;
  const size_t uploaded = layout.add(uploadedBytes);
  const size_t previousArgmax = layout.add(4 * c);
  const size_t counters = layout.add(4 * 4);
  const size_t sampled = layout.add(4 * c);
  const size_t argmax = layout.add(4 * c);
  const size_t entropy = layout.add(4 * c);
  const size_t confidence = layout.add(4 * c);
  const size_t keep = layout.add(c);
  // Nothing is reserved until both allocations succeed (allocate frees the old buffer first).
  loop_.canvas = 0;
  loop_.steps = 0;
  DLM_RETURN_IF_ERROR(
      loop_.allocation.allocate(driver_, layout.size(), "device block loop buffers"));
  // Host side: the uploaded region, then the loop state and the canvas read back.
  DLM_RETURN_IF_ERROR(loop_.host.allocate(driver_, uploadedBytes + 16 + 4 * c,
                                          "device block loop staging (pinned)"));
  const CUdeviceptr base = loop_.allocation.pointer();
  loop_.uploaded = base + uploaded;
  loop_.uploadedBytes = uploadedBytes;
  loop_.seed = loop_.uploaded;
  loop_.id = loop_.seed + 8;
  loop_.stepTable = loop_.id + 8;
  loop_.temperatures = loop_.stepTable + 8 * n;
  loop_.canvasTokens = loop_.temperatures + 4 * n;
  loop_.rowPosition = loop_.canvasTokens + 4 * c;
  loop_.rowRequest = loop_.rowPosition + 4 * c;
  loop_.previousArgmax = base + previousArgmax;
  loop_.counters = base + counters;
  loop_.sampled = base + sampled;
  loop_.argmax = base + argmax;
  loop_.entropy = base + entropy;
  loop_.confidence = base + confidence;
  loop_.keep = base + keep;
  loop_.canvas = canvas;
  loop_.steps = steps;
  return Status::ok();
}

Status CudaBackend::enterLoopCache(const LoopPlan &plan, const LoopLaunch &loop) {
  const int64_t keep = loop.keep;
  switch (loop.cache) {
  case LoopLaunch::Cache::rebuilt:
    DLM_RETURN_IF_ERROR(kv_->trim(sequence_, 0));
    DLM_RETURN_IF_ERROR(kv_->append(sequence_, plan.total));
    DLM_RETURN_IF_ERROR(uploadInputs(plan.sequence, loop.first));
    break;
  case LoopLaunch::Cache::prefixFirst:
    // The first forward's inputs over an empty cache, then the prefix it keeps committed and
    // the cached steps' inputs over it.
    DLM_RETURN_IF_ERROR(kv_->trim(sequence_, 0));
    DLM_RETURN_IF_ERROR(kv_->append(sequence_, plan.total));
    DLM_RETURN_IF_ERROR(uploadInputs(plan.sequence, loop.first));
    // The staging buffer is reused below.
    DLM_RETURN_IF_ERROR(driver_->check(driver_->cuStreamSynchronize(stream_),
                                       "device block loop: cuStreamSynchronize"));
    DLM_RETURN_IF_ERROR(kv_->trim(sequence_, keep));
    DLM_RETURN_IF_ERROR(kv_->commit(sequence_));
    DLM_RETURN_IF_ERROR(kv_->append(sequence_, plan.total - keep));
    DLM_RETURN_IF_ERROR(uploadInputs(plan.sequence + keep, loop.later));
    break;
  case LoopLaunch::Cache::dualFirst:
    // The first forward's inputs over an empty cache, which then keeps the whole sequence for
    // the window steps, whose inputs follow.
    DLM_RETURN_IF_ERROR(kv_->trim(sequence_, 0));
    DLM_RETURN_IF_ERROR(kv_->append(sequence_, plan.total));
    DLM_RETURN_IF_ERROR(uploadInputs(plan.sequence, loop.first));
    // The staging buffer is reused below.
    DLM_RETURN_IF_ERROR(driver_->check(driver_->cuStreamSynchronize(stream_),
                                       "device block loop: cuStreamSynchronize"));
    DLM_RETURN_IF_ERROR(kv_->commit(sequence_));
    DLM_RETURN_IF_ERROR(uploadInputs(plan.sequence + keep, loop.later));
    break;
  case LoopLaunch::Cache::cached:
    if (kv_->length(sequence_) != keep)
      return Status::error("device block loop: the KV cache holds " + str(kv_->length(sequence_)) +
                           " tokens, the plan expects " + str(keep));
    DLM_RETURN_IF_ERROR(kv_->append(sequence_, plan.total - keep));
    DLM_RETURN_IF_ERROR(uploadInputs(plan.sequence + keep, loop.later));
    break;
  }
  DLM_RETURN_IF_ERROR(pageCopyStatus_);
  peakKvPages_ = std::max<int64_t>(peakKvPages_, kv_->pageCount() - kv_->freePages());
  return Status::ok();
}

// The per-block tables (RNG step and temperature of each step, the canvas and its rows' keys),
// and the loop state reset.
Status CudaBackend::uploadLoopTables(const LoopPlan &plan) {
  const int64_t canvas = plan.end - plan.begin;
  char *host = static_cast<char *>(loop_.host.data());
  const size_t n = static_cast<size_t>(loop_.steps), c = static_cast<size_t>(loop_.canvas);
  std::memcpy(host, &plan.seed, 8);
  std::memcpy(host + 8, &plan.request, 8);
  int64_t *steps = reinterpret_cast<int64_t *>(host + 16);
  float *temperatures = reinterpret_cast<float *>(host + 16 + 8 * n);
  int32_t *canvasTokens = reinterpret_cast<int32_t *>(host + 16 + 12 * n);
  int32_t *positions = canvasTokens + c;
  int32_t *requests = positions + c;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    steps[s] = plan.steps[s].sample.rngStep;
    // The sampler reads a float.
    temperatures[s] = static_cast<float>(plan.steps[s].sample.temperature);
  }
  for (int64_t j = 0; j < canvas; ++j) {
    canvasTokens[j] = plan.sequence[plan.begin + j];
    positions[j] = static_cast<int32_t>(plan.begin + j);
    requests[j] = 0;
  }
  DLM_RETURN_IF_ERROR(
      driver_->check(driver_->cuMemcpyHtoDAsync(loop_.uploaded, host, loop_.uploadedBytes, stream_),
                     "device block loop: tables in (cuMemcpyHtoDAsync)"));
  DLM_RETURN_IF_ERROR(
      driver_->check(driver_->cuMemsetD32Async(loop_.previousArgmax, 0xffffffffu,
                                               static_cast<size_t>(canvas), stream_),
                     "device block loop: cuMemsetD32Async"));
  return driver_->check(driver_->cuMemsetD32Async(loop_.counters, 0, 4, stream_),
                        "device block loop: cuMemsetD32Async");
}

Status CudaBackend::enqueueLoopStep(const LoopPlan &plan, const LoopLaunch &loop, int64_t step) {
  const int64_t canvas = plan.end - plan.begin;
  const Shape &shape = step == 0 ? loop.first : loop.later;
  const LoopStepLaunch &baked = loop.steps[static_cast<size_t>(step)];
  // The canvas into the forward's token slots.
  DLM_RETURN_IF_ERROR(driver_->check(
      driver_->cuMemcpyDtoDAsync(
          shape.inputs + static_cast<size_t>(plan.begin - shape.first) * sizeof(int32_t),
          loop_.canvasTokens, static_cast<size_t>(canvas) * sizeof(int32_t), stream_),
      "device block loop: canvas into the forward's inputs (cuMemcpyDtoDAsync)"));
  DLM_RETURN_IF_ERROR(enqueueForward(shape));

  int rows = static_cast<int>(canvas);
  CUdeviceptr stepCounter = loop_.stepTable + static_cast<size_t>(step) * sizeof(int64_t);
  CUdeviceptr converged = loop_.counters + sizeof(int32_t);
  CUdeviceptr stableSteps = loop_.counters;
  CUdeviceptr loopState = loop_.counters + 2 * sizeof(int32_t);
  int maskToken = plan.maskToken;
  {
    CUdeviceptr logits = logits_;
    long long rowStride = dims_.vocabSize;
    CUdeviceptr temperature = loop_.temperatures + static_cast<size_t>(step) * sizeof(float);
    int excluded = baked.excluded;
    void *arguments[] = {
        &logits,        &rowStride,    &rows,          &loop_.rowRequest, &loop_.rowPosition,
        &loop_.seed,    &loop_.id,     &stepCounter,   &temperature,      &excluded,
        &loop_.sampled, &loop_.argmax, &loop_.entropy, &loop_.confidence};
    DLM_RETURN_IF_ERROR(launch(*loop.sampler, static_cast<unsigned>(canvas), 1, 1, arguments,
                               "device block loop: sampler: cuLaunchKernel"));
  }
  {
    double bound = baked.bound, threshold = baked.threshold, confidenceBound = baked.confidence;
    int topK = baked.topK, stability = baked.stability;
    void *arguments[] = {&loop_.entropy,
                         &loop_.confidence,
                         &loop_.argmax,
                         &loop_.canvasTokens,
                         &loop_.previousArgmax,
                         &stableSteps,
                         &loop_.keep,
                         &converged,
                         &bound,
                         &threshold,
                         &topK,
                         &maskToken,
                         &stability,
                         &confidenceBound};
    DLM_RETURN_IF_ERROR(
        launch(*baked.accept, 1, 1, 1, arguments, "device block loop: accept: cuLaunchKernel"));
  }
  {
    int stepIndex = static_cast<int>(step);
    int lastStep = baked.lastStep, gateMode = baked.gateMode;
    void *arguments[] = {&rows,          &stepIndex,    &lastStep,           &gateMode,
                         &converged,     &loop_.argmax, &loop_.canvasTokens, &loop_.keep,
                         &loop_.sampled, &loopState,    &maskToken};
    DLM_RETURN_IF_ERROR(
        launch(*loop.gate, 1, 1, 1, arguments, "device block loop: gate: cuLaunchKernel"));
  }
  {
    void *arguments[] = {&rows,
                         &loop_.keep,
                         &loop_.sampled,
                         &loop_.canvasTokens,
                         &loop_.rowRequest,
                         &loop_.rowPosition,
                         &loop_.seed,
                         &loop_.id,
                         &stepCounter,
                         &maskToken};
    const unsigned threads = loop.renoise->blockThreads;
    DLM_RETURN_IF_ERROR(launch(*loop.renoise,
                               static_cast<unsigned>((canvas + threads - 1) / threads), 1, 1,
                               arguments, "device block loop: renoise: cuLaunchKernel"));
  }
  return Status::ok();
}

Status CudaBackend::runLoopChunk(const LoopPlan &plan, const LoopLaunch &loop,
                                 const std::string &baked, int64_t start, int64_t end,
                                 int32_t *loopState) {
  auto enqueue = [&]() -> Status {
    for (int64_t step = start; step < end; ++step)
      DLM_RETURN_IF_ERROR(enqueueLoopStep(plan, loop, step));
    return Status::ok();
  };
  if (!settings_.graphs) {
    DLM_RETURN_IF_ERROR(enqueue());
  } else {
    std::string graphKey = baked + "\nchunk " + str(start) + " " + str(end);
    for (int64_t step = start; step < end; ++step)
      graphKey += "\n" + bakedStepText(plan.steps[static_cast<size_t>(step)]);
    auto it = std::find_if(loopGraphs_.begin(), loopGraphs_.end(),
                           [&](const auto &entry) { return entry.first == graphKey; });
    if (it != loopGraphs_.end()) {
      loopGraphs_.splice(loopGraphs_.begin(), loopGraphs_, it);
      ++loopStatistics_.replays;
    } else {
      DLM_ASSIGN_OR_RETURN(std::unique_ptr<CapturedGraph> graph,
                           captureGraph(driver_, stream_, enqueue));
      loopGraphs_.emplace_front(std::move(graphKey), std::move(graph));
      while (loopGraphs_.size() > settings_.maxLoopGraphs)
        loopGraphs_.pop_back();
      ++loopStatistics_.captures;
    }
    DLM_RETURN_IF_ERROR(
        driver_->check(driver_->cuGraphLaunch(loopGraphs_.front().second->exec, stream_),
                       "device block loop: cuGraphLaunch"));
  }
  ++loopStatistics_.chunks;
  loopStatistics_.stepsRun += end - start;
  char *hostState = static_cast<char *>(loop_.host.data()) + loop_.uploadedBytes;
  DLM_RETURN_IF_ERROR(
      driver_->check(driver_->cuMemcpyDtoHAsync(hostState, loop_.counters + 2 * sizeof(int32_t),
                                                2 * sizeof(int32_t), stream_),
                     "device block loop: loop state out (cuMemcpyDtoHAsync)"));
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuStreamSynchronize(stream_),
                                     "device block loop: cuStreamSynchronize"));
  std::memcpy(loopState, hostState, 2 * sizeof(int32_t));
  return Status::ok();
}

StatusOr<sampling::BlockLoopResult> CudaBackend::denoiseBlock(const LoopPlan &plan,
                                                              int32_t *canvasOut) {
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  if (!plan.sequence || plan.begin < 0 || plan.begin >= plan.end || plan.end > plan.total)
    return Status::error("device block loop: block [" + str(plan.begin) + ", " + str(plan.end) +
                         ") is not inside the " + str(plan.total) + " tokens of the sequence");
  StatusOr<LoopLaunch> resolved = resolveDeviceLoop(plan);
  if (!resolved)
    return Status::error("not supported yet: this block on the device loop: " +
                         resolved.status().message());
  const LoopLaunch &loop = *resolved;
  const int64_t canvas = plan.end - plan.begin;
  const int64_t steps = static_cast<int64_t>(plan.steps.size());
  for (int64_t i = 0; i < plan.total; ++i)
    if (plan.sequence[i] < 0 || plan.sequence[i] >= dims_.embeddingSize)
      return Status::error("device block loop: token id " + str(plan.sequence[i]) +
                           " is outside [0, " + str(dims_.embeddingSize) + ")");
  DLM_RETURN_IF_ERROR(reserveLoopBuffers(canvas, steps));
  // A failure from here on leaves the cache as a failed host forward would: the prefix kept
  // (cached forwards) or nothing (full forwards; the dual cache, whose windows rewrite the
  // cache in place).
  const bool rebuilt = loop.cache == LoopLaunch::Cache::rebuilt;
  const bool dual = loop.cache == LoopLaunch::Cache::dualFirst;
  struct TrimOnFailure {
    kv::PagedKvCache &cache;
    kv::SequenceId sequence;
    int64_t length;
    bool armed = true;
    ~TrimOnFailure() {
      if (armed)
        (void)cache.trim(sequence, length);
    }
  } trimOnFailure{*kv_, sequence_, rebuilt || dual ? 0 : loop.keep};
  DLM_RETURN_IF_ERROR(enterLoopCache(plan, loop));
  DLM_RETURN_IF_ERROR(uploadLoopTables(plan));

  // Chunks of steps, each one graph; one 8-byte read back after each. Not timed as forwards
  // (the profile summary counts those): the caller's block scope times the whole loop.
  const int64_t chunkSteps = settings_.deviceLoopChunkSteps > 0 ? settings_.deviceLoopChunkSteps
                             : plan.unroll > 0                  ? plan.unroll
                                                                : kDefaultUnrollSteps;
  // What every chunk's launches bake in besides their steps: kernels, shapes, buffers.
  const std::string baked = loop.sampler->record->name + " " + loop.gate->record->name + " " +
                            loop.renoise->record->name + " " + str(canvas) + " " + str(plan.begin) +
                            " " + str(plan.maskToken) + " " + str(loop.first.count) + " " +
                            str(loop.first.first) + " " + str(loop.first.inputs == loopInputs_) +
                            " " + str(loop.later.count) + " " + str(loop.later.first) + " " +
                            str(loop.later.keys);
  int32_t loopState[2] = {0, 0};
  for (int64_t start = 0; start < steps && !loopState[0]; start += chunkSteps)
    DLM_RETURN_IF_ERROR(
        runLoopChunk(plan, loop, baked, start, std::min(steps, start + chunkSteps), loopState));
  // The block, and the cache as the host's forwards leave it.
  char *hostCanvas = static_cast<char *>(loop_.host.data()) + loop_.uploadedBytes + 16;
  DLM_RETURN_IF_ERROR(driver_->check(
      driver_->cuMemcpyDtoHAsync(hostCanvas, loop_.canvasTokens,
                                 static_cast<size_t>(canvas) * sizeof(int32_t), stream_),
      "device block loop: canvas out (cuMemcpyDtoHAsync)"));
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuStreamSynchronize(stream_),
                                     "device block loop: cuStreamSynchronize"));
  std::memcpy(canvasOut, hostCanvas, static_cast<size_t>(canvas) * sizeof(int32_t));
  DLM_RETURN_IF_ERROR(kv_->trim(sequence_, loop.keptAfter));
  if (rebuilt)
    DLM_RETURN_IF_ERROR(kv_->commit(sequence_));
  if (loopState[0] && (loopState[1] < 1 || loopState[1] > steps))
    return Status::error("device block loop: loop state " + str(loopState[0]) + ", " +
                         str(loopState[1]) + " after a plan of " + str(steps) + " steps");
  // A loop that never finished ran every step (its cap; the caller decides).
  const int64_t ran = loopState[0] ? loopState[1] : steps;
  // The window steps rewrote their slots in place: the cache's bookkeeping says so, as after
  // the host's window forwards (PagedKvCache::rewrite).
  if (dual && ran > 1)
    DLM_RETURN_IF_ERROR(
        kv_->rewrite(sequence_, plan.steps[1].forward.keep, plan.steps[1].forward.feedEnd));
  trimOnFailure.armed = false;
  ++loopStatistics_.blocks;
  loopStatistics_.stepsUsed += ran;
  return sampling::BlockLoopResult{ran, loopState[0] != 0};
}

} // namespace dlm::cuda
