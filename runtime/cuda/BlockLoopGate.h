// The gate kernel of the device block loop (CudaBackendBlockLoop.cpp): the one decision of a
// denoising step the generated sampler / accept / renoise kernels do not make, whether the block
// is finished, turned into data those kernels already read, so that every later step of the
// unrolled graph leaves the canvas as it is. Launched once per step between the accept and the
// renoise kernel, one block of `threads` threads (the canvas rounded up to a warp):
//
//   already finished: keep = 1 and sampled = canvas everywhere, so renoise rewrites the canvas
//     unchanged;
//   entropy-bound: converged (the accept kernel's flag) or the step cap: keep = 1, sampled =
//     argmax (the committed canvas), finished; else nothing (renoise applies the accept rule);
//   low-confidence: finished when no position will hold the mask after this step (not kept and
//     masked), which is when the host loop stops.
// loopState[0] is the finished flag, loopState[1] the steps run up to and including the
// finishing one: the host reads both once per chunk of steps.
//
// Arguments: rows, stepIndex, lastStep, entropyBound (mode), converged [1], argmax [rows],
// canvas [rows], keep [rows] (in/out), sampled [rows] (in/out), loopState [2] (in/out),
// maskToken.
//
// It is hand-written and tiny, not generated per model: it has no shape to specialise on. The
// emulated driver compiles its source like any kernel's; on a real device it would need NVRTC at
// run time (or the compiler emitting it into the artifact), which is not built yet.
#pragma once

#include <string>

namespace dlm::cuda {

inline constexpr const char *kBlockLoopGateName = "dlm_block_loop_gate";
// The most threads the gate runs with: canvases up to 1024 positions, as the accept kernel.
inline constexpr int kBlockLoopGateMaxThreads = 1024;

// The gate's CUDA C++ source.
const std::string &blockLoopGateSource();

} // namespace dlm::cuda
