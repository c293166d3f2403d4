// The emulated cuBLASLt against a double-precision reference: random ragged shapes, all four
// transpose combinations, f32 and bf16 operands and outputs, the bias epilogue, beta = 1 with C
// aliasing D (the residual add); unsupported combinations are named. And the real library's
// symbol table: it loads here (the toolkit ships libcublasLt) or fails with the named error.
#include "runtime/cuda/emu/EmuDriver.h"
#include "support/FloatFormats.h"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using dlm::cuda::CublasLt;

// A column-major matrix of `type` with a padded leading dimension, and its values as doubles
// (after rounding to the type, so the reference sees exactly what the GEMM reads).
struct Matrix {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  std::vector<unsigned char> bytes;
  std::vector<double> values; // column-major rows x cols, packed

  Matrix(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t padding)
      : type(type), rows(rows), cols(cols), ld(static_cast<int64_t>(rows) + padding),
        bytes(static_cast<size_t>(ld) * cols * elementBytes()), values(rows * cols) {}

  size_t elementBytes() const { return type == CUDA_R_32F ? 4 : type == CUDA_R_8F_E4M3 ? 1 : 2; }
  // An E4M3 matrix's element: its code, and the value support/FloatFormats.h decodes it to.
  void setCode(uint64_t row, uint64_t col, uint8_t code) {
    bytes[row + col * ld] = code;
    values[row + col * rows] = dlm::floatFromE4m3(code);
  }
  void set(uint64_t row, uint64_t col, float value) {
    const size_t index = row + col * ld;
    if (type == CUDA_R_32F) {
      std::memcpy(bytes.data() + index * 4, &value, 4);
      values[row + col * rows] = value;
    } else {
      const __nv_bfloat16 rounded = __float2bfloat16(value);
      std::memcpy(bytes.data() + index * 2, &rounded, 2);
      values[row + col * rows] = __bfloat162float(rounded);
    }
  }
  double get(uint64_t row, uint64_t col) const {
    const size_t index = row + col * ld;
    if (type == CUDA_R_32F) {
      float value;
      std::memcpy(&value, bytes.data() + index * 4, 4);
      return value;
    }
    __nv_bfloat16 value;
    std::memcpy(&value, bytes.data() + index * 2, 2);
    return __bfloat162float(value);
  }
  void fill(std::mt19937 &random) {
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    for (uint64_t col = 0; col < cols; ++col)
      for (uint64_t row = 0; row < rows; ++row)
        set(row, col, uniform(random));
  }
};

