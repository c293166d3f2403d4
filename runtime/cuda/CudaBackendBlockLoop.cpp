// The cuda backend's device block loop (DecodeModel::denoiseBlock): a block's denoising steps
// without the logits ever reaching the host. Per step, on the backend's one stream:
//
//   canvas -> the forward's token slots (a device-to-device copy), the forward (full, or cached
//   over the block with the prefix cache; a prefix-cached low-confidence block's first step is
//   the full forward that keeps the prefix, reading a second input buffer), the artifact's
//   sampler over the block's logit rows, its accept kernel (keep mask, convergence flag), the
//   gate (compiler/codegen/kernels/BlockLoopGate.cpp: finished? then freeze) and its renoise
//   kernel (the next canvas).
//
// The steps are unrolled into graphs of `deviceLoopChunkSteps` steps, captured once per block
// configuration and chunk (everything a launch bakes in is the graph's key; the RNG step and the
// temperature of each step are read from device tables uploaded per block, so later blocks of the
// same shape and step cap replay the same graphs at their own RNG steps; the cap is part of the
// key, as the threshold's last step and the gate's step cap depend on it). After each chunk the host reads the
// gate's 8-byte loop state and stops once the block is finished; then it reads the canvas back.
// Every decision is the host loop's (runtime/sampling/LowConfidence.cpp, EntropyBound.cpp): the
// accept rule per step (top-k count, threshold, 0 on the last scheduled step, entropy budget),
// the convergence test and the step cap.
#include "runtime/cuda/CudaBackend.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <iomanip>
#include <sstream>

