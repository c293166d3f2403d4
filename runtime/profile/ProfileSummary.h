// What a profile says, aggregated from a Profiler's events: time per kernel kind and its share of
// the forwards, denoise-step times and the host overhead of each step (the step's time outside
// its forwards: sampling, acceptance, bookkeeping), steps per block, and one row per request.
// dlm-prof prints it as a table and as JSON.
#pragma once

#include "runtime/profile/Profiler.h"

#include <cstdint>
#include <vector>

namespace dlm::profile {

// Milliseconds over a set of samples (all zero when there are none).
struct Distribution {
  int64_t count = 0;
  double total = 0;
  double mean = 0;
  double median = 0;
  double p90 = 0;
  double min = 0;
  double max = 0;

  static Distribution of(std::vector<double> samples);
};

struct KernelRow {
  Category category = Category::gemm;
  int64_t calls = 0;
  double ms = 0;
  // Of the backend's forward time on the calling thread.
  double share = 0;
  // Floating-point operations of the calls that gave a GEMM shape (2 M N K each), and the
  // milliseconds those calls took.
  double flops = 0;
  double flopMs = 0;
  double gflops() const { return flopMs > 0 ? flops / flopMs * 1e-6 : 0; }
};

// The GEMM calls of one kind and shape: y[m, n] = x[m, k] W^T.
struct GemmShapeRow {
  Category category = Category::gemm;
  int64_t m = 0, n = 0, k = 0;
  int64_t calls = 0;
  double ms = 0;
  double gflops() const { return ms > 0 ? 2.0 * m * n * k * calls / ms * 1e-6 : 0; }
};

struct RequestRow {
  uint64_t id = 0;
  double ms = 0;
  int64_t blocks = 0;
  int64_t steps = 0;
  int64_t forwards = 0;
};

struct Summary {
  // Kernel kinds that ran, most time first.
  std::vector<KernelRow> kernels;
  // The GEMM shapes that ran, most time first.
  std::vector<GemmShapeRow> gemmShapes;
  // Forward time not inside any kernel scope (glue, KV bookkeeping), and its share.
  double untrackedMs = 0;
  double untrackedShare = 0;
  // Forwards as the backend timed them (calling thread).
  Distribution forwardMs;
  // Denoise steps and the host overhead of each.
  Distribution stepMs;
  Distribution hostOverheadMs;
  // Steps per block (or canvas).
  Distribution stepsPerBlock;
  std::vector<RequestRow> requests;
  // Backend threads that recorded events (0 = the caller).
  std::vector<uint64_t> threads;
  size_t events = 0;
  size_t dropped = 0;
};

Summary summarize(const Profiler &profiler);

} // namespace dlm::profile