class EmuCublasLt : public ::testing::Test {
protected:
  void SetUp() override {
    auto loaded = dlm::emu::emulatedCublasLt();
    ASSERT_TRUE(loaded) << loaded.status().message();
    lt_ = *loaded;
    ASSERT_EQ(lt().cublasLtCreate(&handle_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(lt().cublasLtMatmulPreferenceCreate(&preference_), CUBLAS_STATUS_SUCCESS);
    size_t workspace = 1 << 20;
    ASSERT_EQ(lt().cublasLtMatmulPreferenceSetAttribute(preference_,
                                                        CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &workspace, sizeof workspace),
              CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(lt().cublasLtMatmulPreferenceDestroy(preference_), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt().cublasLtDestroy(handle_), CUBLAS_STATUS_SUCCESS);
  }
  const CublasLt &lt() const { return *lt_; }

  cublasLtMatrixLayout_t layoutOf(const Matrix &matrix) {
    cublasLtMatrixLayout_t layout = nullptr;
    EXPECT_EQ(
        lt().cublasLtMatrixLayoutCreate(&layout, matrix.type, matrix.rows, matrix.cols, matrix.ld),
        CUBLAS_STATUS_SUCCESS);
    layouts_.push_back(layout);
    return layout;
  }
  void destroyLayouts() {
    for (cublasLtMatrixLayout_t layout : layouts_)
      EXPECT_EQ(lt().cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
    layouts_.clear();
  }

  struct Gemm {
    bool transA = false, transB = false;
    float alpha = 1.f, beta = 0.f;
    const void *bias = nullptr;
    int32_t biasType = -1;
    // FP8: scale pointers and, when >= 0, the scale mode of both A and B.
    const float *aScale = nullptr, *bScale = nullptr;
    int32_t scaleMode = -1;
  };

  // Runs D = alpha op(A) op(B) + beta C (+ bias) through heuristic + matmul.
  cublasStatus_t run(const Gemm &gemm, Matrix &a, Matrix &b, Matrix *c, Matrix &d) {
    cublasLtMatmulDesc_t desc = nullptr;
    EXPECT_EQ(lt().cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              CUBLAS_STATUS_SUCCESS);
    const int32_t opA = gemm.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int32_t opB = gemm.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    EXPECT_EQ(
        lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA),
        CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(
        lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB),
        CUBLAS_STATUS_SUCCESS);
    if (gemm.bias) {
      const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      EXPECT_EQ(lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                    sizeof epilogue),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &gemm.bias, sizeof gemm.bias),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &gemm.biasType, sizeof gemm.biasType),
                CUBLAS_STATUS_SUCCESS);
    }
    if (gemm.aScale || gemm.bScale) {
      EXPECT_EQ(lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                    &gemm.aScale, sizeof gemm.aScale),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                    &gemm.bScale, sizeof gemm.bScale),
                CUBLAS_STATUS_SUCCESS);
    }
    if (gemm.scaleMode >= 0)
      for (auto attribute : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE})
        EXPECT_EQ(lt().cublasLtMatmulDescSetAttribute(desc, attribute, &gemm.scaleMode,
                                                      sizeof gemm.scaleMode),
                  CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayout_t aLayout = layoutOf(a), bLayout = layoutOf(b), dLayout = layoutOf(d);
    cublasLtMatrixLayout_t cLayout = c ? layoutOf(*c) : dLayout;
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    cublasStatus_t status = lt().cublasLtMatmulAlgoGetHeuristic(
        handle_, desc, aLayout, bLayout, cLayout, dLayout, preference_, 1, &heuristic, &found);
    if (status == CUBLAS_STATUS_SUCCESS) {
      EXPECT_EQ(found, 1);
      EXPECT_EQ(heuristic.state, CUBLAS_STATUS_SUCCESS);
      status =
          lt().cublasLtMatmul(handle_, desc, &gemm.alpha, a.bytes.data(), aLayout, b.bytes.data(),
                              bLayout, &gemm.beta, c ? c->bytes.data() : d.bytes.data(), cLayout,
                              d.bytes.data(), dLayout, &heuristic.algo, nullptr, 0, nullptr);
    }
    EXPECT_EQ(lt().cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
    destroyLayouts();
    return status;
  }

  std::shared_ptr<const CublasLt> lt_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulPreference_t preference_ = nullptr;
  std::vector<cublasLtMatrixLayout_t> layouts_;
};

// op(M)(row, col) of a stored matrix.
double opAt(const Matrix &matrix, bool transposed, uint64_t row, uint64_t col) {
  return transposed ? matrix.values[col + row * matrix.rows]
                    : matrix.values[row + col * matrix.rows];
}

