// The compiled forward as every backend runs it: the artifact's kernel records
// (runtime/model/KernelProgram.h) parsed once, every weight resolved to a host tensor (a backend
// keeps its own copy by the tensor's name), every shape, slot and the memory plan checked, so
// that a forward walks the list without a check. Nothing here knows what a layer is: records
// are kernels with operands, results and weights.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/model/KernelParams.h"
#include "runtime/model/KernelProgram.h"
#include "runtime/model/ModelWeights.h"
#include "support/Status.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dlm::program {

// The kinds, declared in runtime/schema/KernelOps.td.
using spec::kernels::KernelKind;

struct ProgramRecord {
  std::string function; // the forward function the record belongs to (kDefaultFunction if unnamed)
  std::string name;     // profile label ("q_proj")
  std::string fullName; // the record's name ("layers.0.q_proj")
  std::string normName; // profile label of a fused norm ("attn_norm", "final_norm")
  int64_t layer = -1;
  std::vector<int64_t> operands;
  int64_t result = -1;
  // The kind's parameters as runtime/schema/KernelOps.td declares them (rope: RopeParams), the
  // defaults applied and every weight resolved to its host tensor.
  spec::kernels::KernelParams params;
  // The generated CUDA kernel this record launches (its entry point name; the GEMM of a
  // linear record is cuBLASLt's); empty when the artifact has no CUDA kernels.
  std::string cudaKernel;
  // What the kind's check derives from the parameters and the shapes:
  // rms_norm: the normalised group of each row (the weight's size; the row, or norm_width, when
  // the norm has no weight).
  int64_t normWidth = 0;
  // moe: each expert's intermediate width (I).
  int64_t expertWidth = 0;
  // norm_linear: the previous record normalised the same input with the same norm (q, k, v), so
  // its normalised rows are still in the scratch.
  bool reusesNorm = false;

  // The record's kind: its parameters' (one declaration, so the two cannot disagree).
  KernelKind kind() const { return static_cast<KernelKind>(params.index()); }
  // The parameters of kind P (the record's kind's).
  template <typename P> const P &as() const { return std::get<P>(params); }

  // The record's `weight`, `bias` and `norm_weight` parameters, whichever its kind declares and
  // the record gives; null otherwise. The projections (linear, norm_linear, lm_head) and the
  // tables read them alike.
  const spec::kernels::WeightRef *weightParameter() const;
  const spec::kernels::WeightRef *biasParameter() const;
  const spec::kernels::WeightRef *normParameter() const;
  // Their host tensors (null when absent).
  const model::HostTensor *weight() const;
  const model::HostTensor *bias() const;
  const model::HostTensor *norm() const;
  // A GEMM of the record's `weight`: linear, norm_linear, lm_head.
  bool projects() const;
  // linear / norm_linear: result = operands[1] + x W^T (+ bias), the residual add the compiler
  // folded into the GEMM's epilogue (planned in place on operands[1] when it can be).
  bool accumulates() const;

  // Every weight the record reads, in declaration order, present ones only (pointers into
  // `params`: valid while the record is neither moved nor changed).
  std::vector<const spec::kernels::WeightRef *> weights() const;
};

// Where a value slot lives: elements [offset * T, (offset + width) * T) of the workspace for T
// tokens. The two inputs (token ids, positions) have offset -1.
struct SlotPlace {
  int64_t offset = -1;
  int64_t width = 0;
};

// One forward function: its records, in order, ending with the lm_head.
struct KernelProgram {
  std::string function; // its name (kDefaultFunction for records without one)
  std::vector<ProgramRecord> kernels;
  std::vector<SlotPlace> slots;
  int64_t rowElements = 0;     // workspace floats per token
  int64_t normRowElements = 0; // norm_linear scratch floats per token
  // The KV width (floats per token of K, and of V) of each KV cache layer, as the layer's
  // kv_store records store it; 0 for a layer without a KV cache. Every function of an artifact
  // agrees. One entry per layer up to the highest any function's kv_store writes (a drafter's
  // layers follow its target's, past the model's layer count).
  std::vector<int64_t> kvLayerWidths;
  // The capture record's row width (operands x width), 0 when the function captures nothing;
  // forwardInputWidth: the forward_input record's width, 0 when it has none.
  int64_t captureWidth = 0;
  int64_t forwardInputWidth = 0;
  // The weights its records read widened to float32 (ModelWeights::widened); a backend decides
  // by this set, not by a weight's `data`, which another program or backend of the same
  // ModelWeights may have widened meanwhile.
  std::set<const model::HostTensor *> widenedWeights;
  // Whether a record reads the forward's input rows (soft_embedding or forward_input).
  bool readsInput() const;

  // The default function of `records` (every function is built and checked; a record list
  // without a default function is an error). Errors name the record: "kernel record 3
  // ('k_proj'): missing weight 'layers.0.k'", "not supported yet: kernel kind 'conv' (kernel
  // record 5 'x')"; indices count in the whole record list.
  // The weights the records read are widened to float32 (ModelWeights::widened), except, with
  // ProjectionWeights::stored, the weight matrices of linear, norm_linear and lm_head records,
  // the tables of embedding and soft_embedding records and the expert stacks (gate_up, down) of
  // moe records: a backend reads those itself (the CPU backend packs them, or decodes or
  // multiplies a table, from their stored form; the CUDA backend widens what it uploads), and
  // their data stays null unless another record widens them.
  enum class ProjectionWeights { widened, stored };
  static StatusOr<KernelProgram> build(const std::vector<artifact::Kernel> &records,
                                       const model::ModelWeights &weights,
                                       ProjectionWeights projections = ProjectionWeights::widened);

  // Every function of `records`, by name: the records grouped by their `function` parameter (in
  // their order), each function a complete program of its own (slots from 2, own memory plan,
  // ending with an lm_head), all of them agreeing on each layer's KV width (every program's
  // kvLayerWidths is the union of all functions').
  static StatusOr<std::map<std::string, KernelProgram>>
  buildFunctions(const std::vector<artifact::Kernel> &records, const model::ModelWeights &weights,
                 ProjectionWeights projections = ProjectionWeights::widened);
};

} // namespace dlm::program
