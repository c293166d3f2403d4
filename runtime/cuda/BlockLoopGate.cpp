#include "runtime/cuda/BlockLoopGate.h"

namespace dlm::cuda {

namespace {

constexpr const char *kSource = R"cuda(// The device block loop's gate (runtime/cuda/BlockLoopGate.h).
namespace dlm_block_loop_gate_detail {

extern "C" __global__ void dlm_block_loop_gate(
    int rows, int stepIndex, int lastStep, int entropyBound,
    const int *__restrict__ converged, const int *__restrict__ argmax,
    const int *__restrict__ canvas, unsigned char *__restrict__ keep,
    int *__restrict__ sampled, int *__restrict__ loopState, int maskToken) {
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

} // namespace dlm_block_loop_gate_detail
)cuda";

} // namespace

const std::string &blockLoopGateSource() {
  static const std::string source(kSource);
  return source;
}

} // namespace dlm::cuda