TEST_F(EmuCublasLt, MatchesADoubleReferenceOverShapesTransposesAndTypes) {
  std::mt19937 random(1234);
  std::uniform_int_distribution<int> dimension(1, 67);
  int cases = 0;
  for (cudaDataType_t inputType : {CUDA_R_32F, CUDA_R_16BF})
    for (cudaDataType_t outputType : {CUDA_R_32F, CUDA_R_16BF})
      for (int transposes = 0; transposes < 4; ++transposes)
        for (int repeat = 0; repeat < 3; ++repeat) {
          Gemm gemm;
          gemm.transA = transposes & 1;
          gemm.transB = transposes & 2;
          const uint64_t m = dimension(random), n = dimension(random), k = dimension(random);
          gemm.alpha = repeat == 2 ? -0.75f : 1.f;
          gemm.beta = repeat == 1 ? 0.5f : 0.f;
          Matrix a(inputType, gemm.transA ? k : m, gemm.transA ? m : k, repeat);
          Matrix b(inputType, gemm.transB ? n : k, gemm.transB ? k : n, 3 - repeat);
          Matrix c(outputType, m, n, 1);
          Matrix d(outputType, m, n, 2);
          a.fill(random);
          b.fill(random);
          c.fill(random);
          const std::string what = "case " + std::to_string(cases) + ": m=" + std::to_string(m) +
                                   " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                   " transA=" + std::to_string(gemm.transA) +
                                   " transB=" + std::to_string(gemm.transB) +
                                   " input bf16=" + std::to_string(inputType == CUDA_R_16BF) +
                                   " output bf16=" + std::to_string(outputType == CUDA_R_16BF);
          ASSERT_EQ(run(gemm, a, b, &c, d), CUBLAS_STATUS_SUCCESS) << what;
          for (uint64_t col = 0; col < n; ++col)
            for (uint64_t row = 0; row < m; ++row) {
              double exact = 0.0, magnitude = 0.0;
              for (uint64_t i = 0; i < k; ++i) {
                const double product = opAt(a, gemm.transA, row, i) * opAt(b, gemm.transB, i, col);
                exact += product;
                magnitude += std::fabs(product);
              }
              exact = gemm.alpha * exact + gemm.beta * c.values[row + col * m];
              // fp32 accumulation, plus the output's own rounding for bf16.
              const double tolerance = 1e-6 * k * magnitude + 1e-6 +
                                       (outputType == CUDA_R_16BF ? std::fabs(exact) / 128 : 0.0);
              ASSERT_NEAR(d.get(row, col), exact, tolerance)
                  << what << " at (" << row << ", " << col << ")";
            }
          ++cases;
        }
  EXPECT_EQ(cases, 48);
}

TEST_F(EmuCublasLt, BiasEpilogueAddsOneValuePerRowOfD) {
  std::mt19937 random(99);
  for (cudaDataType_t outputType : {CUDA_R_32F, CUDA_R_16BF})
    for (bool f32Bias : {true, false}) {
      const uint64_t m = 37, n = 5, k = 19;
      Matrix a(CUDA_R_16BF, k, m, 0); // used transposed: the backend's weight layout
      Matrix b(CUDA_R_16BF, k, n, 0);
      Matrix d(outputType, m, n, 0);
      a.fill(random);
      b.fill(random);
      Matrix bias(f32Bias ? CUDA_R_32F : outputType, m, 1, 0);
      bias.fill(random);
      Gemm gemm;
      gemm.transA = true;
      gemm.bias = bias.bytes.data();
      gemm.biasType = f32Bias ? CUDA_R_32F : -1; // -1: D's type
      ASSERT_EQ(run(gemm, a, b, nullptr, d), CUBLAS_STATUS_SUCCESS);
      for (uint64_t col = 0; col < n; ++col)
        for (uint64_t row = 0; row < m; ++row) {
          double exact = bias.values[row];
          for (uint64_t i = 0; i < k; ++i)
            exact += a.values[i + row * k] * b.values[i + col * k];
          const double tolerance =
              1e-4 + (outputType == CUDA_R_16BF ? std::fabs(exact) / 128 : 0.0);
          ASSERT_NEAR(d.get(row, col), exact, tolerance) << row << ", " << col;
        }
    }
}

TEST_F(EmuCublasLt, BetaOneWithCAliasingDIsAResidualAdd) {
  std::mt19937 random(7);
  for (cudaDataType_t type : {CUDA_R_32F, CUDA_R_16BF}) {
    const uint64_t m = 23, n = 9, k = 41;
    Matrix a(type, m, k, 3), b(type, k, n, 0), d(type, m, n, 4);
    a.fill(random);
    b.fill(random);
    d.fill(random);
    const std::vector<double> residual = d.values;
    Gemm gemm;
    gemm.beta = 1.f;
    ASSERT_EQ(run(gemm, a, b, nullptr, d), CUBLAS_STATUS_SUCCESS); // C is D
    for (uint64_t col = 0; col < n; ++col)
      for (uint64_t row = 0; row < m; ++row) {
        double exact = residual[row + col * m];
        for (uint64_t i = 0; i < k; ++i)
          exact += a.values[row + i * m] * b.values[i + col * k];
        const double tolerance = 1e-4 + (type == CUDA_R_16BF ? std::fabs(exact) / 128 : 0.0);
        ASSERT_NEAR(d.get(row, col), exact, tolerance) << row << ", " << col;
      }
  }
}

