// CUDA graphs of repeated forwards. A forward's enqueued work depends only on its shape (token
// count, first position, key length, logit rows) once its inputs sit in fixed device buffers,
// so a shape that comes back (every denoising step of a block) is captured once on the stream
// and then replayed with one cuGraphLaunch. A shape is captured the second time it is seen: a
// prefill or a block's commit pass runs once and would only cost a capture.
#pragma once

#include "runtime/cuda/CudaDriver.h"

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <set>
#include <tuple>

namespace dlm::cuda {

// How many forwards ran each way, for tests and profiling.
struct GraphStatistics {
  int64_t eagerForwards = 0;
  int64_t captures = 0;
  int64_t replays = 0;
};

// One captured graph and its executable instance, destroyed with it.
struct CapturedGraph {
  std::shared_ptr<const CudaDriver> driver;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CapturedGraph() = default;
  CapturedGraph(const CapturedGraph &) = delete;
  CapturedGraph &operator=(const CapturedGraph &) = delete;
  ~CapturedGraph() {
    if (exec)
      (void)driver->cuGraphExecDestroy(exec);
    if (graph)
      (void)driver->cuGraphDestroy(graph);
  }
};

// Captures `enqueue`'s work on `stream` into a graph and instantiates it (nothing runs). The
// capture is ended whatever happened, or the stream would stay in capture mode.
StatusOr<std::unique_ptr<CapturedGraph>> captureGraph(std::shared_ptr<const CudaDriver> driver,
                                                      CUstream stream,
                                                      const std::function<Status()> &enqueue);

class ForwardGraphs {
public:
  // Token count, first position, key length, first and last logit row, the function (an
  // identity), the input rows' width, how many fed rows the input gives (select_input_rows) and
  // the fed row it starts at (soft_embedding).
  using Shape =
      std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

  // `enabled` false: every forward is enqueued eagerly. At most `capacity` graphs are kept, the
  // least recently used dropped first.
  ForwardGraphs(std::shared_ptr<const CudaDriver> driver, bool enabled, size_t capacity);
  ~ForwardGraphs();

  // Runs the work of `shape` on `stream`: replays its graph, or captures `enqueue` into one and
  // launches it, or calls `enqueue` directly.
  Status run(CUstream stream, const Shape &shape, const std::function<Status()> &enqueue);

  // Forgets every graph (they read buffers that are about to move).
  void clear();

  const GraphStatistics &statistics() const { return statistics_; }

private:
  using Graph = CapturedGraph;
  Status capture(CUstream stream, const Shape &shape, const std::function<Status()> &enqueue);

  std::shared_ptr<const CudaDriver> driver_;
  bool enabled_;
  size_t capacity_;
  // Most recently used first.
  std::list<std::pair<Shape, std::unique_ptr<Graph>>> graphs_;
  std::set<Shape> seen_;
  GraphStatistics statistics_;
};

} // namespace dlm::cuda
