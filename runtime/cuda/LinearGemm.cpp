#include "runtime/cuda/LinearGemm.h"

#include <string>

namespace dlm::cuda {

size_t elementBytes(DeviceElement element) {
  switch (element) {
  case DeviceElement::f32:
    return 4;
  case DeviceElement::bf16:
    return 2;
  case DeviceElement::fp8E4m3:
    return 1;
  }
  return 0;
}

const char *elementName(DeviceElement element) {
  switch (element) {
  case DeviceElement::f32:
    return "f32";
  case DeviceElement::bf16:
    return "bf16";
  case DeviceElement::fp8E4m3:
    return "fp8_e4m3";
  }
  return "?";
}

namespace {

cudaDataType_t dataType(DeviceElement element) {
  switch (element) {
  case DeviceElement::f32:
    return CUDA_R_32F;
  case DeviceElement::bf16:
    return CUDA_R_16BF;
  case DeviceElement::fp8E4m3:
    return CUDA_R_8F_E4M3;
  }
  return CUDA_R_32F;
}

} // namespace

// The descriptors of one GEMM shape and the algorithm cuBLASLt chose for it.
struct LinearGemm::Plan {
  std::shared_ptr<const CublasLt> lt;
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t weightLayout = nullptr, inputLayout = nullptr, outputLayout = nullptr;
  cublasLtMatmulAlgo_t algorithm{};

  ~Plan() {
    if (outputLayout)
      lt->cublasLtMatrixLayoutDestroy(outputLayout);
    if (inputLayout)
      lt->cublasLtMatrixLayoutDestroy(inputLayout);
    if (weightLayout)
      lt->cublasLtMatrixLayoutDestroy(weightLayout);
    if (operation)
      lt->cublasLtMatmulDescDestroy(operation);
  }
};

StatusOr<std::unique_ptr<LinearGemm>> LinearGemm::create(std::shared_ptr<const CublasLt> lt,
                                                         CUdeviceptr workspace,
                                                         size_t workspaceBytes,
                                                         bool batchInvariant) {
  if (!lt)
    return Status::error("cuda backend: no cuBLASLt");
  cublasLtHandle_t handle = nullptr;
  DLM_RETURN_IF_ERROR(lt->check(lt->cublasLtCreate(&handle), "cublasLtCreate"));
  return std::unique_ptr<LinearGemm>(
      new LinearGemm(std::move(lt), handle, workspace, workspaceBytes, batchInvariant));
}

LinearGemm::LinearGemm(std::shared_ptr<const CublasLt> lt, cublasLtHandle_t handle,
                       CUdeviceptr workspace, size_t workspaceBytes, bool batchInvariant)
    : lt_(std::move(lt)), handle_(handle), workspace_(workspace),
      workspaceBytes_(workspaceBytes), batchInvariant_(batchInvariant) {}

LinearGemm::~LinearGemm() {
  plans_.clear();
  if (handle_)
    lt_->cublasLtDestroy(handle_);
}

StatusOr<LinearGemm::Plan *> LinearGemm::plan(const LinearCall &call, const char *name) {
  const PlanKey key{static_cast<int>(call.input), static_cast<int>(call.output), call.rows,
                    call.in,  call.out,  call.bias != 0, call.accumulate};
  auto found = plans_.find(key);
  if (found != plans_.end())
    return found->second.get();
  const std::string what = std::string(name) + ": ";
  DLM_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, describe(call, what));
  if (batchInvariant_) {
    DLM_ASSIGN_OR_RETURN(plan->algorithm, invariantAlgorithm(call, what));
  } else {
    DLM_ASSIGN_OR_RETURN(plan->algorithm, heuristic(*plan, call, what));
  }
  Plan *result = plan.get();
  plans_.emplace(key, std::move(plan));
  return result;
}

StatusOr<std::unique_ptr<LinearGemm::Plan>> LinearGemm::describe(const LinearCall &call,
                                                                 const std::string &what) {
  auto check = [&](cublasStatus_t status, const char *call) {
    return lt_->check(status, (what + call).c_str());
  };
  auto plan = std::make_unique<Plan>();
  plan->lt = lt_;
  DLM_RETURN_IF_ERROR(check(
      lt_->cublasLtMatmulDescCreate(&plan->operation, CUBLAS_COMPUTE_32F, CUDA_R_32F),
      "cublasLtMatmulDescCreate"));
  const cublasOperation_t transposed = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  DLM_RETURN_IF_ERROR(check(lt_->cublasLtMatmulDescSetAttribute(plan->operation,
                                                                CUBLASLT_MATMUL_DESC_TRANSA,
                                                                &transposed, sizeof(transposed)),
                            "cublasLtMatmulDescSetAttribute(TRANSA)"));
  DLM_RETURN_IF_ERROR(check(lt_->cublasLtMatmulDescSetAttribute(plan->operation,
                                                                CUBLASLT_MATMUL_DESC_TRANSB,
                                                                &plain, sizeof(plain)),
                            "cublasLtMatmulDescSetAttribute(TRANSB)"));
  if (call.input == DeviceElement::fp8E4m3) {
    const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    for (auto attribute : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE})
      DLM_RETURN_IF_ERROR(check(
          lt_->cublasLtMatmulDescSetAttribute(plan->operation, attribute, &outer, sizeof(outer)),
          "cublasLtMatmulDescSetAttribute(SCALE_MODE)"));
  }
  if (call.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    DLM_RETURN_IF_ERROR(check(lt_->cublasLtMatmulDescSetAttribute(plan->operation,
                                                                  CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                                  &epilogue, sizeof(epilogue)),
                              "cublasLtMatmulDescSetAttribute(EPILOGUE)"));
  }
  // Column-major views: W^T is [in, out] (ld in) used transposed, x^T is [in, rows] (ld in),
  // y^T is [out, rows] (ld out).
  const uint64_t in = static_cast<uint64_t>(call.in), out = static_cast<uint64_t>(call.out),
                 rows = static_cast<uint64_t>(call.rows);
  DLM_RETURN_IF_ERROR(check(lt_->cublasLtMatrixLayoutCreate(&plan->weightLayout,
                                                            dataType(call.input), in, out,
                                                            static_cast<int64_t>(in)),
                            "cublasLtMatrixLayoutCreate(weight)"));
  DLM_RETURN_IF_ERROR(check(lt_->cublasLtMatrixLayoutCreate(&plan->inputLayout,
                                                            dataType(call.input), in, rows,
                                                            static_cast<int64_t>(in)),
                            "cublasLtMatrixLayoutCreate(input)"));
  DLM_RETURN_IF_ERROR(check(lt_->cublasLtMatrixLayoutCreate(&plan->outputLayout,
                                                            dataType(call.output), out, rows,
                                                            static_cast<int64_t>(out)),
                            "cublasLtMatrixLayoutCreate(output)"));
  return plan;
}