// FP8 E4M3 x E4M3 in the layout the cuda backend uses ("TN": y^T = op_T(W) x^T) with outer-vector
// scales, D in f32 and bf16, against a double reference over every code but NaN's (decoded by
// support/FloatFormats.h; the emulation decodes with cuda_fp8.h). Then cuBLASLt's rules: no FP8
// below compute capability 8.9, outer vectors only on 9.0, "TN" only, 16-byte leading dimensions.
// Sets the emulated device's compute capability, and 9.0 again at the end of the scope.
class ComputeCapability {
public:
  explicit ComputeCapability(int capability) { set(capability); }
  ~ComputeCapability() { set(90); }
  static void set(int capability) {
    dlm::emu::EmuDriverOptions options;
    options.computeCapability = capability;
    EXPECT_TRUE(dlm::emu::emulatedCudaDriver(options));
  }
};

TEST_F(EmuCublasLt, Fp8WithOuterVectorScalesFollowsCublasLtsRules) {
  ComputeCapability hopper(90);
  std::mt19937 random(11);
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> positive(0.01f, 2.f);
  auto fp8Code = [&] {
    int c = code(random);
    return static_cast<uint8_t>((c & 0x7f) == 0x7f ? c - 1 : c); // not NaN
  };
  const uint64_t m = 24, n = 5, k = 48;
  for (cudaDataType_t out : {CUDA_R_32F, CUDA_R_16BF}) {
    Matrix a(CUDA_R_8F_E4M3, k, m, 0), b(CUDA_R_8F_E4M3, k, n, 0), d(out, m, n, 0);
    for (uint64_t col = 0; col < m; ++col)
      for (uint64_t row = 0; row < k; ++row)
        a.setCode(row, col, fp8Code());
    for (uint64_t col = 0; col < n; ++col)
      for (uint64_t row = 0; row < k; ++row)
        b.setCode(row, col, fp8Code());
    std::vector<float> aScale(m), bScale(n);
    for (float &v : aScale)
      v = positive(random);
    for (float &v : bScale)
      v = positive(random);
    Gemm gemm;
    gemm.transA = true;
    gemm.aScale = aScale.data();
    gemm.bScale = bScale.data();
    gemm.scaleMode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    ASSERT_EQ(run(gemm, a, b, nullptr, d), CUBLAS_STATUS_SUCCESS);
    for (uint64_t col = 0; col < n; ++col)
      for (uint64_t row = 0; row < m; ++row) {
        double exact = 0, magnitude = 0;
        for (uint64_t i = 0; i < k; ++i) {
          exact += a.values[i + row * k] * b.values[i + col * k];
          magnitude += std::fabs(a.values[i + row * k] * b.values[i + col * k]);
        }
        const double scale = static_cast<double>(aScale[row]) * bScale[col];
        exact *= scale;
        const double tolerance =
            1e-6 * magnitude * scale + (out == CUDA_R_16BF ? std::fabs(exact) / 128 : 0.0);
        ASSERT_NEAR(d.get(row, col), exact, tolerance) << row << ", " << col;
      }

    // Not "TN"; a leading dimension of 8 bytes: refused as cuBLASLt refuses them.
    Gemm plain = gemm;
    plain.transA = false;
    Matrix square(CUDA_R_8F_E4M3, k, k, 0), wide(CUDA_R_8F_E4M3, k, m, 0), dk(out, k, m, 0);
    EXPECT_EQ(run(plain, square, wide, nullptr, dk), CUBLAS_STATUS_NOT_SUPPORTED);
    Matrix narrowA(CUDA_R_8F_E4M3, 8, m, 0), narrowB(CUDA_R_8F_E4M3, 8, n, 0);
    EXPECT_EQ(run(gemm, narrowA, narrowB, nullptr, d), CUBLAS_STATUS_NOT_SUPPORTED);

    // The bias of an FP8 GEMM is bf16: an f32 one (D's type when D is f32) is refused.
    std::vector<__nv_bfloat16> bf16Bias(m, __float2bfloat16(0.5f));
    std::vector<float> f32Bias(m, 0.5f);
    Gemm biased = gemm;
    biased.bias = bf16Bias.data();
    biased.biasType = CUDA_R_16BF;
    EXPECT_EQ(run(biased, a, b, nullptr, d), CUBLAS_STATUS_SUCCESS);
    biased.bias = f32Bias.data();
    biased.biasType = CUDA_R_32F;
    EXPECT_EQ(run(biased, a, b, nullptr, d), CUBLAS_STATUS_NOT_SUPPORTED);

    // The device decides: outer vectors on 9.0 only, FP8 itself from 8.9.
    for (int capability : {89, 80}) {
      ComputeCapability older(capability);
      EXPECT_EQ(run(gemm, a, b, nullptr, d), CUBLAS_STATUS_NOT_SUPPORTED) << capability;
      Gemm scalars = gemm;
      scalars.scaleMode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
      EXPECT_EQ(run(scalars, a, b, nullptr, d),
                capability >= 89 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED)
          << capability;
    }
  }
}

