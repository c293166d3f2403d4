// The contents of a dlm artifact as plain C++ values, shared by the writer (dlmc fills them in)
// and the reader (the runtime gets them back). Large blobs (tokenizer, MLIR text, cubins, weights)
// are views: the writer reads them from the caller's memory, the reader points them into its
// mapping of the file. The wire format is runtime/schema/artifact.fbs.
#pragma once

#include "runtime/schema/artifact_generated.h"
#include "support/Status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace dlm::artifact {

using DType = fb::DType;
using AttentionMaskKind = fb::AttentionMaskKind;

// The schema version this code writes; the reader accepts kSchemaMajor.x.
inline constexpr uint16_t kSchemaMajor = 1;
// 1.1: Kernel.source (the CUDA C++ of a GPU kernel).
// 1.2: decode programs (Artifact.decode_programs, DecodingProgram.ops).
// 1.3: the chat template and the special-token variables (Tokenizer.chat_template,
//      Tokenizer.special_tokens).
// 1.4: integrity hashes (Weight.content_hash, Artifact.metadata_hash).
// 1.5: weights in a separate parameter file (Artifact.parameters; runtime/schema/parameters.fbs).
// 1.6: generated weights (ExternalParameters.random_seed: dlmc compile --random-parameters).
// 1.7: the CUDA kernels' launch arguments of this dlmc (soft_embedding reads the tokens, a mask
//      token and a run-time scale); the CUDA backend refuses the kernels of an older artifact.
// 1.8: the moe route kernel's launch arguments (the expert bias and the routed scale).
inline constexpr uint16_t kSchemaMinor = 8;
inline constexpr uint16_t kFirstMinorWithHashes = 4;
inline constexpr uint16_t kFirstMinorWithCurrentKernelArguments = 8;
// Weight section start and every weight within it are aligned to this (cache line, AVX-512 and
// the widest vectorised GPU loads).
inline constexpr uint64_t kWeightAlignment = 64;
// The random_seed of a file whose weights are a checkpoint's, not generated (schema 1.6).
inline constexpr int64_t kNoRandomSeed = -1;
// The suffix of an i8 or fp8_e4m3 matrix's per-row scales, a vector beside it:
// "layers.0.q" -> "layers.0.q.scale" (dlmc writes them, runtime/model/ModelWeights.h reads them,
// RandomParameters.h generates them at the scale their matrix needs). An i4 matrix [N, K] (or
// stack [E, N, K]) has group scales under the same suffix: f16 [N, K / G] ([E, N, K / G]),
// one per G consecutive inputs of a row, G the group size (a divisor of K).
inline constexpr std::string_view kRowScaleSuffix = ".scale";

struct SchemaVersion {
  uint16_t major = 0;
  uint16_t minor = 0;
};

// Bytes per element; 0 for DType::invalid, DType::i4 (half a byte: storageBytes) and values this
// build does not know.
size_t dtypeSize(DType dtype);
// The bytes `elements` elements of `dtype` take (i4: two a byte, rounded up); 0 for unknown types.
uint64_t storageBytes(DType dtype, uint64_t elements);
// "f32", "bf16", ...; "unknown" for values this build does not know.
const char *dtypeName(DType dtype);

// A value of an open-ended key/value list. Construct integers as int64_t and reals as double:
// a plain `1` is ambiguous between bool, int64_t and double.
using AttributeValue = std::variant<bool, int64_t, double, std::string>;
// Sorted by key, so a writer produces the same bytes for the same contents.
using Attributes = std::map<std::string, AttributeValue, std::less<>>;

// A value as a person reads it: true / false, the integer, the real in %g form, the text as is.
std::string attributeValueText(const AttributeValue &value);

struct ModelConfig {
  std::string architecture;
  int64_t vocabSize = 0;
  int64_t embeddingSize = 0;
  int64_t hiddenSize = 0;
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  int64_t intermediateSize = 0;
  double ropeTheta = 0;
  double rmsNormEps = 0;
  // -1: the model has no such token.
  int64_t maskTokenId = -1;
  int64_t bosTokenId = -1;
  std::vector<int64_t> eosTokenIds;
  int64_t padTokenId = -1;
  int64_t maxPositions = 0;
  bool tiedEmbeddings = false;
  AttentionMaskKind attentionMask = AttentionMaskKind::unspecified;
  // config.json fields without a slot above (sliding window size, MoE expert counts, ...).
  Attributes extra;

