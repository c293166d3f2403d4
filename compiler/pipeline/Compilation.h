// A checkpoint compiled into an artifact, stage by stage: import (safetensors directory or ONNX)
// into dlm IR, @generate built for the decoding policy, the compile pipeline
// (CompilePipeline.h), the kernel program as records, and with --target cuda|all the CUDA
// kernels the records name plus the policy's, compiled by NVRTC. dlmc only parses flags and
// reports what this produced (its --emit stages read the parts below).
#pragma once

#include "compiler/codegen/KernelSource.h"
#include "compiler/programs/DecodingProgram.h"
#include "importer/model/Checkpoint.h"
#include "importer/model/DFlashFamily.h"
#include "importer/onnx/OnnxImport.h"
#include "runtime/artifact/ArtifactWriter.h"
#include "support/Status.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dlm::pipeline {

struct CompileOptions {
  std::string checkpoint;
  std::string target = "cpu"; // "cpu" (the kernel program), "cuda" or "all" (+ CUDA kernels)
  // --weights: the projection weights' storage precision, "f32", "bf16", "int8", "fp8" or "int4"
  // (WeightPrecision.h); empty: as the checkpoint stores them. The CUDA device precision follows
  // a float one (else: f32 for an all-f32 checkpoint, else bf16).
  std::string weights;
  // --weight-group-size: the inputs of an output channel one int4 scale covers.
  int64_t weightGroupSize = 32;
  // --quantize-embeddings: the embedding tables and the LM head take --weights' precision too.
  bool quantizeEmbeddings = false;
  // --activations bf16: the CPU backend rounds the activations of bf16-stored projections to
  // bf16 and multiplies in bf16 where the CPU has bf16 arithmetic (config extra
  // cpu_activations); "f32" or empty: float32 activations.
  std::string activations;
  // The decode programs the artifact carries, comma-separated; the first is the default (and the
  // one @generate and the CUDA decoding kernels are built for). Empty: the architecture's
  // default set (defaultPolicies).
  std::string policy;
  // A DFlash drafter checkpoint directory to compile beside the target (empty: none).
  std::string draft;
  int64_t genLength = 64;
  int64_t blockLength = 32;
  // Take the block size config.json states for a block-causal model instead of blockLength (dlmc
  // without --block-length); blockLength when it states none.
  bool blockLengthFromCheckpoint = false;
  int64_t steps = 64;
  double threshold = 0.0;
  int64_t stepCap = 0; // threshold only; 0: none
  double temperature = 0.0;
  int64_t unroll = 4;
  // --knob name=value: the default of any knob a decode program declares (text as written; a
  // number or true/false is typed as such and checked against the knob's declaration).
  std::vector<std::pair<std::string, std::string>> knobs;
  // --smoothing: also compile the forward function `smooth` that the low-confidence program's
  // iteration smoothing runs (knob smoothing > 0). Off by default: its input rows take
  // [tokens, vocabulary] floats of workspace.
  bool smoothing = false;
};

// The policies of `options.policy`, in order; empty when it is empty.
std::vector<std::string> policyList(const CompileOptions &options);

// The decode programs a model gets when --policy is not given: the ones its architecture names
// (DiffusionGemma's own sampler, block-refinement for a block-causal model, I-DLM's),
// autoregressive for a causal model without a mask token, else "low-confidence,entropy-bound".
std::string defaultPolicies(const importer::ModelDescription &model);

// Named errors for options no compile can honour ("unknown --target tpu (expected cpu, cuda or
// all)", "--unroll must be at least 1", ...); the block geometry is checked once the policies are
// known.
Status validateOptions(const CompileOptions &options);

// The checkpoint's @forward (and with `smoothing` @smooth) as verified, canonicalized dlm IR
// (dlmc import).
mlir::OwningOpRef<mlir::ModuleOp> importForward(mlir::MLIRContext &context,
                                                const importer::ImportedCheckpoint &checkpoint,
                                                bool smoothing = false);

class Compilation {
public:
  // Runs every stage. Errors name the stage; pass failures have printed their diagnostics.
  static StatusOr<std::unique_ptr<Compilation>> run(const CompileOptions &options);

  // The module after the pipeline (@forward with its kernel program, @generate unrolled).
  mlir::ModuleOp module() { return *module_; }
  // What the artifact holds; its weights point into the mapped checkpoint, which lives as long
  // as this.
  const artifact::ArtifactContents &contents() const { return contents_; }
  // The generated CUDA kernels (--target cuda|all), in the artifact's order.
  const std::vector<codegen::KernelSource> &cudaKernels() const { return cudaKernels_; }
  // What --weights did, one line ("weights: bf16 (84 projection matrices, ...)").
  const std::string &weightReport() const { return weightReport_; }
  // What the importer recognised beyond the plain form (an ONNX export's batch dimension, RoPE
  // tables computed in the graph, ...), one entry each; empty for a plain checkpoint.
  const std::vector<std::string> &importReport() const { return checkpoint_->recognised; }

  ~Compilation();

private:
  Compilation();
  Status compile(const CompileOptions &options);
  Status generateCudaKernels(const CompileOptions &options, artifact::KernelTarget &program);
  Status resolvePolicies(const CompileOptions &options);
  Status importDraft(const CompileOptions &options);
  // --smoothing's requirements: a safetensors checkpoint of a model with a mask token, no drafter
  // and no forward functions of its own.
  Status checkSmoothing(const CompileOptions &options) const;
  void setProgramKnobs(const CompileOptions &options, const programs::DecodingPolicy &policy);

  mlir::MLIRContext context_;
  importer::onnx::OnnxModel onnx_; // owns what an imported model.onnx's views point into
  std::unique_ptr<importer::ImportedCheckpoint> checkpoint_;
  // --draft: the drafter, its weights appended to the target's description.
  std::unique_ptr<importer::ImportedDraft> draft_;
  mlir::OwningOpRef<mlir::ModuleOp> module_;
  // The module's text, which contents_.program.mlir views.
  std::string programText_;
  // The decode programs' policies, the default first (--policy, or the model's default set).
  std::vector<std::string> policies_;
  artifact::ArtifactContents contents_;
  std::vector<codegen::KernelSource> cudaKernels_;
  // Weights converted by --weights (contents_.weights point into them), and what was done.
  std::vector<std::vector<uint8_t>> convertedWeights_;
  std::string weightReport_;
  // Owns the compiled images the artifact's CUDA kernel records view.
  std::shared_ptr<void> kernelTable_;
};

} // namespace dlm::pipeline
