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

TEST(InvariantGemm, RowsDoNotDependOnTheBatchTheirPositionOrTheThreads) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{37, 19}, {64, 64}, {512, 1536}, {945, 512}}) {
    Problem p(n, k, 40);
    const InvariantGemm gemm(p.weight());
    ThreadPool one(1), two(2);
    // Row 0 of x alone is the reference.
    const std::vector<float> alone =
        multiply(gemm, std::vector<float>(p.x.begin(), p.x.begin() + k), 1, one);
    for (int64_t rows : {2, 3, 5, 7, 8, 9, 16, 33, 40})
      for (int64_t position : {int64_t(0), rows / 2, rows - 1}) {
        // x's row 0 at `position` among other rows.
        std::vector<float> batch(p.x.begin() + k, p.x.begin() + (rows + 1) * k);
        std::copy(p.x.begin(), p.x.begin() + k, batch.begin() + position * k);
        for (ThreadPool *pool : {&one, &two}) {
          const std::vector<float> y = multiply(gemm, batch, rows, *pool);
          ASSERT_EQ(std::memcmp(y.data() + position * n, alone.data(), n * sizeof(float)), 0)
              << n << "x" << k << ", " << rows << " rows, position " << position << ", "
              << pool->threads() << " threads";
        }
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
