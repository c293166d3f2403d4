// The decoding policies whose programs the compiler builds (each in its own file, with
// PolicyBuilder.h) instead of reading them from compiler/programs/decode/*.decode: each writes
// the function @<policy> of the generate dialect into `module`, which
// dlm-lower-to-decode-program lowers into decode records.
#pragma once

#include "mlir/IR/BuiltinOps.h"

namespace dlm::programs {

void buildAutoregressive(mlir::ModuleOp module);
void buildEntropyBound(mlir::ModuleOp module);
void buildLowConfidence(mlir::ModuleOp module);
void buildDiffusionGemma(mlir::ModuleOp module);
void buildDFlash(mlir::ModuleOp module);
void buildIntrospectiveStrided(mlir::ModuleOp module);
void buildBlockRefinement(mlir::ModuleOp module);

} // namespace dlm::programs
