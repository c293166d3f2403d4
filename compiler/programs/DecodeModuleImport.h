// Decode records as a `decode` dialect function (runtime/schema/DecodeOps.td): one op per record,
// in order; every register a `decode.register` of the type the loader inferred for it, every
// knob the `decode.knob` that declares it, every fact a `decode.fact`, every literal a
// `decode.constant`; the bodies of block_loop, denoise_loop and if as their regions. It shows an
// artifact's programs as MLIR and proves that the dialect holds every program that ships.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string_view>
#include <vector>

namespace dlm::programs {

// `records` must load (program::DecodeProgram::load); the function is named after `policy`.
StatusOr<mlir::OwningOpRef<mlir::ModuleOp>>
importDecodeRecords(mlir::MLIRContext &context, std::string_view policy,
                    const std::vector<artifact::DecodeOp> &records);

} // namespace dlm::programs