namespace dlm::cuda {

namespace {

// The longest canvas the loop serves: the accept and gate kernels run a block's rows as one
// thread block.
constexpr int64_t kMaxLoopCanvas = 1024;
// Steps per graph when neither the settings nor the program say (dlmc compile's default).
constexpr int64_t kDefaultUnrollSteps = 4;

using sampling::BlockLoopRequest;
using sampling::Policy;

std::string str(int64_t value) { return std::to_string(value); }

bool isEntropyBound(const BlockLoopRequest &request) {
  return request.policy == Policy::entropyBound;
}

// The low-confidence threshold of step `step` (Fast-dLLM: the block's last scheduled step takes
// every remaining candidate, which threshold 0 does).
double thresholdOf(const BlockLoopRequest &request, int64_t step) {
  if (!request.knobs->threshold)
    return 0.0;
  return step >= request.stepCap - 1 ? 0.0 : *request.knobs->threshold;
}

// The low-confidence fixed count of step `step` (LowConfidence.cpp: 1 past the schedule).
int topKOf(const BlockLoopRequest &request, int64_t step) {
  const std::vector<int64_t> &schedule = request.transferSchedule;
  return static_cast<int>(step < static_cast<int64_t>(schedule.size()) ? schedule[step] : 1);
}

// The entropy-bound temperature of step n, as EntropyBound.cpp computes it (then rounded to the
// float the sampler reads).
double temperatureOf(const BlockLoopRequest &request, int64_t step) {
  const sampling::DecodingKnobs &k = *request.knobs;
  if (!isEntropyBound(request))
    return k.temperature;
  return k.tMin + (k.tMax - k.tMin) * static_cast<double>(k.maxSteps - step) /
                      static_cast<double>(k.maxSteps);
}

} // namespace

StatusOr<const CudaBackend::LoopKernels *>
CudaBackend::loopKernels(const BlockLoopRequest &request) const {
  const bool entropy = isEntropyBound(request);
  const bool threshold = !entropy && request.knobs->threshold.has_value();
  const int64_t canvas = request.end - request.begin;
  const std::string key = std::string(entropy ? "entropy" : threshold ? "threshold" : "top_k") +
                          "/" + str(canvas) + "/" + (request.maskNoise ? "mask" : "uniform");
  auto found = loopKernels_.find(key);
  if (found != loopKernels_.end())
    return found->second ? &*found->second : nullptr;
  using artifact::AttributeValue;
  auto text = [](const char *value) { return AttributeValue(std::string(value)); };
  std::optional<LoopKernels> kernels;
  StatusOr<DeviceKernel> sampler = modules_->find(
      "sampler", {{"vocab", AttributeValue(dims_.vocabSize)},
                  {"logits", text("f32")},
                  {"softcap", AttributeValue(0.0)},
                  {"confidence", text(entropy ? "at_temperature" : "unit_temperature")},
                  {"softmax_statistics", AttributeValue(false)}});
  StatusOr<DeviceKernel> accept = modules_->find(
      "accept", {{"canvas", AttributeValue(canvas)},
                 {"rule", text(entropy ? "entropy_bound"
                                       : threshold ? "confidence_threshold" : "top_k")},
                 {"mask_absorbing", AttributeValue(!entropy)}});
  StatusOr<DeviceKernel> gate =
      modules_->find("block_loop_gate", {{"canvas", AttributeValue(canvas)}});
  StatusOr<DeviceKernel> renoise = modules_->find(
      "renoise", {{"vocab", AttributeValue(dims_.vocabSize)},
                  {"noise", text(!entropy || request.maskNoise ? "mask" : "uniform")},
                  {"initial_canvas", AttributeValue(false)},
                  {"candidates", text(entropy ? "every_rejected" : "masked_only")}});
  // An artifact compiled for another policy or block length lacks them: the host loop runs.
  // Any other failure (a module that does not load) is an error, and not remembered.
  for (const Status *status :
       {&sampler.status(), &accept.status(), &gate.status(), &renoise.status()})
    if (!status->isOk() && status->message().find(" has no ") == std::string::npos)
      return *status;
  if (sampler && accept && gate && renoise)
    kernels = LoopKernels{*sampler, *accept, *gate, *renoise};
  const std::optional<LoopKernels> &stored = loopKernels_.emplace(key, kernels).first->second;
  return stored ? &*stored : nullptr;
}

bool CudaBackend::denoisesBlock(const BlockLoopRequest &request) const {
  if (!settings_.deviceLoop)
    return false;
  // Looking the kernels up loads modules: the context must be this thread's.
  if (!driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent").isOk())
    return settings_.requireDeviceLoop;
  // Required: denoiseBlock names why it cannot.
  return settings_.requireDeviceLoop || deviceLoopSupport(request).isOk();
}

Status CudaBackend::deviceLoopSupport(const BlockLoopRequest &request) const {
  if (!settings_.deviceLoop)
    return Status::error("the device loop is off");
  if (!request.knobs || request.stepCap <= 0)
    return Status::error("no knobs or no steps");
  const int64_t canvas = request.end - request.begin;
  if (canvas <= 0 || canvas > kMaxLoopCanvas)
    return Status::error("a block of " + str(canvas) + " positions (the loop serves 1 to " +
                         str(kMaxLoopCanvas) + ")");
  if (canvas > reservedLogitRows_ || request.total > reservedTokens_)
    return Status::error("a block of " + str(canvas) + " rows over " + str(request.total) +
                         " tokens exceeds the reserved " + str(reservedLogitRows_) + " rows, " +
                         str(reservedTokens_) + " tokens");
  DLM_ASSIGN_OR_RETURN(const LoopKernels *kernels, loopKernels(request));
  if (!kernels)
    return Status::error("the artifact has no " + std::string(sampling::policyName(request.policy)) +
                         " sampler/accept/gate/renoise kernels for blocks of " + str(canvas) +
                         " (compile it with dlmc compile --target cuda and this policy and "
                         "block length)");
  return Status::ok();
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

Status CudaBackend::enqueueLoopStep(const BlockLoopRequest &request, const LoopKernels &kernels,
                                    int64_t step, const Shape &shape) {
  const int64_t canvas = request.end - request.begin;
  const bool entropy = isEntropyBound(request);
  // The canvas into the forward's token slots.
  DLM_RETURN_IF_ERROR(driver_->check(
      driver_->cuMemcpyDtoDAsync(shape.inputs + static_cast<size_t>(request.begin - shape.first) *
                                                    sizeof(int32_t),
                                 loop_.canvasTokens, static_cast<size_t>(canvas) * sizeof(int32_t),
                                 stream_),
      "device block loop: canvas into the forward's inputs (cuMemcpyDtoDAsync)"));
  DLM_RETURN_IF_ERROR(enqueueForward(shape));

  int rows = static_cast<int>(canvas);
  CUdeviceptr stepCounter = loop_.stepTable + static_cast<size_t>(step) * sizeof(int64_t);
  CUdeviceptr converged = loop_.counters + sizeof(int32_t);
  CUdeviceptr stableSteps = loop_.counters;
  CUdeviceptr loopState = loop_.counters + 2 * sizeof(int32_t);
  int maskToken = request.maskToken;
  {
    CUdeviceptr logits = logits_;
    long long rowStride = dims_.vocabSize;
    CUdeviceptr temperature = loop_.temperatures + static_cast<size_t>(step) * sizeof(float);
    int excluded = static_cast<int>(request.excludedToken);
    void *arguments[] = {&logits,        &rowStride,       &rows,         &loop_.rowRequest,
                         &loop_.rowPosition, &loop_.seed,  &loop_.id,     &stepCounter,
                         &temperature,   &excluded,        &loop_.sampled, &loop_.argmax,
                         &loop_.entropy, &loop_.confidence};
    DLM_RETURN_IF_ERROR(launch(kernels.sampler, static_cast<unsigned>(canvas), 1, 1, arguments,
                               "device block loop: sampler: cuLaunchKernel"));
  }
  {
    const sampling::DecodingKnobs &k = *request.knobs;
    double bound = entropy ? k.entropyBound : 0.0;
    double threshold = entropy ? 0.0 : thresholdOf(request, step);
    int topK = entropy ? 0 : topKOf(request, step);
    // Low-confidence never reads the accept kernel's convergence (the gate decides).
    int stability = entropy ? static_cast<int>(k.stabilityThreshold) : INT_MAX;
    double confidenceBound = entropy ? k.confidenceThreshold : 0.0;
    void *arguments[] = {&loop_.entropy,  &loop_.confidence, &loop_.argmax,   &loop_.canvasTokens,
                         &loop_.previousArgmax, &stableSteps, &loop_.keep,     &converged,
                         &bound,          &threshold,        &topK,           &maskToken,
                         &stability,      &confidenceBound};
    DLM_RETURN_IF_ERROR(
        launch(kernels.accept, 1, 1, 1, arguments, "device block loop: accept: cuLaunchKernel"));
  }
  {
    int stepIndex = static_cast<int>(step);
    int lastStep = step == request.stepCap - 1 ? 1 : 0;
    int entropyMode = entropy ? 1 : 0;
    void *arguments[] = {&rows,         &stepIndex,         &lastStep,    &entropyMode,
                         &converged,    &loop_.argmax,      &loop_.canvasTokens, &loop_.keep,
                         &loop_.sampled, &loopState,        &maskToken};
    DLM_RETURN_IF_ERROR(
        launch(kernels.gate, 1, 1, 1, arguments, "device block loop: gate: cuLaunchKernel"));
  }
  {
    void *arguments[] = {&rows,         &loop_.keep,        &loop_.sampled, &loop_.canvasTokens,
                         &loop_.rowRequest, &loop_.rowPosition, &loop_.seed, &loop_.id,
                         &stepCounter,  &maskToken};
    const unsigned threads = kernels.renoise.blockThreads;
    DLM_RETURN_IF_ERROR(launch(kernels.renoise,
                               static_cast<unsigned>((canvas + threads - 1) / threads), 1, 1,
                               arguments, "device block loop: renoise: cuLaunchKernel"));
  }
  return Status::ok();
}

StatusOr<sampling::BlockLoopResult> CudaBackend::denoiseBlock(const BlockLoopRequest &request,
                                                              int32_t *canvasOut) {
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  if (Status support = deviceLoopSupport(request); !support.isOk())
    return Status::error("not supported yet: this block on the device loop: " +
                         support.message());
  DLM_ASSIGN_OR_RETURN(const LoopKernels *found, loopKernels(request));
  const LoopKernels &kernels = *found;
  const int64_t canvas = request.end - request.begin;
  const int64_t cap = request.stepCap;
  const bool entropy = isEntropyBound(request);
  const bool prefix = request.prefixCache;
  const int64_t keep = prefix ? request.keep : 0;
  if (!request.sequence || request.begin < 0 || request.begin >= request.end ||
      request.end > request.total)
    return Status::error("device block loop: block [" + str(request.begin) + ", " +
                         str(request.end) + ") is not inside the " + str(request.total) +
                         " tokens of the sequence");
  if (prefix && (keep < 0 || keep > request.begin))
    return Status::error("device block loop: keep " + str(keep) + " is past the block start " +
                         str(request.begin));
  for (int64_t i = 0; i < request.total; ++i)
    if (request.sequence[i] < 0 || request.sequence[i] >= dims_.embeddingSize)
      return Status::error("device block loop: token id " + str(request.sequence[i]) +
                           " is outside [0, " + str(dims_.embeddingSize) + ")");
  DLM_RETURN_IF_ERROR(reserveLoopBuffers(canvas, cap));
  // A failure from here on leaves the cache as a failed host forward would: the prefix kept
  // (prefix cache) or nothing.
  struct TrimOnFailure {
    kv::PagedKvCache &cache;
    kv::SequenceId sequence;
    int64_t length;
    bool armed = true;
    ~TrimOnFailure() {
      if (armed)
        (void)cache.trim(sequence, length);
    }
  } trimOnFailure{*kv_, sequence_, keep};

  // The forwards' shapes and the K/V cache, as the host loop's forwards leave and expect it.
  const Shape full{request.total, 0, request.begin, request.end, inputs_};
  const Shape cached{request.total - keep, keep, request.begin - keep, request.end - keep,
                     inputs_};
  Shape first = prefix ? cached : full;
  const Shape &later = prefix ? cached : full;
  if (!prefix) {
    DLM_RETURN_IF_ERROR(kv_->trim(sequence_, 0));
    DLM_RETURN_IF_ERROR(kv_->append(sequence_, request.total));
    DLM_RETURN_IF_ERROR(uploadInputs(request.sequence, full));
  } else {
    if (!entropy) {
      // The block's first step is the full forward keeping [0, keep), reading its own buffer.
      first = full;
      first.inputs = loopInputs_;
      DLM_RETURN_IF_ERROR(kv_->trim(sequence_, 0));
      DLM_RETURN_IF_ERROR(kv_->append(sequence_, request.total));
      DLM_RETURN_IF_ERROR(uploadInputs(request.sequence, first));
      // The staging buffer is reused below.
      DLM_RETURN_IF_ERROR(driver_->check(driver_->cuStreamSynchronize(stream_),
                                         "device block loop: cuStreamSynchronize"));
      DLM_RETURN_IF_ERROR(kv_->trim(sequence_, keep));
      DLM_RETURN_IF_ERROR(kv_->commit(sequence_));
    } else if (kv_->length(sequence_) != keep) {
      return Status::error("device block loop: the KV cache holds " +
                           str(kv_->length(sequence_)) + " tokens, the caller expected " +
                           str(keep));
    }
    DLM_RETURN_IF_ERROR(kv_->append(sequence_, request.total - keep));
    DLM_RETURN_IF_ERROR(uploadInputs(request.sequence + keep, cached));
  }
  DLM_RETURN_IF_ERROR(pageCopyStatus_);
  peakKvPages_ = std::max<int64_t>(peakKvPages_, kv_->pageCount() - kv_->freePages());

  // The per-block tables, and the loop state reset.
  {
    char *host = static_cast<char *>(loop_.host.data());
    const size_t n = static_cast<size_t>(loop_.steps), c = static_cast<size_t>(loop_.canvas);
    std::memcpy(host, &request.seed, 8);
    std::memcpy(host + 8, &request.request, 8);
    int64_t *steps = reinterpret_cast<int64_t *>(host + 16);
    float *temperatures = reinterpret_cast<float *>(host + 16 + 8 * n);
    int32_t *canvasTokens = reinterpret_cast<int32_t *>(host + 16 + 12 * n);
    int32_t *positions = canvasTokens + c;
    int32_t *requests = positions + c;
    for (int64_t s = 0; s < cap; ++s) {
      steps[s] = request.firstStep + s;
      temperatures[s] = static_cast<float>(temperatureOf(request, s));
    }
    for (int64_t j = 0; j < canvas; ++j) {
      canvasTokens[j] = request.sequence[request.begin + j];
      positions[j] = static_cast<int32_t>(request.begin + j);
      requests[j] = 0;
    }
    DLM_RETURN_IF_ERROR(driver_->check(
        driver_->cuMemcpyHtoDAsync(loop_.uploaded, host, loop_.uploadedBytes, stream_),
        "device block loop: tables in (cuMemcpyHtoDAsync)"));
    DLM_RETURN_IF_ERROR(driver_->check(
        driver_->cuMemsetD32Async(loop_.previousArgmax, 0xffffffffu,
                                  static_cast<size_t>(canvas), stream_),
        "device block loop: cuMemsetD32Async"));
    DLM_RETURN_IF_ERROR(driver_->check(driver_->cuMemsetD32Async(loop_.counters, 0, 4, stream_),
                                       "device block loop: cuMemsetD32Async"));
  }

  // Chunks of steps, each one graph; one 8-byte read back after each. Not timed as forwards
  // (the profile summary counts those): the policy's block scope times the whole loop.
  // The compiled program's unrolling (dlmc compile --unroll) unless the settings fix it.
  const int64_t chunkSteps = settings_.deviceLoopChunkSteps > 0 ? settings_.deviceLoopChunkSteps
                             : request.knobs->unrollSteps > 0  ? request.knobs->unrollSteps
                                                               : kDefaultUnrollSteps;
  char *hostState = static_cast<char *>(loop_.host.data()) + loop_.uploadedBytes;
  int32_t loopState[2] = {0, 0};
  std::ostringstream baked;
  baked << std::setprecision(17); // knobs differing in any digit must not share a graph
  baked << (entropy ? "entropy" : "low_confidence") << ' ' << kernels.sampler.record->name << ' '
        << kernels.accept.record->name << ' ' << kernels.renoise.record->name << ' ' << canvas
        << ' ' << cap << ' ' << request.begin << ' ' << request.excludedToken << ' '
        << request.maskToken << ' ' << first.count << ' ' << first.first << ' '
        << (first.inputs == loopInputs_) << ' ' << later.count << ' ' << later.first << ' ';
  if (entropy)
    baked << request.knobs->entropyBound << ' ' << request.knobs->stabilityThreshold << ' '
          << request.knobs->confidenceThreshold;
  else
    baked << (request.knobs->threshold ? *request.knobs->threshold : -1.0);
  for (int64_t start = 0; start < cap; start += chunkSteps) {
    const int64_t end = std::min(cap, start + chunkSteps);
    auto enqueue = [&]() -> Status {
      for (int64_t step = start; step < end; ++step) {
        DLM_RETURN_IF_ERROR(
            enqueueLoopStep(request, kernels, step, step == 0 ? first : later));
      }
      return Status::ok();
    };
    if (!settings_.graphs) {
      DLM_RETURN_IF_ERROR(enqueue());
    } else {
      std::ostringstream key;
      key << baked.str() << ' ' << start << ' ' << end;
      if (!entropy)
        for (int64_t step = start; step < end; ++step)
          key << ' ' << topKOf(request, step);
      const std::string graphKey = key.str();
      auto it = std::find_if(loopGraphs_.begin(), loopGraphs_.end(),
                             [&](const auto &entry) { return entry.first == graphKey; });
      if (it != loopGraphs_.end()) {
        loopGraphs_.splice(loopGraphs_.begin(), loopGraphs_, it);
        ++loopStatistics_.replays;
      } else {
        DLM_ASSIGN_OR_RETURN(std::unique_ptr<CapturedGraph> graph,
                             captureGraph(driver_, stream_, enqueue));
        loopGraphs_.emplace_front(graphKey, std::move(graph));
        while (loopGraphs_.size() > settings_.maxLoopGraphs)
          loopGraphs_.pop_back();
        ++loopStatistics_.captures;
      }
      DLM_RETURN_IF_ERROR(driver_->check(
          driver_->cuGraphLaunch(loopGraphs_.front().second->exec, stream_),
          "device block loop: cuGraphLaunch"));
    }
    ++loopStatistics_.chunks;
    loopStatistics_.stepsRun += end - start;
    DLM_RETURN_IF_ERROR(driver_->check(
        driver_->cuMemcpyDtoHAsync(hostState, loop_.counters + 2 * sizeof(int32_t),
                                   sizeof(loopState), stream_),
        "device block loop: loop state out (cuMemcpyDtoHAsync)"));
    DLM_RETURN_IF_ERROR(driver_->check(driver_->cuStreamSynchronize(stream_),
                                       "device block loop: cuStreamSynchronize"));
    std::memcpy(loopState, hostState, sizeof(loopState));
    if (loopState[0])
      break;
  }
  // The block, and the cache as the host loop leaves it.
  DLM_RETURN_IF_ERROR(driver_->check(
      driver_->cuMemcpyDtoHAsync(hostState + 16, loop_.canvasTokens,
                                 static_cast<size_t>(canvas) * sizeof(int32_t), stream_),
      "device block loop: canvas out (cuMemcpyDtoHAsync)"));
  DLM_RETURN_IF_ERROR(driver_->check(driver_->cuStreamSynchronize(stream_),
                                     "device block loop: cuStreamSynchronize"));
  std::memcpy(canvasOut, hostState + 16, static_cast<size_t>(canvas) * sizeof(int32_t));
  DLM_RETURN_IF_ERROR(kv_->trim(sequence_, keep));
  if (!prefix)
    DLM_RETURN_IF_ERROR(kv_->commit(sequence_));
  if (!loopState[0] || loopState[1] < 1 || loopState[1] > cap)
    return Status::error("device block loop: the block did not finish within its " + str(cap) +
                         " steps (loop state " + str(loopState[0]) + ", " + str(loopState[1]) +
                         ")");
  trimOnFailure.armed = false;
  ++loopStatistics_.blocks;
  loopStatistics_.stepsUsed += loopState[1];
  return sampling::BlockLoopResult{loopState[1]};
}

} // namespace dlm::cuda
