// The compile pipeline's last steps on the model forward: weight names made canonical, and the
// kernel program that dlm-lower-to-kernel-program attached to @forward turned into the
// artifact's kernel records (the format is runtime/model/KernelProgram.h).
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <string>

namespace dlm::pipeline {

// Renames every dlm.weight from its checkpoint name to its canonical name (the artifact's), so
// the program and its kernel records name weights as the artifact stores them. Names missing from
// the map stay as they are.
void renameWeightsToCanonical(mlir::ModuleOp module,
                              const std::map<std::string, std::string> &canonicalByCheckpoint);

// The kernel program's KernelTarget: one Kernel per entry of @forward's dlm.kernel_program, in
// order.
StatusOr<artifact::KernelTarget> kernelProgramTarget(mlir::ModuleOp module);

} // namespace dlm::pipeline
