// Seeded random contents for a model's weights, so that a model of real size can be benchmarked
// where its weights cannot travel: `dlmc compile --random-parameters SEED` records in the artifact
// the hashes of what this generates, and `dlm-params random` writes the parameter file there.
//
// The same (seed, name, dtype, shape) gives the same bytes on every machine (integer arithmetic
// and single IEEE float products only: no library distribution, whose output is
// implementation-defined). A weight of any size costs a memcpy or a hash per byte: its bytes are
// a window into a block of about 1 MiB, generated once per (seed, dtype, role), that starts at an
// offset its name picks (so weights differ) and repeats the block to the end.
//
// Values (RandomParameters.cpp says why these ranges keep activations finite): float matrices
// U[-0.02, 0.02); vectors (norm weights, biases, scalars) U[0.5, 1.5); row scales
// ("<matrix>.scale") U[0.5, 1.5) x 0.02/128, so that an i8 matrix (every byte) or an fp8_e4m3 one
// (|v| < 128, never NaN) times its scales spans about ±0.02 too.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"

#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace dlm::artifact {

// What a weight's values are for, which decides their range.
enum class RandomRole : uint8_t { matrix, vector, rowScale };

// Rank 2 or more: a matrix; a vector or scalar named "<matrix>.scale": its row scales; any other:
// a vector.
RandomRole randomRole(std::string_view name, ShapeView shape);

// Whether the generator makes weights of `dtype`: f32, bf16, f16, fp8_e4m3 and i8, the dtypes the
// runtime reads.
bool isRandomDType(DType dtype);

// Not thread-safe: blocks are generated on first use and kept.
class RandomParameters {
public:
  explicit RandomParameters(uint64_t seed) : seed_(seed) {}

  uint64_t seed() const { return seed_; }

  // A piece of a weight's bytes, valid during the call.
  using Consumer = std::function<Status(const uint8_t *data, size_t size)>;

  // Hands the weight's bytes to `consume` in consecutive pieces (of at most about 1 MiB), stopping
  // at its first error. Errors name the weight: a dtype the generator does not make, a shape
  // whose size is negative or past 2^64.
  Status generate(std::string_view name, DType dtype, ShapeView shape, const Consumer &consume);
  // The weight's bytes into `out`, which holds `size` bytes: exactly the weight's byte size.
  Status fill(std::string_view name, DType dtype, ShapeView shape, uint8_t *out, uint64_t size);
  // XXH3-64 of the weight's bytes (the content hash an artifact records), computed as they are
  // generated: nothing of the weight's size is held.
  StatusOr<uint64_t> contentHash(std::string_view name, DType dtype, ShapeView shape);

private:
  StatusOr<const std::vector<uint8_t> *> block(std::string_view name, DType dtype,
                                               RandomRole role);

  uint64_t seed_;
  std::map<std::pair<DType, RandomRole>, std::vector<uint8_t>> blocks_;
};

} // namespace dlm::artifact
