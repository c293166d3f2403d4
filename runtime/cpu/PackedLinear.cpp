#include "runtime/cpu/PackedLinear.h"

#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <new>
#include <vector>

namespace dlm::cpu {

namespace {

// Rows of W widened per pass: a [64, K] block stays in L2 while its columns are written out as
// 64-float runs of W^T's rows.
constexpr int64_t kRowBlock = 64;

// W^T of `stored` into `out` ([cols, rows]).
void transposeWidened(const model::StoredTensor &stored, float *out) {
  const int64_t rows = stored.rows, cols = stored.cols;
  std::vector<float> block(static_cast<size_t>(kRowBlock * cols));
  for (int64_t first = 0; first < rows; first += kRowBlock) {
    const int64_t count = std::min(kRowBlock, rows - first);
    model::widenStored(stored, static_cast<size_t>(first * cols), static_cast<size_t>(count * cols),
                       block.data());
    for (int64_t k = 0; k < cols; ++k) {
      float *row = out + k * rows + first;
      for (int64_t n = 0; n < count; ++n)
        row[n] = block[static_cast<size_t>(n * cols + k)];
    }
  }
}

} // namespace

StatusOr<std::shared_ptr<const PackedLinear>> PackedLinear::of(const model::ModelWeights &weights,
                                                               std::string_view name) {
  return weights.derived<PackedLinear>(
      name, "cpu-packed-f32",
      [&](const model::StoredTensor &stored) -> StatusOr<std::shared_ptr<const PackedLinear>> {
        auto packed = std::make_shared<PackedLinear>();
        packed->outputs_ = stored.rows;
        packed->inputs_ = stored.cols;
        const size_t bytes = packed->bytes();
        // aligned_alloc wants a multiple of the alignment.
        float *data = static_cast<float *>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
        if (!data)
          return Status::error("out of memory packing " + std::to_string(bytes) + " bytes");
        packed->transposed_.reset(data);
        DLM_RETURN_IF_ERROR(weights.readStored([&] { transposeWidened(stored, data); }));
        return std::shared_ptr<const PackedLinear>(std::move(packed));
      });
}

Status PackedLinear::run(const float *x, int64_t rows, int64_t outputs, const float *bias, float *y,
                         ThreadPool &pool, bool accumulate) const {
  return linearTransposed(x, rows, transposed_.get(), inputs_, outputs_, outputs, bias, y, pool,
                          accumulate);
}

} // namespace dlm::cpu
