// dlm-specialize-shapes: a static prompt length for @generate, and a static clone of @forward per
// call shape (see Passes.td).
//
// Static shapes travel as tensor.cast ops: a static value is cast to the old dynamic type where
// it enters, and canonicalization folds each cast into its consumer, which gets a more static
// result type (and a cast back for users not yet refined). Upstream patterns do this for tensor
// ops; the patterns here do it for the dlm ops and for elementwise arith.
#include "compiler/passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace dlm {
#define GEN_PASS_DEF_SPECIALIZESHAPESPASS
#include "compiler/passes/Passes.h.inc"
} // namespace dlm

using namespace mlir;
using namespace dlm::ir;

namespace {

// The first operand of a dlm model op carries the sequence dimension (dim 0) of its result.
bool takesRowsFromFirstOperand(Operation *op) {
  return isa<EmbeddingOp, LinearOp, NormLinearOp, RMSNormOp, RoPEOp, GatedMLPOp,
             MaskedAttentionOp, LMHeadOp>(op);
}

RankedTensorType withRows(RankedTensorType type, int64_t rows) {
  SmallVector<int64_t> shape(type.getShape());
  shape[0] = rows;
  return RankedTensorType::get(shape, type.getElementType(), type.getEncoding());
}

// Replaces the operands that are foldable tensor.casts by their sources; false when none is.
bool foldCastOperands(Operation *op, SmallVectorImpl<Value> &operands) {
  bool folded = false;
  for (Value operand : op->getOperands()) {
    auto cast = operand.getDefiningOp<tensor::CastOp>();
    if (cast && tensor::canFoldIntoConsumerOp(cast)) {
      operands.push_back(cast.getSource());
      folded = true;
    } else {
      operands.push_back(operand);
    }
  }
  return folded;
}

// Clones `op` on new operands with a refined result type, casting back to the old type.
void replaceWithRefined(PatternRewriter &rewriter, Operation *op, ValueRange operands,
                        ArrayRef<Type> resultTypes) {
  Operation *refined = rewriter.clone(*op);
  refined->setOperands(operands);
  SmallVector<Value> replacements;
  for (auto [result, type] : llvm::zip(refined->getResults(), resultTypes)) {
    Type old = result.getType();
    result.setType(type);
    replacements.push_back(type == old ? Value(result)
                                       : tensor::CastOp::create(rewriter, op->getLoc(), old,
                                                                result));
  }
  rewriter.replaceOp(op, replacements);
}

struct FoldCastIntoModelOp : RewritePattern {
  FoldCastIntoModelOp(MLIRContext *context)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (!takesRowsFromFirstOperand(op))
      return failure();
    SmallVector<Value> operands;
    if (!foldCastOperands(op, operands))
      return failure();
    auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
    int64_t rows = cast<RankedTensorType>(operands[0].getType()).getDimSize(0);
    Type refined = resultType.isDynamicDim(0) ? withRows(resultType, rows) : resultType;
    replaceWithRefined(rewriter, op, operands, {refined});
    return success();
  }
};

// arith.addf(cast(a), cast(b)) with a, b of one static type → cast(arith.addf(a, b)).
struct FoldCastIntoElementwise : RewritePattern {
  FoldCastIntoElementwise(MLIRContext *context)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (!op->hasTrait<OpTrait::Elementwise>() ||
        !op->hasTrait<OpTrait::SameOperandsAndResultType>() || op->getNumResults() != 1 ||
        !isa<RankedTensorType>(op->getResult(0).getType()))
      return failure();
    SmallVector<Value> operands;
    if (!foldCastOperands(op, operands))
      return failure();
    Type common = operands.front().getType();
    for (Value operand : operands)
      if (operand.getType() != common)
        return failure();
    replaceWithRefined(rewriter, op, operands, {common});
    return success();
  }
};

// tensor.concat of operands that became static (the prompt, mostly).
struct FoldCastIntoConcat : OpRewritePattern<tensor::ConcatOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tensor::ConcatOp concat, PatternRewriter &rewriter) const override {
    SmallVector<Value> operands;
    if (!foldCastOperands(concat, operands))
      return failure();
    SmallVector<Type> types;
    for (Value operand : operands)
      types.push_back(operand.getType());
    replaceWithRefined(rewriter, concat, operands,
                       {tensor::ConcatOp::inferResultType(concat.getDim(), types)});
    return success();
  }
};

// dlm.denoise_step on a canvas that became static: logits [C, V] with C static.
struct FoldCastIntoDenoiseStep : OpRewritePattern<DenoiseStepOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(DenoiseStepOp step, PatternRewriter &rewriter) const override {
    SmallVector<Value> operands;
    if (!foldCastOperands(step, operands))
      return failure();
    auto logits = cast<RankedTensorType>(step.getLogits().getType());
    int64_t rows = cast<RankedTensorType>(operands[0].getType()).getDimSize(0);
    replaceWithRefined(rewriter, step, operands,
                       {logits.isDynamicDim(0) ? withRows(logits, rows) : logits});
    return success();
  }
};

