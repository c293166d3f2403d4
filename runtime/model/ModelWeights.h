// The weights of an artifact by name: each as the artifact stores it (f32, bf16 or f16, a view of
// the mapping) and, once asked for, widened to a float32 host tensor, the form most CPU kernels
// read and the CUDA backend uploads from. Vectors are widened at load; a matrix only when a
// kernel asks (ModelWeights::widened), so that a weight a backend packs itself into its own
// layout (runtime/cpu/PackedLinear.h) is never resident twice. Forms derived from a stored
// weight (packed layouts) are cached here, one per model, shared by every backend and session.
// Nothing here knows what a weight is for: the kernel records name the weights they read and
// check their shapes (runtime/program/KernelProgram.h).
#pragma once

#include "runtime/artifact/ArtifactReader.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::model {

// A float32 tensor that this object does not own. A matrix's data is null until it is widened
// (ModelWeights::widened).
struct HostTensor {
  const float *data = nullptr;
  int64_t rows = 0; // 1 for vectors; d0 * d1 for a rank-3 tensor [d0, d1, d2]
  int64_t cols = 0;
};

// A weight as the artifact stores it: `rows` x `cols` values of `dtype` (f32, bf16, f16, i8,
// fp8_e4m3 or i4), row-major, in the artifact's mapping (a stack [E, N, K] as E * N rows of K).
// Read it only through ModelWeights::readStored, which turns a file truncated meanwhile into an
// error.
//
// An i8 or fp8_e4m3 matrix W (or stack of them) has one scale per row (output channel, of every
// expert): its values are W[r, c] * S[r], where S is the vector of `rows` the artifact stores as
// "<W's name>.scale" (dlmc compile --weights int8 writes both; an FP8 compressed-tensors
// checkpoint imports as both). An i4 matrix (dlmc compile --weights int4: signed 4-bit values,
// two a byte, element 2i in the low nibble of byte i) has one scale per `groupSize` consecutive
// values of a row (a divisor of cols): W[r, c] * G[r, c / groupSize], G the f16 matrix
// [rows, groups()] stored under the same name.
struct StoredTensor {
  artifact::DType dtype = artifact::DType::invalid;
  const void *data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  const float *rowScales = nullptr;      // i8, fp8_e4m3: S, widened
  const uint16_t *groupScales = nullptr; // i4: G as f16 bits, in the artifact's mapping
  int64_t groupSize = 0;                 // i4

  int64_t groups() const { return groupSize > 0 ? cols / groupSize : 0; }
};

// The value of signed 4-bit element i of packed bytes (two a byte, element 2i in the low nibble).
inline int int4Value(const uint8_t *packed, size_t i) {
  const int nibble = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
  return nibble >= 8 ? nibble - 16 : nibble;
}

// The suffix of an i8 matrix's per-row scales: "layers.0.q" -> "layers.0.q.scale" (part of the
// artifact's format, which defines it).
inline constexpr std::string_view kRowScaleSuffix = artifact::kRowScaleSuffix;

// Element i of `tensor` as float32 (bf16, f16 and fp8_e4m3 widen exactly; i8 and fp8_e4m3 are
// scaled by their row's scale, i4 by its group's).
float storedValue(const StoredTensor &tensor, size_t i);
// Elements [first, first + count) of `tensor` as float32 into `out`.
void widenStored(const StoredTensor &tensor, size_t first, size_t count, float *out);

// The sizes the forward pass needs, taken from ModelConfig and checked for consistency.
struct ModelDims {
  int64_t vocabSize = 0;     // logits width
  int64_t embeddingSize = 0; // embedding rows (>= vocabSize; extra rows are padding)
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;
  int64_t headDim = 0;
  int64_t intermediate = 0;
  double ropeTheta = 0;
  double rmsNormEps = 0;
  bool causal = false;     // attention mask: causal (Qwen3, Llama) or bidirectional
  bool logitShift = false; // Dream
  int64_t attentionBlock = 0; // block_causal: the block its attention goes by (LLaDA2)

