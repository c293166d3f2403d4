// Phase 2 of the ONNX import: versioned raising patterns that turn subgraphs of the mechanical
// form into dlm ops, and the driver that applies them.
//
// A pattern is registered for the ONNX op type at the *root* of its subgraph (the node computing
// the subgraph's result) and the first opset it understands:
//
//   patterns.onOp("Mul", 13, "rms_norm", raiseRmsNorm);
//
// For a node of opset N the driver tries, for each pattern name registered on its op type, the
// registration with the highest version <= N (so a later version supersedes an earlier one), in
// registration order, until one replaces the root. Patterns only ever replace their root; the
// interior nodes they matched die and the driver erases them. Nodes are visited in program order,
// so the producers of a root's operands are already raised when the root is visited: patterns
// match the values flowing into a subgraph in either form (e.g. a linear layer as dlm.linear or
// still as MatMul(x, Transpose(W))).
#pragma once

#include "importer/model/ModelFamily.h"
#include "importer/onnx/OnnxFile.h"
#include "support/Status.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dlm::importer::onnx {

// A node of the mechanical form, or null for any other op.
class OnnxNode {
public:
  OnnxNode() = default;
  static OnnxNode of(mlir::Operation *op);
  static OnnxNode of(mlir::Value value); // the node defining `value`

  explicit operator bool() const { return op_ != nullptr; }
  mlir::Operation *op() const { return op_; }
  // "MatMul"; "com.microsoft.FusedMatMul" outside the default domain.
  llvm::StringRef type() const;
  int64_t opset() const;
  llvm::StringRef name() const;
  // "node '/model/Mul' (op Mul, opset 17)" — how every message names a node.
  std::string label() const;

  unsigned numInputs() const;
  // Null when the input is absent.
  mlir::Value input(unsigned i) const;
  mlir::Value result() const;

  std::optional<int64_t> intAttr(llvm::StringRef name) const;
  std::optional<llvm::SmallVector<int64_t>> intsAttr(llvm::StringRef name) const;

private:
  explicit OnnxNode(mlir::Operation *op) : op_(op) {}
  mlir::Operation *op_ = nullptr;
};

// What patterns may read besides the IR: config.json's facts, the initializers' values, and the
// outcome of each attempt (why a pattern did not apply, or a hard error).
class RaisingContext {
public:
  RaisingContext(OnnxFile &file, const ModelDescription &model) : file_(file), model_(model) {}

  const artifact::ModelConfig &config() const { return model_.config; }
  OnnxFile &file() { return file_; }

  // Values of a small constant: Constant nodes, initializers, and the shape arithmetic torch.onnx
  // emits around them (Gather, Unsqueeze, Concat, Cast, Div, ...). Shapes themselves are folded to
  // constants before raising (ShapeFolding.h).
  std::optional<llvm::SmallVector<int64_t>> ints(mlir::Value value);
  std::optional<llvm::SmallVector<double>> floats(mlir::Value value);
  std::optional<double> scalar(mlir::Value value);

  // Failure with the reason the current pattern did not match; reported if the root stays.
  // `reject`: the root does not look like this pattern's root at all. `mismatch`: it does (the
  // pattern's anchor matched) but something inside the subgraph does not fit — the better
  // explanation when the import fails.
  mlir::LogicalResult reject(const llvm::Twine &reason);
  mlir::LogicalResult mismatch(const llvm::Twine &reason);
  // The subgraph matched but contradicts the model (e.g. config.json): the import fails.
  mlir::LogicalResult fail(const llvm::Twine &message);

  // A form the import recognised, for the import report (once per text).
  void note(const std::string &what);
  const std::vector<std::string> &notes() const { return notes_; }

  // Driver side.
  void beginAttempt(mlir::Operation *root, llvm::StringRef pattern);
  const Status &status() const { return status_; }
  struct Reasons {
    std::string text;
    bool anchored = false; // some pattern got past its anchor (a mismatch)
  };
  const std::map<mlir::Operation *, Reasons> &reasons() const { return reasons_; }
  void forget(mlir::Operation *root) { reasons_.erase(root); }
  void forgetAll() { reasons_.clear(); }

private:
  std::optional<llvm::SmallVector<int64_t>> foldInts(mlir::Value value, int depth);

