// Emulated streams, events and graphs. A stream runs its work in order on the calling thread as
// it is enqueued (a real stream is asynchronous; completing eagerly is one valid schedule of it).
// While a stream is captured its work is recorded instead, into the graph cuStreamEndCapture
// returns; cuGraphLaunch replays the recorded work in order, reading whatever the buffers hold
// at replay time, as a real graph does.
#include "runtime/cuda/emu/EmuApi.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace dlm::emu {

namespace {

using Operations = std::vector<StreamWork>;

struct Stream {
  bool capturing = false;
  // A relaxed capture does not forbid potentially synchronising calls elsewhere.
  bool relaxed = false;
  bool invalidated = false; // a capture that failed: cuStreamEndCapture reports it
  Operations captured;
};

struct Event {
  bool timing = true;
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
};

struct Graph {
  std::shared_ptr<const Operations> operations;
};

struct GraphExec {
  std::shared_ptr<const Operations> operations;
};

struct Streams {
  std::mutex mutex;
  std::set<Stream *> streams;
  std::set<Event *> events;
  std::set<Graph *> graphs;
  std::set<GraphExec *> execs;
  std::atomic<int> capturing{0};
};

Streams &state() {
  static Streams instance;
  return instance;
}

// The null stream and the two special handles name the default stream, which is never captured.
bool isDefaultStream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

Stream *streamOf(CUstream stream) { return reinterpret_cast<Stream *>(stream); }

// Ends `stream`'s capture (lock held).
void stopCapture(Streams &all, Stream &stream) {
  if (!stream.capturing)
    return;
  stream.capturing = false;
  if (!stream.relaxed)
    --all.capturing;
}

CUresult runAll(const Operations &operations) {
  for (const StreamWork &work : operations)
    if (CUresult result = work(); result != CUDA_SUCCESS)
      return result;
  return CUDA_SUCCESS;
}

} // namespace

bool anyStreamCapturing() { return state().capturing.load() > 0; }

void invalidateCaptures() {
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (Stream *stream : all.streams)
    if (stream->capturing && !stream->relaxed)
      stream->invalidated = true;
}

bool validStream(CUstream stream) {
  if (isDefaultStream(stream))
    return true;
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  return all.streams.count(streamOf(stream)) > 0;
}

