// Phase 1 of the ONNX import (as torch-mlir does it): the graph as MLIR, one op per node, nothing
// interpreted yet.
//
//   node        → an op named "onnx.<OpType>" ("onnx.<domain>.<OpType>" outside the default
//                 domain) with the node's attributes, `onnx.opset` (the version the model imports
//                 for that domain) and `onnx.node` (the node name, also the op's location);
//   initializer → `dlm.weight "<name>"` for f32 / f16 / bf16 tensors, created where first used;
//                 other element types (shape constants) → "onnx.Initializer" {onnx.name}. The
//                 bytes stay in the protobuf or the external data file; the IR never holds them;
//   graph input → an argument of func.func @forward (inputs that name an initializer are
//                 weights, as older exporters list them), graph outputs → its results.
//
// Why unregistered ops rather than an ONNX dialect: the op name *is* the ONNX op type, so the
// mechanical form reads like the graph and the raising patterns are keyed by it; a dialect would
// restate hundreds of ONNX operator schemas (and their versions) for IR that only lives inside
// the importer. The price is that MLIR knows nothing about these ops (no verifier, no side-effect
// model), so the context must allow unregistered dialects while they exist, and phase 2 erases
// them itself and refuses a module in which any is left.
#pragma once

#include "importer/onnx/OnnxFile.h"
#include "support/Status.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace dlm::importer::onnx {

inline constexpr llvm::StringLiteral kOpPrefix = "onnx.";
inline constexpr llvm::StringLiteral kOpsetAttr = "onnx.opset";
inline constexpr llvm::StringLiteral kNodeAttr = "onnx.node";
inline constexpr llvm::StringLiteral kNameAttr = "onnx.name";
// The pseudo-ops of the mechanical form that are not ONNX nodes.
inline constexpr llvm::StringLiteral kInitializerOp = "onnx.Initializer";
inline constexpr llvm::StringLiteral kAbsentOp = "onnx.Absent";

// Whether `perm` holds each of 0 .. size - 1 once (a Transpose's perm attribute must).
bool isPermutation(llvm::ArrayRef<int64_t> perm);

// "[1, 0, 2]": how messages print shapes and lists.
std::string listText(llvm::ArrayRef<int64_t> values);

// Constants the import holds as values (inline Constant tensors, initializers read as constants,
// what ShapeFolding writes) are shape-sized; anything larger is a weight and stays out of the IR.
inline constexpr int64_t kMaxShapeElements = 4096;

// The mechanical form of `file`'s graph: a module holding func.func @forward. `context` must
// allow unregistered dialects. Named errors: a node input that is neither computed, a graph input
// nor an initializer ("initializer 'w' referenced by node 'Y' is missing"), nodes out of
// topological order, subgraph attributes (control flow), oversized inline constants, tensors
// with negative or overflowing shapes, a Transpose whose perm is not a permutation of its axes.
StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> translateGraph(mlir::MLIRContext &context,
                                                           OnnxFile &file);

} // namespace dlm::importer::onnx
