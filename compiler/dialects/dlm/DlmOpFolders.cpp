// Canonicalization patterns of the dlm ops, kept apart from the verifiers (as IREE does).
#include "compiler/dialects/dlm/DlmDialect.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace dlm::ir;

namespace {

// A loop with a zero step cap never runs its body: its results are its initial values and it
// ran zero steps.
struct EraseZeroStepDiffusionLoop : OpRewritePattern<DiffusionLoopOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(DiffusionLoopOp loop, PatternRewriter &rewriter) const override {
    if (loop.getStepCap() != 0)
      return failure();
    SmallVector<Value> replacements(loop.getInits());
    replacements.push_back(arith::ConstantIndexOp::create(rewriter, loop.getLoc(), 0));
    rewriter.replaceOp(loop, replacements);
    return success();
  }
};

// A loop that runs exactly once — its cap is one step, or its body always reports convergence —
// is its body inlined at step 0.
struct InlineSingleStepDiffusionLoop : OpRewritePattern<DiffusionLoopOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(DiffusionLoopOp loop, PatternRewriter &rewriter) const override {
    if (loop.getStepCap() < 1)
      return failure();
    YieldOp yield = loop.getYield();
    bool alwaysConverges = matchPattern(yield.getConverged(), m_One());
    if (loop.getStepCap() != 1 && !alwaysConverges)
      return failure();
    // The convergence flag may be defined inside the body; it is dropped with the yield.
    Location loc = loop.getLoc();
    SmallVector<Value> arguments{arith::ConstantIndexOp::create(rewriter, loc, 0)};
    llvm::append_range(arguments, loop.getInits());
    rewriter.inlineBlockBefore(&loop.getBodyBlock(), loop, arguments);
    SmallVector<Value> replacements(yield.getValues());
    replacements.push_back(arith::ConstantIndexOp::create(rewriter, loc, 1));
    rewriter.eraseOp(yield);
    rewriter.replaceOp(loop, replacements);
    return success();
  }
};

} // namespace

void DiffusionLoopOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                  MLIRContext *context) {
  results.add<EraseZeroStepDiffusionLoop, InlineSingleStepDiffusionLoop>(context);
}
