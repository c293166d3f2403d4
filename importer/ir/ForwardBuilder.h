// Builds the dlm IR of a model: @forward (the transformer as coarse dlm ops, weights referenced
// by their checkpoint names, never inlined) and the module attributes that describe it.
#pragma once

#include "importer/model/DFlashFamily.h"
#include "importer/model/ModelFamily.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <vector>

namespace dlm::importer {

// `weightTypes[i]` is the element type of `model.weights[i]` (f32, bf16 or f16). `smoothing`:
// also @smooth, @forward over iteration smoothing's input embeddings (a mask token's rows add
// softmax(the caller's logits) @ E); the caller has checked that the model has a mask token and
// no block-diffusion functions of its own.
mlir::OwningOpRef<mlir::ModuleOp> buildForwardModule(mlir::MLIRContext &context,
                                                     const ModelDescription &model,
                                                     const std::vector<mlir::Type> &weightTypes,
                                                     bool smoothing = false);

// A target with a DFlash drafter: @forward also returns the hidden states after the layers the
// drafter reads, and @draft runs the drafter (docs/design/speculative-decoding.md §2.2). `pair`
// is the target's description with the drafter's weights appended (canonical "draft.*").
mlir::OwningOpRef<mlir::ModuleOp> buildSpeculativeModule(mlir::MLIRContext &context,
                                                         const ModelDescription &pair,
                                                         const std::vector<mlir::Type> &weightTypes,
                                                         const DraftDescription &draft);

} // namespace dlm::importer