  int64_t qWidth() const { return heads * headDim; }
  int64_t kvWidth() const { return kvHeads * headDim; }
};

// Reads the dimensions of `config`; errors name the offending field ("num_kv_heads 3 does not
// divide num_heads 4", "not supported yet: rope_style 'gptj'", ...).
StatusOr<ModelDims> modelDims(const artifact::ModelConfig &config);

class ModelWeights {
public:
  // Checks every weight of `reader` (vectors, matrices and stacks of f32, bf16 or f16; matrices
  // and stacks of i8 or fp8_e4m3 with their row scales, of i4 with their group scales) and widens
  // the vectors. `reader` must
  // outlive the result (stored tensors are views of its mapping). Errors read "artifact '<path>':
  // weight 'x' has dtype i32; the runtime reads f32, bf16 and f16, ..." and the like.
  static StatusOr<std::shared_ptr<const ModelWeights>> load(const artifact::ArtifactReader &reader);

  const ModelDims &dims() const { return dims_; }
  // A weight by name ("layers.0.q"), as kernel records name them; null when the artifact has no
  // such weight. Its data is null while it is a matrix nobody has widened.
  const HostTensor *find(std::string_view name) const {
    auto it = byName_.find(name);
    return it == byName_.end() ? nullptr : &it->second.host;
  }
  // The same weight widened to float32, once (thread-safe); later calls return the same tensor.
  StatusOr<const HostTensor *> widened(std::string_view name) const;
  // The weight as stored; null when there is no such weight.
  const StoredTensor *stored(std::string_view name) const {
    auto it = byName_.find(name);
    return it == byName_.end() ? nullptr : &it->second.stored;
  }
  // Runs `read` (which reads stored tensors) under the artifact's guard: a file truncated by
  // another program fails it by name instead of faulting.
  Status readStored(const std::function<void()> &read) const;

  // A form derived from weight `name` (a packed layout), made by `make` the first time a `kind`
  // of it is asked for and shared after that (thread-safe). `make` reads the stored tensor
  // through readStored.
  template <typename Form>
  StatusOr<std::shared_ptr<const Form>>
  derived(std::string_view name, std::string_view kind,
          const std::function<StatusOr<std::shared_ptr<const Form>>(const StoredTensor &)> &make)
      const {
    StatusOr<std::shared_ptr<const void>> form = derivedForm(
        name, kind, [&](const StoredTensor &stored) -> StatusOr<std::shared_ptr<const void>> {
          StatusOr<std::shared_ptr<const Form>> made = make(stored);
          if (!made)
            return made.status();
          return std::shared_ptr<const void>(*made);
        });
    if (!form)
      return form.status();
    return std::static_pointer_cast<const Form>(*form);
  }

  // Bytes held outside the artifact's mapping: widened tensors (every vector, and the matrices
  // asked for), not the derived forms (their owners count those).
  size_t ownedBytes() const;

private:
  using Maker = std::function<StatusOr<std::shared_ptr<const void>>(const StoredTensor &)>;
  StatusOr<std::shared_ptr<const void>> derivedForm(std::string_view name, std::string_view kind,
                                                    const Maker &make) const;
  Status widen(std::string_view name, HostTensor &host, const StoredTensor &stored) const;
  // Points every i8 and fp8_e4m3 matrix at its row scales (widened vectors) and every i4 one at
  // its group scales, or names the one without.
  Status attachScales();
  Status attachGroupScales(const std::string &name, StoredTensor &stored);

  struct Entry {
    HostTensor host;
    StoredTensor stored;
  };
  const artifact::ArtifactReader *reader_ = nullptr;
  ModelDims dims_;
  std::map<std::string, Entry, std::less<>> byName_;
  // Guards the widened data, owned_ and derived_ after load.
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<float[]>> owned_;
  mutable size_t ownedBytes_ = 0;
  mutable std::map<std::string, std::shared_ptr<const void>, std::less<>> derived_;
};

} // namespace dlm::model
