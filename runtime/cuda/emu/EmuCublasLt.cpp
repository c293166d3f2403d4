// The emulated cuBLASLt: descriptors and layouts are heap objects holding the attributes set;
// cublasLtMatmul computes D = alpha * op(A) op(B) + beta * C (+ bias) in cuBLASLt's column-major
// convention, with fp32 accumulation, as work on the emulated driver's stream (so a captured
// forward replays its GEMMs too).
//
// Supported: A and B both CUDA_R_32F or both CUDA_R_16BF; C and D (same type) CUDA_R_32F or
// CUDA_R_16BF; CUBLAS_COMPUTE_32F with scale type CUDA_R_32F; any transposes of A and B; column-
// or row-order layouts with leading dimensions; strided batches; epilogue DEFAULT or BIAS (bias
// of D's type or f32, one value per row of D). Anything else is CUBLAS_STATUS_NOT_SUPPORTED.
//
// FP8, with cuBLASLt's documented rules: A and B both CUDA_R_8F_E4M3 (decoded by cuda_fp8.h)
// on a device of compute capability >= 8.9 (emulatedComputeCapability), A transposed and B not
// ("TN"), every leading dimension and A/B/C/D pointer a multiple of 16 bytes, a bias (if any) in
// bf16; A_SCALE_POINTER and
// B_SCALE_POINTER (device f32, null = 1) multiply in: D = alpha * sa * sb * op(A) op(B) +
// beta * C. With A_SCALE_MODE = B_SCALE_MODE = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F (9.0
// only) sa is a vector over D's rows and sb over its columns: D[i, j] uses sa[i] * sb[j].
#include "runtime/cuda/emu/EmuAccessChecks.h"
#include "runtime/cuda/emu/EmuApi.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace dlm::emu {

