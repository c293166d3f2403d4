// The batch-invariant GEMM (runtime/cpu/InvariantGemm.h, docs/design/serving.md §3): a row's
// result is bit-identical whatever else is in the call, where the row sits, and how many threads
// run; and it is the product (against a double computation).
#include "runtime/cpu/InvariantGemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace dlm::cpu {
namespace {

struct Problem {
  int64_t n, k;
  std::vector<float> w, x;
  Problem(int64_t n, int64_t k, int64_t rows) : n(n), k(k), w(n * k), x(rows * k) {
    std::mt19937 generator(static_cast<uint32_t>(n * 31 + k));
    std::normal_distribution<float> normal;
    for (float &v : w)
      v = normal(generator);
    for (float &v : x)
      v = normal(generator);
  }
  model::HostTensor weight() const { return {w.data(), n, k}; }
};

std::vector<float> multiply(const InvariantGemm &gemm, const std::vector<float> &x, int64_t rows,
                            ThreadPool &pool) {
  std::vector<float> y(static_cast<size_t>(rows * gemm.outputs()), -1.0f);
  gemm.run(x.data(), rows, y.data(), false, pool);
  return y;
}

// Every row of calls of many sizes against the same row alone. The sizes cover every tile shape:
// full tiles, each tail of 1..5 rows (whose tiles take several panels at once, with leftover
// panels), several row blocks (K = 1536 gives blocks of a few tiles), thread splits by panels and
// by blocks, and the single-thread path of small products.
TEST(InvariantGemm, RowsDoNotDependOnTheBatchTheirPositionOrTheThreads) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{37, 19}, {64, 64}, {117, 200}, {80, 1536},
                      {945, 512}}) {
    constexpr int64_t kMostRows = 101;
    Problem p(n, k, kMostRows);
    const InvariantGemm gemm(p.weight());
    ThreadPool one(1), two(2), three(3);
    std::vector<float> alone(static_cast<size_t>(kMostRows * n));
    for (int64_t r = 0; r < kMostRows; ++r) {
      const std::vector<float> y =
          multiply(gemm, std::vector<float>(p.x.begin() + r * k, p.x.begin() + (r + 1) * k), 1,
                   one);
      std::copy(y.begin(), y.end(), alone.begin() + r * n);
    }
    std::vector<int64_t> sizes;
    for (int64_t rows = 2; rows <= 20; ++rows)
      sizes.push_back(rows);
    for (int64_t rows : {25, 31, 47, 60, 64, 97, 101})
      sizes.push_back(rows);
    for (int64_t rows : sizes)
      for (int64_t first : {int64_t(0), kMostRows - rows}) // the rows x[first, first + rows)
        for (ThreadPool *pool : {&one, &two, &three}) {
          const std::vector<float> batch(p.x.begin() + first * k,
                                         p.x.begin() + (first + rows) * k);
          const std::vector<float> y = multiply(gemm, batch, rows, *pool);
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(std::memcmp(y.data() + r * n, alone.data() + (first + r) * n,
                                  n * sizeof(float)),
                      0)
                << n << "x" << k << ", " << rows << " rows from " << first << ", position " << r
                << ", " << pool->threads() << " threads";
        }
  }
}

// The 512-bit tiles (AVX-512F CPUs) give every row the bits of the 256-bit ones: each lane is the
// same chain of fused multiply-adds.
TEST(InvariantGemm, WideTilesGiveTheNarrowTilesBits) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{37, 19}, {64, 128}, {945, 128}, {80, 1536}}) {
    Problem p(n, k, 101);
    const InvariantGemm wide(p.weight()), narrow(p.weight(), -1, /*allowWideTiles=*/false);
    if (!wide.wideTiles())
      GTEST_SKIP() << "this CPU has no AVX-512F: the 512-bit tiles do not run";
    ThreadPool two(2);
    for (int64_t rows : {1, 2, 5, 6, 7, 13, 48, 101}) {
      const std::vector<float> x(p.x.begin(), p.x.begin() + rows * k);
      for (bool accumulate : {false, true}) {
        std::vector<float> a(static_cast<size_t>(rows * n), 0.5f), b = a;
        wide.run(x.data(), rows, a.data(), accumulate, two);
        narrow.run(x.data(), rows, b.data(), accumulate, two);
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
            << n << "x" << k << ", " << rows << " rows, accumulate " << accumulate;
      }
    }
  }
}

// Against a double computation, within the float rounding bound of a K-term sum:
// |error| <= K * 2^-24 * sum |x w| (each of the K roundings at most half an ulp of a partial sum).
TEST(InvariantGemm, AgreesWithADoubleReference) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{37, 19}, {117, 200}, {80, 1536}}) {
    constexpr int64_t kRows = 29;
    Problem p(n, k, kRows);
    const InvariantGemm gemm(p.weight());
    ThreadPool pool(2);
    const std::vector<float> y = multiply(gemm, p.x, kRows, pool);
    for (int64_t m = 0; m < kRows; ++m)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0, magnitude = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double product = static_cast<double>(p.x[m * k + i]) * p.w[j * k + i];
          want += product;
          magnitude += std::abs(product);
        }
        ASSERT_NEAR(y[m * n + j], want, k * 0x1p-24 * magnitude + 1e-30)
            << n << "x" << k << ", " << m << ", " << j;
      }
  }
}

TEST(InvariantGemm, ComputesTheProductAndAccumulates) {
  Problem p(45, 70, 6);
  const InvariantGemm gemm(p.weight(), 40); // the first 40 outputs, as the LM head skips padding
  ThreadPool pool(2);
  std::vector<float> y(6 * 40, 0.5f);
  gemm.run(p.x.data(), 6, y.data(), true, pool);
  for (int64_t m = 0; m < 6; ++m)
    for (int64_t j = 0; j < 40; ++j) {
      double want = 0.5;
      for (int64_t i = 0; i < 70; ++i)
        want += static_cast<double>(p.x[m * 70 + i]) * p.w[j * 70 + i];
      ASSERT_NEAR(y[m * 40 + j], want, 1e-4 * (1 + std::abs(want))) << m << ", " << j;
    }
}

} // namespace
} // namespace dlm::cpu
