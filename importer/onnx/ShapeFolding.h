// Between the two phases of the ONNX import: the shape bookkeeping exporters emit, removed, so
// that the raising patterns see the same transformer pieces whatever surrounds them.
//
// The graph is evaluated at two sequence lengths (LengthEvaluation.h). Then:
//   * every value computed only from constants, the length, the positions and the attention mask
//     (Shape → Gather → Concat → Reshape targets, Range, Trilu masks, RoPE tables computed from
//     positions, ...) is replaced where the model's data uses it: shape operands by constants
//     (the length as -1, "to the end" or a broadcast 1), RoPE tables by `onnx.RopeRows`, causal
//     masks by `onnx.CausalMask`, other constants by Constant nodes; anything else that depends
//     on the length is refused by name;
//   * a batch dimension of 1 (or dynamic) is removed from every value that has it, and the axes,
//     perms and shapes of the nodes that read them follow;
//   * every remaining value gets its ranked type ([?] for the length);
//   * @forward takes (ids: tensor<?xi32>, positions: tensor<?xi32>) like the safetensors import's:
//     a position_ids (or cache_position) input becomes the positions, an attention_mask input is
//     taken as all ones (dlm's forward has no padding), and cache inputs and outputs
//     (past_key_values, present) are refused with how to export without them.
//
// Two lengths cannot see what changes only beyond the second (a clamp at 512, a window wider
// than 9): such values are taken as constant. Configurations that would need it (sliding
// windows, rope_scaling) are refused from config.json.
#pragma once

#include "importer/model/ModelFamily.h"
#include "importer/onnx/OnnxFile.h"
#include "support/Status.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>
#include <vector>

namespace dlm::importer::onnx {

// Pseudo-ops the folding leaves for the patterns (AttentionPatterns.cpp).
// onnx.RopeRows(positions) {kind = "cos" | "sin"}: the NeoX RoPE table of config.json's theta at
// each position, [positions, head_dim] with size-1 axes before it as the graph broadcasts them.
inline constexpr llvm::StringLiteral kRopeRowsOp = "onnx.RopeRows";
// onnx.CausalMask() {form = "future" | "allowed" | "additive"}: [T, T] (size-1 axes before it)
// — true where the key comes after the query, true where it does not, or 0 / -inf.
inline constexpr llvm::StringLiteral kCausalMaskOp = "onnx.CausalMask";

// What the folding recognised, for the import report ("batch dimension of 1 removed", ...).
using Recognised = std::vector<std::string>;

Status foldShapes(mlir::func::FuncOp forward, OnnxFile &file, const ModelDescription &model,
                  Recognised &recognised);

} // namespace dlm::importer::onnx
