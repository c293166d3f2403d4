// The weights of an artifact as float32 host tensors by name, the form the CPU kernels read and
// the CUDA backend uploads from. f32 weights point straight into the artifact's mapping; bf16
// and f16 weights are converted once, here, into buffers this object owns. Nothing here knows
// what a weight is for: the kernel records name the weights they read and check their shapes
// (runtime/program/KernelProgram.h).
#pragma once

#include "runtime/artifact/ArtifactReader.h"
#include "support/Status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::model {

// A float32 tensor that this object does not own; null data means "absent" (optional weights).
struct HostTensor {
  const float *data = nullptr;
  int64_t rows = 0; // 1 for vectors; d0 * d1 for a rank-3 tensor [d0, d1, d2]
  int64_t cols = 0;

  explicit operator bool() const { return data != nullptr; }
};

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

  int64_t qWidth() const { return heads * headDim; }
  int64_t kvWidth() const { return kvHeads * headDim; }
};

// Reads the dimensions of `config`; errors name the offending field ("num_kv_heads 3 does not
// divide num_heads 4", "not supported yet: rope_style 'gptj'", ...).
StatusOr<ModelDims> modelDims(const artifact::ModelConfig &config);

class ModelWeights {
public:
  // Reads every weight of `reader` (vectors and matrices of f32, bf16 or f16), converting what is
  // not f32. `reader` must outlive the result (f32 tensors point into its mapping). Errors read
  // "artifact '<path>': weight 'x' has dtype i8; the runtime reads f32, bf16 and f16" and the
  // like.
  static StatusOr<std::shared_ptr<const ModelWeights>> load(const artifact::ArtifactReader &reader);

  const ModelDims &dims() const { return dims_; }
  // A weight by name ("layers.0.q"), as kernel records name them; null when the artifact has no
  // such weight.
  const HostTensor *find(std::string_view name) const {
    auto it = byName_.find(name);
    return it == byName_.end() ? nullptr : &it->second;
  }
  // Bytes copied or converted out of the artifact's mapping at load time (every weight's).
  size_t ownedBytes() const { return ownedBytes_; }

private:
  class Loader;
  ModelDims dims_;
  std::map<std::string, HostTensor, std::less<>> byName_;
  std::vector<std::unique_ptr<float[]>> owned_;
  size_t ownedBytes_ = 0;
};

} // namespace dlm::model