StatusOr<cublasLtMatmulAlgo_t> LinearGemm::heuristic(const Plan &plan, const LinearCall &call,
                                                     const std::string &what) {
  cublasLtMatmulPreference_t preference = nullptr;
  DLM_RETURN_IF_ERROR(lt_->check(lt_->cublasLtMatmulPreferenceCreate(&preference),
                                 (what + "cublasLtMatmulPreferenceCreate").c_str()));
  const uint64_t workspaceBytes = workspaceBytes_;
  cublasStatus_t status = lt_->cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
      sizeof(workspaceBytes));
  // Batch-invariant: no split-K, every dot product in one sequence.
  const uint32_t noReduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  if (status == CUBLAS_STATUS_SUCCESS && batchInvariant_)
    status = lt_->cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &noReduction,
        sizeof(noReduction));
  cublasLtMatmulHeuristicResult_t result{};
  int foundCount = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = lt_->cublasLtMatmulAlgoGetHeuristic(
        handle_, plan.operation, plan.weightLayout, plan.inputLayout, plan.outputLayout,
        plan.outputLayout, preference, 1, &result, &foundCount);
  lt_->cublasLtMatmulPreferenceDestroy(preference);
  DLM_RETURN_IF_ERROR(lt_->check(status, (what + "cublasLtMatmulAlgoGetHeuristic").c_str()));
  if (foundCount < 1)
    return Status::error(what + "cuBLASLt has no algorithm" +
                         (batchInvariant_ ? " without split-K" : "") + " for a " +
                         elementName(call.input) + " GEMM of " + std::to_string(call.rows) +
                         " x " + std::to_string(call.in) + " by " + std::to_string(call.in) +
                         " x " + std::to_string(call.out));
  return result.algo;
}

StatusOr<cublasLtMatmulAlgo_t> LinearGemm::invariantAlgorithm(const LinearCall &call,
                                                              const std::string &what) {
  const PlanKey key{static_cast<int>(call.input), static_cast<int>(call.output), 0,
                    call.in,  call.out,  call.bias != 0, call.accumulate};
  auto found = algorithms_.find(key);
  if (found != algorithms_.end())
    return found->second;
  LinearCall canonical = call;
  canonical.rows = kInvariantRows;
  DLM_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, describe(canonical, what));
  DLM_ASSIGN_OR_RETURN(cublasLtMatmulAlgo_t algorithm, heuristic(*plan, canonical, what));
  algorithms_.emplace(key, algorithm);
  return algorithm;
}

Status LinearGemm::run(CUstream stream, const LinearCall &call, const char *name) {
  if (call.rows == 0)
    return Status::ok();
  DLM_ASSIGN_OR_RETURN(Plan * plan, this->plan(call, name));
  if (call.bias) {
    const void *bias = reinterpret_cast<const void *>(call.bias);
    DLM_RETURN_IF_ERROR(lt_->check(
        lt_->cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                            &bias, sizeof(bias)),
        (std::string(name) + ": cublasLtMatmulDescSetAttribute(BIAS_POINTER)").c_str()));
  }
  if (call.input == DeviceElement::fp8E4m3) {
    const void *scales[] = {reinterpret_cast<const void *>(call.weightScales),
                            reinterpret_cast<const void *>(call.xScales)};
    const cublasLtMatmulDescAttributes_t attributes[] = {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                         CUBLASLT_MATMUL_DESC_B_SCALE_POINTER};
    for (int i = 0; i < 2; ++i)
      DLM_RETURN_IF_ERROR(lt_->check(
          lt_->cublasLtMatmulDescSetAttribute(plan->operation, attributes[i], &scales[i],
                                              sizeof(scales[i])),
          (std::string(name) + ": cublasLtMatmulDescSetAttribute(SCALE_POINTER)").c_str()));
  }
  const float alpha = 1.f, beta = call.accumulate ? 1.f : 0.f;
  void *y = reinterpret_cast<void *>(call.y);
  return lt_->check(
      lt_->cublasLtMatmul(handle_, plan->operation, &alpha, reinterpret_cast<void *>(call.weight),
                          plan->weightLayout, reinterpret_cast<void *>(call.x), plan->inputLayout,
                          &beta, y, plan->outputLayout, y, plan->outputLayout, &plan->algorithm,
                          reinterpret_cast<void *>(workspace_), workspaceBytes_,
                          reinterpret_cast<cudaStream_t>(stream)),
      (std::string(name) + ": cublasLtMatmul").c_str());
}

} // namespace dlm::cuda