  OnnxFile &file_;
  const ModelDescription &model_;
  Status status_ = Status::ok();
  mlir::Operation *root_ = nullptr;
  std::string pattern_;
  std::map<mlir::Operation *, Reasons> reasons_;
  std::vector<std::string> notes_;
};

using RaiseFn = std::function<mlir::LogicalResult(OnnxNode root, RaisingContext &context,
                                                  mlir::RewriterBase &rewriter)>;

class RaisingPatterns {
public:
  // `raise` handles nodes of `opType` in the default domain from opset `sinceVersion` on.
  void onOp(llvm::StringRef opType, int64_t sinceVersion, llvm::StringRef pattern,
            RaiseFn raise);
  // Op types that occur only inside subgraphs some pattern recognises (Pow, Softmax, ...): a
  // leftover one means an unrecognised subgraph, not an unsupported op.
  void covers(std::initializer_list<llvm::StringRef> opTypes);

  struct Entry {
    int64_t since;
    std::string pattern;
    RaiseFn raise;
  };
  // The entries that apply to `node`, in registration order.
  std::vector<const Entry *> lookup(const OnnxNode &node) const;
  bool knows(llvm::StringRef opType) const;
  // The lowest version any pattern on `opType` needs; 0 for covered-only types.
  int64_t firstVersion(llvm::StringRef opType) const;

private:
  std::map<std::string, std::vector<Entry>, std::less<>> entries_;
  std::set<std::string, std::less<>> covered_;
};

// The patterns of one part of the transformer (TransformerPatterns.cpp, AttentionPatterns.cpp).
void addTransformerPatterns(RaisingPatterns &patterns);
void addAttentionPatterns(RaisingPatterns &patterns);

// The oldest default-domain opset the patterns are written for.
inline constexpr int64_t kMinOpset = 13;

// The model's default-domain opset is one the patterns are written for (>= kMinOpset).
Status checkOpset(OnnxFile &file);

// Raises every node of `forward`. Named errors: the model's opset is too old; a node that stays
// (unknown op type, opset without a pattern, subgraph not recognised), naming the node.
// What was recognised is appended to `recognised` (the import report).
Status raiseGraph(mlir::func::FuncOp forward, OnnxFile &file, const ModelDescription &model,
                  std::vector<std::string> &recognised);

// On a dlm.weight op: its initializer is stored transposed (the exporter folded a linear layer's
// Wᵀ into it); the op's type is the untransposed [out, in] the model uses.
inline constexpr llvm::StringLiteral kTransposedWeightAttr = "onnx.transposed";

// ---- matching helpers shared by the patterns --------------------------------------------------

// `value` with the nodes that do not change it skipped: Identity, Cast to the same element type,
// Expand by a shape of ones.
mlir::Value skipNoOps(mlir::Value value, RaisingContext &context);
// The node of `opType` computing `value` (after skipNoOps), or null.
OnnxNode producer(mlir::Value value, llvm::StringRef opType, RaisingContext &context);
// The weight `value` is (after skipNoOps), or null.
mlir::Operation *weightOp(mlir::Value value, RaisingContext &context);
// `value` as messages print numbers: "1e-05", "500000".
std::string formatNumber(double value);
// A ranked tensor type or null.
mlir::RankedTensorType rankedType(mlir::Value value);

// x·Wᵀ (+ b) with W an [out, in] weight: an already raised dlm.linear, MatMul(x, Transpose(W)),
// Add of such a MatMul and a [out] weight, or Gemm(x, W, b?, transB = 1).
struct LinearMatch {
  mlir::Value input, weight, bias; // bias may be null
};
std::optional<LinearMatch> matchLinear(mlir::Value value, RaisingContext &context);

} // namespace dlm::importer::onnx
