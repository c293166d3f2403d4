// A `decode` dialect function as decode records (runtime/schema/DecodeOps.td), the inverse of
// DecodeModuleImport.h: one record per op in order, a structured op's regions flattened with
// `else`/`end`; a register operand is `%name` (its decode.register), a knob `$name`, a fact
// `@name`, a decode.constant its literal. What an artifact stores is this serialisation of the
// dialect.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "support/Status.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <vector>

namespace dlm::programs {

// The records of `function`, checked only for what serialising needs (every operand's source is
// a register, knob, fact or constant); DecodeProgram::load checks the records themselves.
StatusOr<std::vector<artifact::DecodeOp>> exportDecodeRecords(mlir::func::FuncOp function);

} // namespace dlm::programs