CUresult enqueueOnStream(CUstream stream, StreamWork work) {
  Streams &all = state();
  if (isDefaultStream(stream)) {
    // Work on the default stream would wait for a capturing stream: not allowed in CUDA.
    if (anyStreamCapturing()) {
      invalidateCaptures();
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    return work();
  }
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    if (!all.streams.count(streamOf(stream)))
      return CUDA_ERROR_INVALID_HANDLE;
    Stream &target = *streamOf(stream);
    if (target.capturing) {
      if (target.invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      target.captured.push_back(std::move(work));
      return CUDA_SUCCESS;
    }
  }
  return work();
}

namespace api {

CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
  if (!stream || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  Stream *created = new Stream();
  all.streams.insert(created);
  *stream = reinterpret_cast<CUstream>(created);
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream stream) {
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (!all.streams.erase(streamOf(stream)))
    return CUDA_ERROR_INVALID_HANDLE;
  stopCapture(all, *streamOf(stream));
  delete streamOf(stream);
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream) {
  if (isDefaultStream(stream))
    return anyStreamCapturing() ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (!all.streams.count(streamOf(stream)))
    return CUDA_ERROR_INVALID_HANDLE;
  Stream &target = *streamOf(stream);
  if (target.capturing) {
    target.invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return CUDA_SUCCESS; // its work has already run
}

CUresult cuEventCreate(CUevent *event, unsigned int flags) {
  if (!event)
    return CUDA_ERROR_INVALID_VALUE;
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  Event *created = new Event();
  created->timing = (flags & CU_EVENT_DISABLE_TIMING) == 0;
  all.events.insert(created);
  *event = reinterpret_cast<CUevent>(created);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent event) {
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (!all.events.erase(reinterpret_cast<Event *>(event)))
    return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<Event *>(event);
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
  Event *target = reinterpret_cast<Event *>(event);
  {
    Streams &all = state();
    std::lock_guard<std::mutex> lock(all.mutex);
    if (!all.events.count(target))
      return CUDA_ERROR_INVALID_HANDLE;
  }
  return enqueueOnStream(stream, [target] {
    target->time = std::chrono::steady_clock::now();
    target->recorded = true;
    return CUDA_SUCCESS;
  });
}

CUresult cuEventSynchronize(CUevent event) {
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  return all.events.count(reinterpret_cast<Event *>(event)) ? CUDA_SUCCESS
                                                            : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventElapsedTime(float *milliseconds, CUevent start, CUevent end) {
  if (!milliseconds)
    return CUDA_ERROR_INVALID_VALUE;
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  Event *first = reinterpret_cast<Event *>(start);
  Event *second = reinterpret_cast<Event *>(end);
  if (!all.events.count(first) || !all.events.count(second))
    return CUDA_ERROR_INVALID_HANDLE;
  if (!first->timing || !second->timing || !first->recorded || !second->recorded)
    return CUDA_ERROR_INVALID_HANDLE;
  *milliseconds = std::chrono::duration<float, std::milli>(second->time - first->time).count();
  return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  if (isDefaultStream(stream))
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (!all.streams.count(streamOf(stream)))
    return CUDA_ERROR_INVALID_HANDLE;
  Stream &target = *streamOf(stream);
  if (target.capturing)
    return CUDA_ERROR_ILLEGAL_STATE;
  target.capturing = true;
  target.relaxed = mode == CU_STREAM_CAPTURE_MODE_RELAXED;
  target.invalidated = false;
  target.captured.clear();
  if (!target.relaxed)
    ++all.capturing;
  return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph) {
  if (!graph)
    return CUDA_ERROR_INVALID_VALUE;
  if (isDefaultStream(stream))
    return CUDA_ERROR_ILLEGAL_STATE;
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (!all.streams.count(streamOf(stream)))
    return CUDA_ERROR_INVALID_HANDLE;
  Stream &target = *streamOf(stream);
  if (!target.capturing)
    return CUDA_ERROR_ILLEGAL_STATE;
  stopCapture(all, target);
  Operations operations = std::move(target.captured);
  target.captured.clear();
  if (target.invalidated) {
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  Graph *created = new Graph{std::make_shared<const Operations>(std::move(operations))};
  all.graphs.insert(created);
  *graph = reinterpret_cast<CUgraph>(created);
  return CUDA_SUCCESS;
}

CUresult cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, unsigned long long) {
  if (!exec)
    return CUDA_ERROR_INVALID_VALUE;
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  Graph *source = reinterpret_cast<Graph *>(graph);
  if (!all.graphs.count(source))
    return CUDA_ERROR_INVALID_HANDLE;
  // An executable graph is a snapshot: destroying or changing the graph later does not touch it.
  GraphExec *created = new GraphExec{source->operations};
  all.execs.insert(created);
  *exec = reinterpret_cast<CUgraphExec>(created);
  return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  std::shared_ptr<const Operations> operations;
  {
    Streams &all = state();
    std::lock_guard<std::mutex> lock(all.mutex);
    GraphExec *source = reinterpret_cast<GraphExec *>(exec);
    if (!all.execs.count(source))
      return CUDA_ERROR_INVALID_HANDLE;
    operations = source->operations;
  }
  return enqueueOnStream(stream, [operations] { return runAll(*operations); });
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (!all.execs.erase(reinterpret_cast<GraphExec *>(exec)))
    return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<GraphExec *>(exec);
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph graph) {
  Streams &all = state();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (!all.graphs.erase(reinterpret_cast<Graph *>(graph)))
    return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<Graph *>(graph);
  return CUDA_SUCCESS;
}

} // namespace api

} // namespace dlm::emu
