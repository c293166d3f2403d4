// The cuda backend's linear layers through cuBLASLt: y[rows, out] = x[rows, in] W[out, in]^T,
// optionally + bias[out] (the BIAS epilogue) or + y itself (beta = 1 with C == D: the residual
// adds of the o and down projections). Row-major activations and PyTorch [out, in] weights are
// column-major y^T = op_T(W) x^T for cuBLASLt, so nothing is transposed in memory. FP8 E4M3
// weights and input rows (sm_90) take cuBLASLt's outer-vector scales: the weight's per-output
// scales as A's (a vector over y^T's rows), the input rows' scales as B's.
//
// A GEMM's descriptors and chosen algorithm depend on its shape; they are built the first time a
// shape is seen and kept (a handful per model: one per projection and token count), so a
// repeated forward does no cuBLASLt set-up and a captured graph sees only the matmuls.
//
// Batch-invariant GEMMs (BackendOptions::batchInvariant, docs/design/serving.md §3): a row's
// result must not depend on how many rows the call has. cuBLASLt chooses its algorithm, tile and
// split-K by shape, so then (a) the heuristic may only return algorithms without split-K
// (CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = CUBLASLT_REDUCTION_SCHEME_NONE: "the dot-product
// shall be performed in one sequence"), and (b) the algorithm is chosen once per weight shape
// (types, in, out, epilogue) at a fixed row count, kInvariantRows, and used for every row
// count. What this does not guarantee on a real GPU (it is untested on one): NVIDIA documents
// no row invariance for a fixed cuBLASLt algorithm across M (a kernel may still pick its
// decomposition, e.g. stream-K or a swizzle, from the grid it launches); the algorithm chosen
// for kInvariantRows may refuse another row count (cublasLtMatmul then fails by name); and the
// choice may differ between cuBLASLt versions and GPUs. The emulated cuBLASLt computes every
// output as one fixed-order dot product, so there rows are invariant bit for bit.
#pragma once

#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/CudaDriver.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

namespace dlm::cuda {

// fp8E4m3: GEMM operands only (an FP8 weight and its quantized input rows).
enum class DeviceElement { f32, bf16, fp8E4m3 };

size_t elementBytes(DeviceElement element);
const char *elementName(DeviceElement element); // "f32", "bf16", "fp8_e4m3"

struct LinearCall {
  DeviceElement input = DeviceElement::f32;  // x and W
  DeviceElement output = DeviceElement::f32; // y (and bias)
  CUdeviceptr x = 0, weight = 0, bias = 0, y = 0;
  int64_t rows = 0, in = 0, out = 0;
  // y += x W^T instead of y = x W^T.
  bool accumulate = false;
  // input fp8E4m3: y = (x W^T)[r, o] * xScales[r] * weightScales[o], both f32 vectors on the
  // device (cuBLASLt's outer-vector scaling, sm_90).
  CUdeviceptr weightScales = 0, xScales = 0;
};

class LinearGemm {
public:
  // `workspace` (device, `workspaceBytes`) is shared by every GEMM of the stream.
  static StatusOr<std::unique_ptr<LinearGemm>> create(std::shared_ptr<const CublasLt> lt,
                                                      CUdeviceptr workspace,
                                                      size_t workspaceBytes,
                                                      bool batchInvariant = false);
  // The row count a batch-invariant GEMM's algorithm is chosen at.
  static constexpr int64_t kInvariantRows = 128;
  LinearGemm(const LinearGemm &) = delete;
  LinearGemm &operator=(const LinearGemm &) = delete;
  ~LinearGemm();

  // Enqueues the GEMM on `stream`; `name` goes into errors ("q_proj: cublasLtMatmul: ...").
  Status run(CUstream stream, const LinearCall &call, const char *name);

private:
  struct Plan;
  using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool>;

  LinearGemm(std::shared_ptr<const CublasLt> lt, cublasLtHandle_t handle, CUdeviceptr workspace,
             size_t workspaceBytes, bool batchInvariant);
  StatusOr<Plan *> plan(const LinearCall &call, const char *name);
  // The descriptors of `call`'s shape (no algorithm yet).
  StatusOr<std::unique_ptr<Plan>> describe(const LinearCall &call, const std::string &what);
  // cuBLASLt's best algorithm for `plan`'s shape (batch-invariant: without split-K).
  StatusOr<cublasLtMatmulAlgo_t> heuristic(const Plan &plan, const LinearCall &call,
                                           const std::string &what);
  // Batch-invariant: the algorithm of `call`'s weight shape, chosen at kInvariantRows rows.
  StatusOr<cublasLtMatmulAlgo_t> invariantAlgorithm(const LinearCall &call,
                                                    const std::string &what);

  std::shared_ptr<const CublasLt> lt_;
  cublasLtHandle_t handle_;
  CUdeviceptr workspace_;
  size_t workspaceBytes_;
  bool batchInvariant_;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
  // Batch-invariant: the algorithm per weight shape (the plan key with 0 rows).
  std::map<PlanKey, cublasLtMatmulAlgo_t> algorithms_;
};

} // namespace dlm::cuda
