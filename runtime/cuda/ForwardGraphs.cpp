#include "runtime/cuda/ForwardGraphs.h"

namespace dlm::cuda {

namespace {

// Shapes remembered as seen once; beyond this (a long-lived session with many prompt lengths)
// the set is forgotten, so it stays bounded.
constexpr size_t kMaxSeenShapes = 4096;

} // namespace

StatusOr<std::unique_ptr<CapturedGraph>> captureGraph(std::shared_ptr<const CudaDriver> driver,
                                                      CUstream stream,
                                                      const std::function<Status()> &enqueue) {
  auto graph = std::make_unique<CapturedGraph>();
  graph->driver = driver;
  DLM_RETURN_IF_ERROR(driver->check(
      driver->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
      "cuStreamBeginCapture"));
  const Status enqueued = enqueue();
  const Status ended =
      driver->check(driver->cuStreamEndCapture(stream, &graph->graph), "cuStreamEndCapture");
  DLM_RETURN_IF_ERROR(enqueued);
  DLM_RETURN_IF_ERROR(ended);
  DLM_RETURN_IF_ERROR(driver->check(driver->cuGraphInstantiate(&graph->exec, graph->graph, 0),
                                    "cuGraphInstantiate"));
  return graph;
}

ForwardGraphs::ForwardGraphs(std::shared_ptr<const CudaDriver> driver, bool enabled,
                             size_t capacity)
    : driver_(std::move(driver)), enabled_(enabled), capacity_(capacity) {}

ForwardGraphs::~ForwardGraphs() = default;

void ForwardGraphs::clear() {
  graphs_.clear();
  seen_.clear();
}

Status ForwardGraphs::run(CUstream stream, const Shape &shape,
                          const std::function<Status()> &enqueue) {
  if (!enabled_) {
    ++statistics_.eagerForwards;
    return enqueue();
  }
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if (it->first != shape)
      continue;
    graphs_.splice(graphs_.begin(), graphs_, it);
    ++statistics_.replays;
    return driver_->check(driver_->cuGraphLaunch(graphs_.front().second->exec, stream),
                          "forward: cuGraphLaunch");
  }
  if (seen_.size() >= kMaxSeenShapes)
    seen_.clear();
  if (seen_.insert(shape).second) {
    ++statistics_.eagerForwards;
    return enqueue();
  }
  return capture(stream, shape, enqueue);
}

Status ForwardGraphs::capture(CUstream stream, const Shape &shape,
                              const std::function<Status()> &enqueue) {
  DLM_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, captureGraph(driver_, stream, enqueue));
  ++statistics_.captures;
  // Capturing ran nothing: this forward's work is the graph's first launch.
  DLM_RETURN_IF_ERROR(
      driver_->check(driver_->cuGraphLaunch(graph->exec, stream), "forward: cuGraphLaunch"));
  graphs_.emplace_front(shape, std::move(graph));
  while (graphs_.size() > capacity_)
    graphs_.pop_back();
  return Status::ok();
}

} // namespace dlm::cuda