namespace {

struct Handle {};

struct MatmulDesc {
  cublasComputeType_t computeType = CUBLAS_COMPUTE_32F;
  cudaDataType_t scaleType = CUDA_R_32F;
  int32_t pointerMode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N;
  int32_t transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  int32_t biasType = -1; // -1: D's type
  // FP8: the A and B scales (device f32; null: 1) and their modes (cublasLtMatmulMatrixScale_t).
  const void *aScale = nullptr, *bScale = nullptr;
  int32_t aScaleMode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t bScaleMode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
};

struct Layout {
  cudaDataType_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int32_t batchCount = 1;
  int64_t batchStride = 0; // elements between batches
};

struct Preference {};

// The handles alive, so that a stale or foreign one is an error instead of a crash.
struct Objects {
  std::mutex mutex;
  std::set<const void *> live;
};

Objects &objects() {
  static Objects instance;
  return instance;
}

// Creates a T, set up by `setUp`, and gives it out as `*handle` (a cuBLASLt handle type).
template <typename T, typename PublicHandle, typename SetUp>
cublasStatus_t create(PublicHandle *handle, SetUp &&setUp) {
  if (!handle)
    return CUBLAS_STATUS_INVALID_VALUE;
  T *object = new T();
  setUp(*object);
  Objects &all = objects();
  std::lock_guard<std::mutex> lock(all.mutex);
  all.live.insert(object);
  *handle = reinterpret_cast<PublicHandle>(object);
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T> cublasStatus_t destroy(T *object) {
  if (!object)
    return CUBLAS_STATUS_SUCCESS; // destroying a null descriptor is allowed, as in cuBLASLt
  Objects &all = objects();
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    if (!all.live.erase(object))
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  delete object;
  return CUBLAS_STATUS_SUCCESS;
}

bool isLive(const void *object) {
  Objects &all = objects();
  std::lock_guard<std::mutex> lock(all.mutex);
  return object && all.live.count(object);
}

template <typename T> T *objectOf(void *handle) { return static_cast<T *>(handle); }

// Copies an attribute value of exactly the documented size.
template <typename T> cublasStatus_t readAttribute(T &field, const void *buffer, size_t bytes) {
  if (!buffer || bytes != sizeof(T))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buffer, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

bool isMatrixType(cudaDataType_t type) { return type == CUDA_R_32F || type == CUDA_R_16BF; }

float loadElement(const void *base, cudaDataType_t type, int64_t index) {
  if (type == CUDA_R_32F)
    return static_cast<const float *>(base)[index];
  if (type == CUDA_R_8F_E4M3) {
    __nv_fp8_e4m3 code;
    code.__x = static_cast<const __nv_fp8_storage_t *>(base)[index];
    return static_cast<float>(code);
  }
  return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[index]);
}

// Also tells initcheck (EmuAccessChecks.h) the element is written.
void storeElement(void *base, cudaDataType_t type, int64_t index, float value) {
  if (type == CUDA_R_32F) {
    static_cast<float *>(base)[index] = value;
    markDeviceWritten(static_cast<float *>(base) + index, sizeof(float));
  } else {
    static_cast<__nv_bfloat16 *>(base)[index] = __float2bfloat16(value);
    markDeviceWritten(static_cast<__nv_bfloat16 *>(base) + index, sizeof(__nv_bfloat16));
  }
}

size_t elementBytes(cudaDataType_t type) {
  return type == CUDA_R_32F ? 4 : type == CUDA_R_8F_E4M3 ? 1 : 2;
}

// The element index of (row, col) of a layout.
int64_t indexOf(const Layout &layout, uint64_t row, uint64_t col) {
  return layout.order == CUBLASLT_ORDER_COL ? static_cast<int64_t>(row + col * layout.ld)
                                            : static_cast<int64_t>(row * layout.ld + col);
}

// One matmul, its shapes checked: op(A) is m x k, op(B) k x n, C and D m x n.
struct Problem {
  MatmulDesc desc;
  Layout a, b, c, d;
  uint64_t m = 0, n = 0, k = 0;
};

cublasStatus_t checkLayout(const Layout &layout) {
  const uint64_t minimum = layout.order == CUBLASLT_ORDER_COL ? layout.rows : layout.cols;
  if (layout.ld < 0 || static_cast<uint64_t>(layout.ld) < std::max<uint64_t>(minimum, 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (layout.batchCount < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// What FP8 asks of the device, the operands and the scales; scales on other types are refused.
cublasStatus_t checkScaling(const MatmulDesc &desc, bool fp8, const Layout &a, const Layout &b,
                            const Layout &c, const Layout &d) {
  const int32_t scalar = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
                outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  if (!fp8)
    return desc.aScale || desc.bScale || desc.aScaleMode != scalar || desc.bScaleMode != scalar
               ? CUBLAS_STATUS_NOT_SUPPORTED
               : CUBLAS_STATUS_SUCCESS;
  const int capability = emulatedComputeCapability();
  if (capability < 89)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc.transa != CUBLAS_OP_T || desc.transb != CUBLAS_OP_N)
    return CUBLAS_STATUS_NOT_SUPPORTED; // "TN" only
  for (const Layout *layout : {&a, &b, &c, &d})
    if (layout->order != CUBLASLT_ORDER_COL ||
        (layout->ld * static_cast<int64_t>(elementBytes(layout->type))) % 16 != 0)
      return CUBLAS_STATUS_NOT_SUPPORTED;
  // cuBLASLt's FP8 table: the bias is bf16 (whatever D is).
  const int32_t biasType = desc.biasType == -1 ? d.type : desc.biasType;
  if (desc.epilogue == CUBLASLT_EPILOGUE_BIAS && biasType != CUDA_R_16BF)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool scalars = desc.aScaleMode == scalar && desc.bScaleMode == scalar;
  const bool vectors = desc.aScaleMode == outer && desc.bScaleMode == outer;
  if (!scalars && !(vectors && capability == 90))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t describe(const MatmulDesc *desc, const Layout *a, const Layout *b, const Layout *c,
                        const Layout *d, Problem &problem) {
  if (!isLive(desc) || !isLive(a) || !isLive(b) || !isLive(c) || !isLive(d))
    return CUBLAS_STATUS_INVALID_VALUE;
  problem.desc = *desc;
  problem.a = *a;
  problem.b = *b;
  problem.c = *c;
  problem.d = *d;
  if (desc->computeType != CUBLAS_COMPUTE_32F || desc->scaleType != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool fp8 = a->type == CUDA_R_8F_E4M3 && b->type == CUDA_R_8F_E4M3;
  if (a->type != b->type || !(isMatrixType(a->type) || fp8) || c->type != d->type ||
      !isMatrixType(d->type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (cublasStatus_t status = checkScaling(*desc, fp8, *a, *b, *c, *d);
      status != CUBLAS_STATUS_SUCCESS)
    return status;
  if (desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT && desc->epilogue != CUBLASLT_EPILOGUE_BIAS)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc->epilogue == CUBLASLT_EPILOGUE_BIAS && !fp8 && desc->biasType != -1 &&
      desc->biasType != CUDA_R_32F && desc->biasType != d->type)
    return CUBLAS_STATUS_NOT_SUPPORTED; // FP8's bias rule: checkScaling
  for (int32_t op : {desc->transa, desc->transb})
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T)
      return CUBLAS_STATUS_NOT_SUPPORTED; // conjugate transposes: real types only here
  if (desc->pointerMode != CUBLASLT_POINTER_MODE_HOST &&
      desc->pointerMode != CUBLASLT_POINTER_MODE_DEVICE)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  for (const Layout *layout : {a, b, c, d}) {
    if (layout->order != CUBLASLT_ORDER_COL && layout->order != CUBLASLT_ORDER_ROW)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    if (cublasStatus_t status = checkLayout(*layout); status != CUBLAS_STATUS_SUCCESS)
      return status;
  }
  problem.m = d->rows;
  problem.n = d->cols;
  const bool transA = desc->transa == CUBLAS_OP_T;
  const bool transB = desc->transb == CUBLAS_OP_T;
  problem.k = transA ? a->rows : a->cols;
  const uint64_t aRows = transA ? a->cols : a->rows;
  const uint64_t bRows = transB ? b->cols : b->rows;
  const uint64_t bCols = transB ? b->rows : b->cols;
  if (aRows != problem.m || bRows != problem.k || bCols != problem.n || c->rows != problem.m ||
      c->cols != problem.n)
    return CUBLAS_STATUS_INVALID_VALUE;
  const int32_t batches = d->batchCount;
  if (a->batchCount != batches || b->batchCount != batches || c->batchCount != batches)
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// fp32 dot product over 8 interleaved partial sums: the compiler vectorises it (one running sum
// would pin the additions to their order), and the partial sums keep the rounding error lower.
float dot(const float *x, const float *y, uint64_t count) {
  constexpr unsigned kLanes = 8;
  float partial[kLanes] = {};
  uint64_t i = 0;
  for (; i + kLanes <= count; i += kLanes)
    for (unsigned lane = 0; lane < kLanes; ++lane)
      partial[lane] += x[i + lane] * y[i + lane];
  float sum = 0.f;
  for (; i < count; ++i)
    sum += x[i] * y[i];
  for (unsigned lane = 0; lane < kLanes; ++lane)
    sum += partial[lane];
  return sum;
}

// Runs one batch of the problem over columns [firstColumn, endColumn) of D.
void computeColumns(const Problem &problem, const std::vector<float> &opA,
                    const std::vector<float> &opB, const void *c, void *d, float alpha, float beta,
                    uint64_t firstColumn, uint64_t endColumn) {
  const uint64_t m = problem.m, k = problem.k;
  const bool bias = problem.desc.epilogue == CUBLASLT_EPILOGUE_BIAS;
  const cudaDataType_t biasType = problem.desc.biasType == -1
                                      ? problem.d.type
                                      : static_cast<cudaDataType_t>(problem.desc.biasType);
  const bool outer = problem.desc.aScaleMode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  auto scaleOf = [&](const void *scale, uint64_t index) {
    return !scale ? 1.f : static_cast<const float *>(scale)[outer ? index : 0];
  };
  for (uint64_t col = firstColumn; col < endColumn; ++col) {
    const float *column = opB.data() + col * k;
    const float columnScale = scaleOf(problem.desc.bScale, col);
    for (uint64_t row = 0; row < m; ++row) {
      const float scale = alpha * scaleOf(problem.desc.aScale, row) * columnScale;
      float value = scale * dot(opA.data() + row * k, column, k);
      // beta == 0: C is not read (it may be uninitialised), as in cuBLAS.
      if (beta != 0.f)
        value += beta * loadElement(c, problem.c.type, indexOf(problem.c, row, col));
      if (bias)
        value += loadElement(problem.desc.bias, biasType, static_cast<int64_t>(row));
      storeElement(d, problem.d.type, indexOf(problem.d, row, col), value);
    }
  }
}

void runMatmul(const Problem &problem, float alpha, float beta, const void *aBase,
               const void *bBase, const void *cBase, void *dBase) {
  const uint64_t m = problem.m, n = problem.n, k = problem.k;
  const bool transA = problem.desc.transa == CUBLAS_OP_T;
  const bool transB = problem.desc.transb == CUBLAS_OP_T;
  // op(A) as m rows of k floats, op(B) as n columns of k floats: the inner loop is contiguous.
  std::vector<float> opA(m * k), opB(n * k);
  for (int32_t batch = 0; batch < problem.d.batchCount; ++batch) {
    auto at = [&](const void *base, const Layout &layout) {
      return static_cast<const unsigned char *>(base) +
             batch * layout.batchStride * static_cast<int64_t>(elementBytes(layout.type));
    };
    const void *a = at(aBase, problem.a);
    const void *b = at(bBase, problem.b);
    const void *c = cBase ? at(cBase, problem.c) : nullptr;
    void *d = const_cast<unsigned char *>(at(dBase, problem.d));
    for (uint64_t row = 0; row < m; ++row)
      for (uint64_t i = 0; i < k; ++i)
        opA[row * k + i] = loadElement(
            a, problem.a.type, transA ? indexOf(problem.a, i, row) : indexOf(problem.a, row, i));
    for (uint64_t col = 0; col < n; ++col)
      for (uint64_t i = 0; i < k; ++i)
        opB[col * k + i] = loadElement(
            b, problem.b.type, transB ? indexOf(problem.b, col, i) : indexOf(problem.b, i, col));

    // Columns spread over the device's workers once there is enough work to pay for threads.
    const uint64_t work = m * n * std::max<uint64_t>(k, 1);
    const uint64_t threads =
        std::max<uint64_t>(1, std::min<uint64_t>({emulatedWorkers(), n, work / (1u << 16)}));
    if (threads == 1) {
      computeColumns(problem, opA, opB, c, d, alpha, beta, 0, n);
      continue;
    }
    std::vector<std::thread> running;
    const uint64_t perThread = (n + threads - 1) / threads;
    for (uint64_t first = 0; first < n; first += perThread)
      running.emplace_back(computeColumns, std::cref(problem), std::cref(opA), std::cref(opB), c, d,
                           alpha, beta, first, std::min(n, first + perThread));
    for (std::thread &thread : running)
      thread.join();
  }
}

} // namespace

namespace api {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
  return create<Handle>(handle, [](Handle &) {});
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return destroy(reinterpret_cast<Handle *>(handle));
}

const char *cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR:
    return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR:
    return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "success";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "an invalid value was used as an argument (a null or stale handle, an attribute of "
           "the wrong size, or shapes of A, B, C and D that do not agree)";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "not supported by the emulated cuBLASLt (it computes A, B both f32 or both bf16, or "
           "both FP8 E4M3 'TN' with 16-byte alignment on compute capability >= 8.9 (outer-vector "
           "scales: 9.0); C = D f32 or bf16; CUBLAS_COMPUTE_32F with f32 scale; transposes N/T; "
           "epilogue DEFAULT or BIAS)";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "the GEMM could not be enqueued on its stream (an invalid stream or capture)";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "resource allocation failed";
  default:
    return "an error the emulated cuBLASLt does not return";
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scaleType) {
  return create<MatmulDesc>(desc, [&](MatmulDesc &created) {
    created.computeType = compute;
    created.scaleType = scaleType;
  });
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return destroy(reinterpret_cast<MatmulDesc *>(desc));
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t handle,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void *buffer, size_t bytes) {
  MatmulDesc *desc = reinterpret_cast<MatmulDesc *>(handle);
  if (!isLive(desc))
    return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
    return readAttribute(desc->computeType, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
    return readAttribute(desc->scaleType, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_POINTER_MODE:
    return readAttribute(desc->pointerMode, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_TRANSA:
    return readAttribute(desc->transa, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_TRANSB:
    return readAttribute(desc->transb, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    return readAttribute(desc->epilogue, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    return readAttribute(desc->bias, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    return readAttribute(desc->biasType, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    return readAttribute(desc->aScale, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
    return readAttribute(desc->bScale, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
    return readAttribute(desc->aScaleMode, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
    return readAttribute(desc->bScaleMode, buffer, bytes);
  default:
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  return create<Layout>(layout, [&](Layout &created) {
    created.type = type;
    created.rows = rows;
    created.cols = cols;
    created.ld = ld;
  });
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return destroy(reinterpret_cast<Layout *>(layout));
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t handle,
                                                cublasLtMatrixLayoutAttribute_t attribute,
                                                const void *buffer, size_t bytes) {
  Layout *layout = reinterpret_cast<Layout *>(handle);
  if (!isLive(layout))
    return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
  case CUBLASLT_MATRIX_LAYOUT_TYPE: {
    uint32_t type = 0;
    cublasStatus_t status = readAttribute(type, buffer, bytes);
    layout->type = static_cast<cudaDataType_t>(type);
    return status;
  }
  case CUBLASLT_MATRIX_LAYOUT_ORDER:
    return readAttribute(layout->order, buffer, bytes);
  case CUBLASLT_MATRIX_LAYOUT_ROWS:
    return readAttribute(layout->rows, buffer, bytes);
  case CUBLASLT_MATRIX_LAYOUT_COLS:
    return readAttribute(layout->cols, buffer, bytes);
  case CUBLASLT_MATRIX_LAYOUT_LD:
    return readAttribute(layout->ld, buffer, bytes);
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
    return readAttribute(layout->batchCount, buffer, bytes);
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
    return readAttribute(layout->batchStride, buffer, bytes);
  default:
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *preference) {
  return create<Preference>(preference, [](Preference &) {});
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  return destroy(reinterpret_cast<Preference *>(preference));
}

// Preferences narrow the search for an algorithm; the emulation has one algorithm, which needs
// no workspace and meets any of them.
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t,
                                                    const void *buffer, size_t bytes) {
  if (!isLive(reinterpret_cast<Preference *>(preference)) || !buffer || bytes == 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference,
                                              int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returnAlgoCount) {
  if (!isLive(reinterpret_cast<Handle *>(handle)) ||
      !isLive(reinterpret_cast<Preference *>(preference)) || requestedAlgoCount < 1 || !results ||
      !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  Problem problem;
  cublasStatus_t status =
      describe(reinterpret_cast<MatmulDesc *>(desc), reinterpret_cast<Layout *>(a),
               reinterpret_cast<Layout *>(b), reinterpret_cast<Layout *>(c),
               reinterpret_cast<Layout *>(d), problem);
  *returnAlgoCount = 0;
  if (status != CUBLAS_STATUS_SUCCESS)
    return status;
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *a, cublasLtMatrixLayout_t aLayout, const void *b,
                              cublasLtMatrixLayout_t bLayout, const void *beta, const void *c,
                              cublasLtMatrixLayout_t cLayout, void *d,
                              cublasLtMatrixLayout_t dLayout, const cublasLtMatmulAlgo_t *, void *,
                              size_t, cudaStream_t stream) {
  if (!isLive(reinterpret_cast<Handle *>(handle)) || !alpha || !beta || !d)
    return CUBLAS_STATUS_INVALID_VALUE;
  auto problem = std::make_shared<Problem>();
  cublasStatus_t status =
      describe(reinterpret_cast<MatmulDesc *>(desc), reinterpret_cast<Layout *>(aLayout),
               reinterpret_cast<Layout *>(bLayout), reinterpret_cast<Layout *>(cLayout),
               reinterpret_cast<Layout *>(dLayout), *problem);
  if (status != CUBLAS_STATUS_SUCCESS)
    return status;
  const bool emptyK = problem->k == 0;
  if ((!a || !b) && !emptyK)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (problem->desc.epilogue == CUBLASLT_EPILOGUE_BIAS && !problem->desc.bias)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (problem->a.type == CUDA_R_8F_E4M3)
    for (const void *pointer : {a, b, c, static_cast<const void *>(d)})
      if (reinterpret_cast<uintptr_t>(pointer) % 16 != 0)
        return CUBLAS_STATUS_NOT_SUPPORTED; // FP8: 16-byte aligned operands
  if (!validStream(stream))
    return CUBLAS_STATUS_INVALID_VALUE;
  // Host scalars are read now (a captured graph keeps their values); device scalars when the
  // work runs, like a kernel reading them.
  const bool hostScalars = problem->desc.pointerMode == CUBLASLT_POINTER_MODE_HOST;
  float hostAlpha = 0.f, hostBeta = 0.f;
  if (hostScalars) {
    std::memcpy(&hostAlpha, alpha, sizeof hostAlpha);
    std::memcpy(&hostBeta, beta, sizeof hostBeta);
  }
  if (hostScalars && hostBeta != 0.f && !c)
    return CUBLAS_STATUS_INVALID_VALUE;
  const CUresult enqueued = enqueueOnStream(stream, [=]() -> CUresult {
    const float alphaValue = hostScalars ? hostAlpha : *static_cast<const float *>(alpha);
    const float betaValue = hostScalars ? hostBeta : *static_cast<const float *>(beta);
    if (betaValue != 0.f && !c)
      return CUDA_ERROR_INVALID_VALUE;
    if (problem->m && problem->n)
      runMatmul(*problem, alphaValue, betaValue, a, b, c, d);
    return CUDA_SUCCESS;
  });
  return enqueued == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

} // namespace api

} // namespace dlm::emu