  bool operator==(const ModelConfig &other) const;
  bool operator!=(const ModelConfig &other) const { return !(*this == other); }
};

// One record of a decode program (runtime/schema/DecodeOps.td is the contract).
struct DecodeOp {
  std::string kind;
  // A loop's profile label, the knob a `knob` record declares; may be empty.
  std::string name;
  Attributes parameters;

  bool operator==(const DecodeOp &other) const {
    return kind == other.kind && name == other.name && parameters == other.parameters;
  }
  bool operator!=(const DecodeOp &other) const { return !(*this == other); }
};

struct DecodingProgram {
  // The policy dlmc was given (--policy), e.g. "entropy_bound" or "llada_threshold".
  std::string policy;
  // Defaults for run-time knobs: gen_length, block_length, steps, threshold, temperature, ...
  Attributes knobs;
  // The @generate program as textual dlm IR.
  std::string_view mlir;
  // The records the decode interpreter runs (schema 1.2; empty in older artifacts).
  std::vector<DecodeOp> ops;
};

// Binary bytes that live elsewhere (the caller's memory when writing, the mapping when reading).
struct ByteView {
  const uint8_t *data = nullptr;
  size_t size = 0;

  bool empty() const { return size == 0; }
  const uint8_t *begin() const { return data; }
  const uint8_t *end() const { return data + size; }
};

struct KernelResources {
  uint32_t registers = 0;
  uint32_t spillStoreBytes = 0;
  uint32_t spillLoadBytes = 0;
  uint32_t stackBytes = 0;
  uint32_t sharedMemoryBytes = 0;

  bool operator==(const KernelResources &other) const;
  bool operator!=(const KernelResources &other) const { return !(*this == other); }
};

// A GPU kernel (cubin and/or PTX plus what ptxas reported) or a CPU kernel record (kind plus
// parameters; no code).
struct Kernel {
  std::string name;
  std::string kind;
  ByteView cubin;
  std::string_view ptx;
  KernelResources resources;
  Attributes parameters;
  // The CUDA C++ the cubin was compiled from; empty for CPU records and artifacts before 1.1.
  std::string_view source;
};

struct KernelTarget {
  // "sm_80", "sm_90", "cpu", ...
  std::string target;
  std::vector<Kernel> kernels;
};

// A tensor's shape without owning it (in the reader it points into the mapped file).
class ShapeView {
public:
  ShapeView() = default;
  ShapeView(const int64_t *dims, size_t rank) : dims_(dims), rank_(rank) {}
  explicit ShapeView(const std::vector<int64_t> &dims) : dims_(dims.data()), rank_(dims.size()) {}

  size_t rank() const { return rank_; }
  const int64_t *begin() const { return dims_; }
  const int64_t *end() const { return dims_ + rank_; }
  int64_t operator[](size_t i) const { return dims_[i]; }
  std::vector<int64_t> toVector() const { return std::vector<int64_t>(begin(), end()); }
  // "[2, 3]"
  std::string toString() const;

private:
  const int64_t *dims_ = nullptr;
  size_t rank_ = 0;
};

// The byte size of a `shape` tensor of `dtype`; errors (naming `weight`): an unknown dtype, a
// negative dimension, a size past 2^64.
StatusOr<uint64_t> weightByteSize(std::string_view weight, DType dtype, ShapeView shape);

// "'name'": a weight's or file's name as the errors quote it.
std::string quotedName(std::string_view name);
// "bf16 [64, 64]": a tensor's dtype and shape as the errors print them.
std::string tensorDescription(DType dtype, ShapeView shape);

// Checks that `byteSize` is exactly the size of a `shape` tensor of `dtype` (weightByteSize's
// errors, and a size that differs). The message names `weight`.
Status checkWeightByteSize(std::string_view weight, DType dtype, ShapeView shape,
                           uint64_t byteSize);

} // namespace dlm::artifact
