// The decode programs dlmc puts into artifacts, one per decoding policy: what the runtime's decode
// interpreter runs (runtime/program/DecodeInterpreter.h). Each policy's builder
// (compiler/programs/policies) writes its program in the generate dialect (SSA form);
// dlm-lower-to-decode-program lowers it into the decode dialect (runtime/schema/DecodeOps.td),
// whose ops are the records; dlmc sets the unroll and serialises them into the artifact
// (docs/design/contracts-from-the-compiler.md).
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlm::programs {

// The policies there is a decode program for: the default ones in dlmc's default order, then
// those embedded only on request (diffusion-gemma).
std::vector<std::string> decodeProgramPolicies();
// The ones dlmc compile embeds without --policy, in its default order.
std::vector<std::string> defaultDecodeProgramPolicies();

// Whether `policy` decodes a causal model left to right over its plain forward (autoregressive,
// introspective-strided, dflash): it needs a causal model, neither @generate nor the device block
// loop's decoding kernels.
bool decodesLeftToRight(std::string_view policy);

// Whether `policy`'s steps decide on the host over the device's forwards, needing none of the
// device block loop's decoding kernels: the left-to-right policies and block-refinement (whose
// editing steps the device loop does not run).
bool decidesOnTheHost(std::string_view policy);

// The program of `policy` as its builder writes it: a generate dialect module with one function,
// named after the policy. An unknown policy's error names the known ones.
StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> generateModule(mlir::MLIRContext &context,
                                                            std::string_view policy);

// The same lowered: a decode dialect module.
StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> decodeModule(mlir::MLIRContext &context,
                                                          std::string_view policy);

// The program of `policy` as artifact records: decodeModule with `unroll` as every denoise loop's
// unroll hint, serialised. Of `knobs` (dlmc's defaults for this artifact), those the program
// declares become its stored knobs. The program is loaded once to check it: an unknown policy (the error names the known
// ones) or a knob value the program rejects fails here, at compile time, not in a request.
StatusOr<artifact::DecodingProgram> buildDecodeProgram(std::string_view policy,
                                                       const artifact::Attributes &knobs,
                                                       int64_t unroll);

} // namespace dlm::programs
