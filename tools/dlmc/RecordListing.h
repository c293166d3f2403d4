// The kernel program as dlmc shows it (dlmc inspect, dlmc compile --emit=kernels): one line per
// record in program order,
//   7  layers.0.q_proj  norm_linear (2) -> 3 @0+128  cuda_kernel=... eps=1e-05 weight=...
// "(operands) -> result @offset+width" are value slots and their place in the per-token-row
// plan; cuda_kernel is the generated kernel the record launches (with --target cuda|all).
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include "llvm/Support/raw_ostream.h"

namespace dlm::dlmc {

void printKernelRecords(llvm::raw_ostream &os, const artifact::KernelTarget &target);

// The decode programs as records (dlmc compile --emit=decode-records): each in the notation of
// runtime/program/DecodeProgram.h, preceded by the knobs dlmc stored for it, the default first.
void printDecodePrograms(llvm::raw_ostream &os,
                         const std::vector<artifact::DecodingProgram> &programs);

// The decode programs as the decode dialect (dlmc compile --emit=decode,
// compiler/programs/DecodeModuleImport.h), one function per program, the default first. An error
// is printed to stderr and returned.
Status printDecodeModules(llvm::raw_ostream &os,
                          const std::vector<artifact::DecodingProgram> &programs);

// The decode programs as their policies' builders write them, in the generate dialect (dlmc
// compile --emit=generate, compiler/programs/DecodePrograms.h), before lowering.
Status printGenerateModules(llvm::raw_ostream &os,
                            const std::vector<artifact::DecodingProgram> &programs);

// One line per program: its name, record count and stored knobs (dlmc inspect).
void printDecodeProgramSummary(llvm::raw_ostream &os,
                               const std::vector<artifact::DecodingProgram> &programs);

} // namespace dlm::dlmc
