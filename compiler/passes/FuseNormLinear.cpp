// dlm-fuse-norm-linear: dlm.linear(dlm.rms_norm(x)) → dlm.norm_linear(x) (see Passes.td).
#include "compiler/passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace dlm {
#define GEN_PASS_DEF_FUSENORMLINEARPASS
#include "compiler/passes/Passes.h.inc"
} // namespace dlm

using namespace mlir;
using namespace dlm::ir;

namespace {

struct FuseNormIntoLinear : OpRewritePattern<LinearOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LinearOp linear, PatternRewriter &rewriter) const override {
    auto norm = linear.getInput().getDefiningOp<RMSNormOp>();
    // dlm.norm_linear normalises rows of a matrix; a norm over another rank stays apart.
    // A norm without weight has nothing for the GEMM's prologue to fold.
    if (!norm || !norm.getWeight() ||
        cast<RankedTensorType>(norm.getInput().getType()).getRank() != 2)
      return failure();
    rewriter.replaceOpWithNewOp<NormLinearOp>(linear, linear.getType(), norm.getInput(),
                                              norm.getWeight(), linear.getWeight(),
                                              linear.getBias(), norm.getEpsAttr());
    return success();
  }
};

struct FuseNormLinearPass : dlm::impl::FuseNormLinearPassBase<FuseNormLinearPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseNormIntoLinear>(&getContext());
    // The greedy driver also erases norms left without users.
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