struct FoldCastIntoKVCommit : OpRewritePattern<KVCommitOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(KVCommitOp commit, PatternRewriter &rewriter) const override {
    SmallVector<Value> operands;
    if (!foldCastOperands(commit, operands))
      return failure();
    replaceWithRefined(rewriter, commit, operands, {commit.getResult().getType()});
    return success();
  }
};

// Makes function argument `index` static: the block argument gets `type`, and a cast to the old
// type feeds its uses so the body stays valid until the casts are folded away.
void specializeArgument(func::FuncOp fn, unsigned index, RankedTensorType type) {
  BlockArgument argument = fn.getArgument(index);
  Type old = argument.getType();
  argument.setType(type);
  OpBuilder b(fn.getBody());
  auto cast = tensor::CastOp::create(b, fn.getLoc(), old, argument);
  argument.replaceAllUsesExcept(cast, cast);
  SmallVector<Type> inputs(fn.getArgumentTypes());
  inputs[index] = type;
  fn.setType(FunctionType::get(fn.getContext(), inputs, fn.getResultTypes()));
}

// Lets a function return its values' refined types.
void refineResultTypes(func::FuncOp fn) {
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  for (OpOperand &operand : ret->getOpOperands())
    if (auto cast = operand.get().getDefiningOp<tensor::CastOp>();
        cast && tensor::canFoldIntoConsumerOp(cast))
      operand.set(cast.getSource());
  fn.setType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(), ret.getOperandTypes()));
}

struct SpecializeShapesPass : dlm::impl::SpecializeShapesPassBase<SpecializeShapesPass> {
  using SpecializeShapesPassBase::SpecializeShapesPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *context = &getContext();
    RewritePatternSet patterns(context);
    for (Dialect *dialect : context->getLoadedDialects())
      dialect->getCanonicalizationPatterns(patterns);
    for (RegisteredOperationName op : context->getRegisteredOperations())
      op.getCanonicalizationPatterns(patterns, context);
    patterns.add<FoldCastIntoModelOp, FoldCastIntoElementwise, FoldCastIntoConcat, FoldCastIntoDenoiseStep,
                 FoldCastIntoKVCommit>(context);
    FrozenRewritePatternSet frozen(std::move(patterns));
    auto propagate = [&]() { return applyPatternsGreedily(module, frozen); };

    if (promptLength < 0) {
      module.emitError() << "dlm-specialize-shapes: prompt-length must be >= 0, got "
                         << promptLength;
      return signalPassFailure();
    }
    if (promptLength > 0) {
      auto generate = module.lookupSymbol<func::FuncOp>("generate");
      if (!generate) {
        module.emitError("dlm-specialize-shapes: prompt-length given but there is no @generate");
        return signalPassFailure();
      }
      auto prompt = dyn_cast<RankedTensorType>(generate.getArgumentTypes().front());
      if (!prompt || prompt.getRank() != 1) {
        generate.emitError("dlm-specialize-shapes: @generate's first argument is not a prompt");
        return signalPassFailure();
      }
      specializeArgument(generate, 0, withRows(prompt, promptLength));
    }
    if (failed(propagate()))
      return signalPassFailure();

    // One static clone of each model function per static call length.
    SymbolTable symbols(module);
    SmallVector<func::FuncOp> clones;
    auto specializeCall = [&](Operation *call, FlatSymbolRefAttr model, Value tokens) {
      auto tokensType = cast<RankedTensorType>(tokens.getType());
      auto callee = symbols.lookup<func::FuncOp>(model.getValue());
      if (tokensType.isDynamicDim(0) || !callee || callee.isExternal())
        return;
      int64_t length = tokensType.getDimSize(0);
      std::string name = (model.getValue() + "_" + Twine(length)).str();
      auto clone = symbols.lookup<func::FuncOp>(name);
      if (!clone) {
        clone = callee.clone();
        clone.setSymName(name);
        symbols.insert(clone, std::next(Block::iterator(callee)));
        for (unsigned i = 0; i < clone.getNumArguments(); ++i)
          if (auto type = dyn_cast<RankedTensorType>(clone.getArgumentTypes()[i]);
              type && type.getRank() >= 1 && type.isDynamicDim(0))
            specializeArgument(clone, i, withRows(type, length));
        clones.push_back(clone);
      }
      call->setAttr("model", FlatSymbolRefAttr::get(context, name));
    };
    module.walk([&](DenoiseStepOp step) {
      specializeCall(step, step.getModelAttr(), step.getCanvas());
    });
    module.walk([&](KVCommitOp commit) {
      specializeCall(commit, commit.getModelAttr(), commit.getTokens());
    });
    if (failed(propagate()))
      return signalPassFailure();
    for (func::FuncOp clone : clones)
      refineResultTypes(clone);
  }
};

} // namespace