TEST_F(EmuCublasLt, UnsupportedCombinationsAreNamed) {
  Matrix a(CUDA_R_32F, 4, 4, 0), b(CUDA_R_16BF, 4, 4, 0), d(CUDA_R_32F, 4, 4, 0);
  const cublasStatus_t mixed = run(Gemm{}, a, b, nullptr, d);
  EXPECT_EQ(mixed, CUBLAS_STATUS_NOT_SUPPORTED);
  const dlm::Status status = lt().check(mixed, "GEMM");
  EXPECT_EQ(status.message().rfind("GEMM: CUBLAS_STATUS_NOT_SUPPORTED (not supported by the "
                                   "emulated cuBLASLt",
                                   0),
            0u)
      << status.message();

  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(lt().cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_16F, CUDA_R_16F),
            CUBLAS_STATUS_SUCCESS);
  const uint32_t gelu = CUBLASLT_EPILOGUE_GELU;
  ASSERT_EQ(
      lt().cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu, sizeof gelu),
      CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t layout = layoutOf(d);
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = -1;
  EXPECT_EQ(lt().cublasLtMatmulAlgoGetHeuristic(handle_, desc, layout, layout, layout, layout,
                                                preference_, 1, &heuristic, &found),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(found, 0);
  // Shapes that do not agree are invalid, not unsupported.
  Matrix wrong(CUDA_R_32F, 5, 4, 0), square(CUDA_R_32F, 4, 4, 0), out(CUDA_R_32F, 4, 4, 0);
  EXPECT_EQ(run(Gemm{}, wrong, square, nullptr, out), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(lt().cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
  destroyLayouts();
}

TEST(CublasLtLibrary, MissingLibraryIsANamedError) {
  auto lt = CublasLt::load("libcublasLt-that-does-not-exist.so.13");
  ASSERT_FALSE(lt);
  EXPECT_EQ(lt.status().message().rfind(
                "cuBLASLt not available: libcublasLt-that-does-not-exist.so.13: ", 0),
            0u)
      << lt.status().message();
}

TEST(CublasLtLibrary, LibraryWithoutTheSymbolsIsRefused) {
  auto lt = CublasLt::load("libm.so.6");
  ASSERT_FALSE(lt);
  EXPECT_NE(lt.status().message().find("libm.so.6 lacks cublasLtCreate"), std::string::npos)
      << lt.status().message();
}

// The toolkit's library resolves every entry of the table (calling it needs a GPU).
TEST(CublasLtLibrary, ToolkitLibraryResolvesEveryEntryPoint) {
  auto lt = CublasLt::load(DLM_CUBLASLT_LIBRARY);
  ASSERT_TRUE(lt) << lt.status().message();
  EXPECT_FALSE((*lt)->emulated());
#define DLM_EXPECT_RESOLVED(name) EXPECT_NE((*lt)->name, nullptr) << #name;
  DLM_CUBLASLT_SYMBOLS(DLM_EXPECT_RESOLVED)
#undef DLM_EXPECT_RESOLVED
  EXPECT_STREQ((*lt)->cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
               "CUBLAS_STATUS_NOT_SUPPORTED");
}

TEST(CublasLtLibrary, DefaultLibraryLoadsOrFailsCleanly) {
  auto lt = CublasLt::load();
  if (lt) {
    EXPECT_NE((*lt)->cublasLtMatmul, nullptr);
    return;
  }
  EXPECT_EQ(lt.status().message().rfind("cuBLASLt not available: libcublasLt.so.13: ", 0), 0u)
      << lt.status().message();
}

} // namespace
