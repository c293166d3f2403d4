// InvariantGemm (the batch-invariant GEMM of the serving path, docs/design/serving.md §3)
// against oneDNN's dnnl_sgemm on the same shapes and thread count: y[M, N] = x[M, K] W^T.
// Both run warm, interleaved per repeat; each cell is the median GFLOP/s over the repeats.
// InvariantGemm runs on a ThreadPool of --threads threads, oneDNN on an OpenMP team of as many.
// The pool's threads are pinned one per CPU (unless --no-pin): their workers sleep between calls,
// and Linux's wake-up placement was seen to stack a worker on its waker's CPU for a whole run
// (two threads then run at one thread's rate), which measures the scheduler, not the GEMM.
//
//   dlm-bench-gemm [--threads 2] [--repeats 15] [--no-pin]
#include "bench/gemm/GemmBenchSupport.h"
#include "runtime/cpu/InvariantGemm.h"

#include <dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <random>
#include <sched.h>
#include <thread>
#include <vector>

namespace {

using dlm::bench::median;
using dlm::bench::setOmpThreads;

using namespace dlm;
using Clock = std::chrono::steady_clock;
constexpr int kSettleMs = 30;

// Seconds per call: enough calls to fill ~20 ms, so that tiny shapes are not timer noise.
template <typename Call> double secondsPerCall(Call &&call, int calls) {
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i)
    call();
  return std::chrono::duration<double>(Clock::now() - start).count() / calls;
}

// libgomp's threads spin for a while after each parallel region (unless OMP_WAIT_POLICY says
// otherwise) and would take the pool's second core: InvariantGemm is timed after they sleep.
void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(kSettleMs)); }

} // namespace

int main(int argc, char **argv) {
  int threads = 2, repeats = 15;
  bool pin = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-pin"))
      pin = false;
    else {
      std::fprintf(stderr, "usage: dlm-bench-gemm [--threads N] [--repeats N] [--no-pin]\n");
      return 2;
    }
  }
  threads = std::max(threads, 1);
  repeats = std::max(repeats, 1);
  setOmpThreads(threads);
  cpu::ThreadPool pool(threads);
  if (pin) {
    // oneDNN's team first (a product large enough to be parallel), so that its threads do not
    // inherit the calling thread's pinning.
    std::vector<float> a(512 * 512, 1.0f), c(512 * 512);
    dnnl_sgemm('N', 'T', 512, 512, 512, 1.0f, a.data(), 512, a.data(), 512, 0.0f, c.data(), 512);
    const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    pool.parallelFor(threads, 2, [&](int64_t begin, int64_t, int) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(static_cast<int>(begin) % cpus, &set);
      sched_setaffinity(0, sizeof set, &set);
    });
  }

  const int64_t rowCounts[] = {1, 32, 128, 512, 2048};
  const std::pair<int64_t, int64_t> shapes[] = {{128, 128}, {64, 128},  {384, 128},  {128, 384},
                                                {945, 128}, {768, 768}, {2048, 768}, {768, 2048}};
  std::printf("%d threads%s, median of %d repeats, GFLOP/s\n\n", threads,
              pin ? " (pool pinned one per CPU)" : "", repeats);
  std::printf("| M | N | K | InvariantGemm | oneDNN sgemm | ratio |\n|---|---|---|---|---|---|\n");
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const auto &shape : shapes) {
    const int64_t n = shape.first, k = shape.second;
    std::vector<float> w(static_cast<size_t>(n * k));
    for (float &v : w)
      v = uniform(generator);
    const cpu::InvariantGemm gemm(model::HostTensor{w.data(), n, k});
    for (int64_t m : rowCounts) {
      std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
      for (float &v : x)
        v = uniform(generator);
      const double flops = 2.0 * m * n * k;
      const int calls = static_cast<int>(std::clamp(2e7 / flops * 20, 1.0, 2000.0));
      auto invariant = [&] { gemm.run(x.data(), m, y.data(), false, pool); };
      auto dnnl = [&] {
        if (dnnl_sgemm('N', 'T', m, n, k, 1.0f, x.data(), k, w.data(), k, 0.0f, y.data(), n) !=
            dnnl_success)
          std::abort();
      };
      invariant(); // warm: caches, pages, thread teams
      dnnl();
      settle();
      std::vector<double> ours, theirs;
      for (int r = 0; r < repeats; ++r) {
        ours.push_back(flops / secondsPerCall(invariant, calls) * 1e-9);
        theirs.push_back(flops / secondsPerCall(dnnl, calls) * 1e-9);
        settle();
      }
      const double a = median(ours), b = median(theirs);
      std::printf("| %lld | %lld | %lld | %.1f | %.1f | %.2f |\n", static_cast<long long>(m),
                  static_cast<long long>(n), static_cast<long long>(k), a, b, a / b);
      std::fflush(stdout);
    }
  }
  return 0;
}
