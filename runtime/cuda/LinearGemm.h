// The cuda backend's linear layers through cuBLASLt: y[rows, out] = x[rows, in] W[out, in]^T,
// optionally + bias[out] (the BIAS epilogue) or + y itself (beta = 1 with C == D: the residual
// adds of the o and down projections). Row-major activations and PyTorch [out, in] weights are
// column-major y^T = op_T(W) x^T for cuBLASLt, so nothing is transposed in memory.
//
// A GEMM's descriptors and chosen algorithm depend on its shape; they are built the first time a
// shape is seen and kept (a handful per model: one per projection and token count), so a
// repeated forward does no cuBLASLt set-up and a captured graph sees only the matmuls.
#pragma once

#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/CudaDriver.h"

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace dlm::cuda {

enum class DeviceElement { f32, bf16 };

size_t elementBytes(DeviceElement element);
const char *elementName(DeviceElement element); // "f32", "bf16"

struct LinearCall {
  DeviceElement input = DeviceElement::f32;  // x and W
  DeviceElement output = DeviceElement::f32; // y (and bias)
  CUdeviceptr x = 0, weight = 0, bias = 0, y = 0;
  int64_t rows = 0, in = 0, out = 0;
  // y += x W^T instead of y = x W^T.
  bool accumulate = false;
};

class LinearGemm {
public:
  // `workspace` (device, `workspaceBytes`) is shared by every GEMM of the stream.
  static StatusOr<std::unique_ptr<LinearGemm>> create(std::shared_ptr<const CublasLt> lt,
                                                      CUdeviceptr workspace,
                                                      size_t workspaceBytes);
  LinearGemm(const LinearGemm &) = delete;
  LinearGemm &operator=(const LinearGemm &) = delete;
  ~LinearGemm();

  // Enqueues the GEMM on `stream`; `name` goes into errors ("q_proj: cublasLtMatmul: ...").
  Status run(CUstream stream, const LinearCall &call, const char *name);

private:
  struct Plan;
  using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool>;

  LinearGemm(std::shared_ptr<const CublasLt> lt, cublasLtHandle_t handle, CUdeviceptr workspace,
             size_t workspaceBytes);
  StatusOr<Plan *> plan(const LinearCall &call, const char *name);

  std::shared_ptr<const CublasLt> lt_;
  cublasLtHandle_t handle_;
  CUdeviceptr workspace_;
  size_t workspaceBytes_;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

} // namespace dlm::cuda
