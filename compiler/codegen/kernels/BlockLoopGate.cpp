// The gate of the device block loop (runtime/cuda/CudaBackendBlockLoop.cpp): the one decision of
// a denoising step the sampler, accept and renoise kernels do not make, whether the block is
// finished, turned into data those kernels already read, so that every later step of an unrolled
// graph leaves the canvas as it is. Launched once per step between the accept and the renoise
// kernel, one block of threads (the canvas rounded up to a warp), thread r for canvas row r:
//
//   already finished: keep = 1 and sampled = canvas everywhere, so renoise rewrites the canvas
//     unchanged;
//   entropy-bound: converged (the accept kernel's flag) or the step cap: keep = 1, sampled =
//     argmax (the committed canvas), finished; otherwise nothing (renoise applies the rule);
//   low-confidence: finished when no position will hold the mask after this step (not kept and
//     masked), which is when the host loop stops.
// loopState[0] is the finished flag, loopState[1] the steps run up to and including the
// finishing one; the host reads both once per chunk of steps.
//
// Arguments: rows, stepIndex, lastStep, entropyBound (mode), converged [1], argmax [rows],
// canvas [rows], keep [rows] (in/out), sampled [rows] (in/out), loopState [2] (in/out),
// maskToken. Grid: x = 1.
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

namespace dlm::codegen {

namespace {

constexpr std::string_view kBody = R"cuda(
${entryPoint} {
  __shared__ int sFinished;
  __shared__ int sMaskLeft;
  const int row = threadIdx.x;
  const bool active = row < rows;
  if (row == 0) {
    sFinished = loopState[0];
    sMaskLeft = 0;
  }
  __syncthreads();
  if (sFinished) {
    if (active) {
      keep[row] = 1;
      sampled[row] = canvas[row];
    }
    return;
  }
  if (entropyBound) {
    if (converged[0] || lastStep) {
      if (active) {
        keep[row] = 1;
        sampled[row] = argmax[row];
      }
      if (row == 0) {
        loopState[0] = 1;
        loopState[1] = stepIndex + 1;
      }
    }
    return;
  }
  if (active && !keep[row] && canvas[row] == maskToken)
    atomicAdd(&sMaskLeft, 1);
  __syncthreads();
  if (row == 0 && sMaskLeft == 0) {
    loopState[0] = 1;
    loopState[1] = stepIndex + 1;
  }
}
)cuda";

} // namespace

StatusOr<KernelSource> generateBlockLoopGate(const BlockLoopGateParams &params) {
  if (params.canvas <= 0 || params.canvas > 1024)
    return Status::error("block_loop_gate: canvas must be in [1, 1024], got " +
                         std::to_string(params.canvas));
  const int64_t threads = roundUp(params.canvas, 32);

  KernelSource kernel;
  kernel.kind = "block_loop_gate";
  kernel.name = "dlm_block_loop_gate_c" + std::to_string(params.canvas);
  kernel.hot = true; // once per denoising step
  kernel.blockThreads = static_cast<unsigned>(threads);
  kernel.grid = "x = 1";
  kernel.sharedMemoryBytes = 8;
  kernel.parameters = {
      {"int", "rows"},
      {"int", "stepIndex"},
      {"int", "lastStep"},
      {"int", "entropyBound"},
      {"const int *__restrict__", "converged"},
      {"const int *__restrict__", "argmax"},
      {"const int *__restrict__", "canvas"},
      {"unsigned char *__restrict__", "keep"},
      {"int *__restrict__", "sampled"},
      {"int *__restrict__", "loopState"},
      {"int", "maskToken"},
  };
  kernel.specialisation = {{"canvas", params.canvas}};
  const std::string body = expandKernelBody(kernel, kBody, {});
  kernel.source = assembleTranslationUnit(
      kernel,
      "Device block loop gate for canvases of up to " + std::to_string(params.canvas) +
          " positions: finished blocks freeze the canvas.",
      body);
  return kernel;
}

} // namespace dlm::codegen
