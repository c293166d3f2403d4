// The mechanical form evaluated at one concrete sequence length (batch 1): the shape and element
// type of every value, and the contents of every value that does not depend on the tokens —
// the shape bookkeeping exporters emit (Shape, Gather, Concat, Range, ConstantOfShape, ...), and
// what they compute from it (RoPE tables from positions, causal masks). ShapeFolding.cpp runs it
// at two lengths to tell the length's dimensions from the static ones and to classify what the
// bookkeeping computes.
#pragma once

#include "importer/onnx/OnnxFile.h"
#include "support/Status.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <optional>
#include <unordered_map>
#include <vector>

namespace dlm::importer::onnx {

struct EvaluatedValue {
  std::vector<int64_t> shape;
  mlir::Type element; // f32, i64, i1, ...; f32 where nothing says (activations)
  // Row-major contents, integers and booleans included (exact below 2^53; larger integers only
  // occur as "to the end" sentinels and are clamped back to int64 by `intAt`; NaN reads as
  // INT64_MIN, which every shape check refuses). Integers are wrapped to their element's width.
  std::optional<std::vector<double>> values;
  // Computed from the length, the positions or the attention mask (directly or through shape
  // arithmetic), as opposed to constants of the file.
  bool fromLength = false;

  int64_t intAt(size_t i) const;
  // All contents as integers (shape operands); `values` must be set.
  std::vector<int64_t> ints() const;
};

// What the graph inputs are.
struct LengthInputs {
  mlir::Value ids;           // token ids: shape known, contents not
  mlir::Value positions;     // 0 .. T - 1 (optional)
  mlir::Value attentionMask; // all ones (optional): dlm's forward has no padding
};

struct ValueHash {
  size_t operator()(mlir::Value v) const { return mlir::hash_value(v); }
};
// Node-based, so that a reference to one entry stays valid while others are added.
using Evaluation = std::unordered_map<mlir::Value, EvaluatedValue, ValueHash>;

// Every op result of `forward`, at sequence length `length`. Named errors: an op whose shape the
// evaluator does not know, or whose operands' shapes contradict it, naming the node.
StatusOr<Evaluation> evaluateAtLength(mlir::func::FuncOp forward, const LengthInputs &inputs,
                                      int64_t length, OnnxFile &file);

} // namespace dlm::importer::onnx
