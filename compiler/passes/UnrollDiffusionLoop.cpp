// dlm-unroll-diffusion-loop: several denoise steps per loop iteration (see Passes.td).
#include "compiler/passes/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

namespace dlm {
#define GEN_PASS_DEF_UNROLLDIFFUSIONLOOPPASS
#include "compiler/passes/Passes.h.inc"
} // namespace dlm

using namespace mlir;
using namespace dlm::ir;

namespace {

// Replaces `loop` by a loop whose iteration runs up to `factor` guarded copies of its body.
//
// Carried values of the new loop: the original ones plus the count of original steps run so far
// (an index), which replaces the original `steps` result. Inside one new iteration, a step runs
// while no earlier copy has converged and its step number is under the original cap.
void unrollLoop(DiffusionLoopOp loop, int64_t factor) {
  IRRewriter rewriter(loop.getContext());
  rewriter.setInsertionPoint(loop);
  Location loc = loop.getLoc();
  int64_t maxSteps = loop.getStepCap();
  int64_t newMaxSteps = (maxSteps + factor - 1) / factor;
  // Only the last iteration can overrun the cap, and only when factor does not divide it.
  bool needsCapCheck = maxSteps % factor != 0;

  SmallVector<Value> inits(loop.getInits());
  inits.push_back(arith::ConstantIndexOp::create(rewriter, loc, 0));
  auto unrolled = DiffusionLoopOp::create(rewriter, loc, inits, newMaxSteps);
  unrolled->setDiscardableAttrs(loop->getDiscardableAttrDictionary());

  Block &body = unrolled.getBodyBlock();
  rewriter.setInsertionPointToStart(&body);
  Value outerStep = unrolled.getStepArgument();
  SmallVector<Value> carried(unrolled.getCarriedArguments().drop_back());
  Value stepsRun = unrolled.getCarriedArguments().back();
  Value one = arith::ConstantIndexOp::create(rewriter, loc, 1);
  Value trueValue = arith::ConstantIntOp::create(rewriter, loc, 1, 1);
  Value capValue = needsCapCheck ? arith::ConstantIndexOp::create(rewriter, loc, maxSteps) : Value();
  Value firstStep = arith::MulIOp::create(
      rewriter, loc, outerStep, arith::ConstantIndexOp::create(rewriter, loc, factor));

  // Clones one step of the original body at the insertion point; returns the carried values it
  // yields followed by its convergence flag.
  YieldOp originalYield = loop.getYield();
  auto cloneStep = [&](Value step, ValueRange state) {
    IRMapping mapping;
    mapping.map(loop.getStepArgument(), step);
    mapping.map(loop.getCarriedArguments(), state);
    for (Operation &op : loop.getBodyBlock().without_terminator())
      rewriter.clone(op, mapping);
    SmallVector<Value> results;
    for (Value value : originalYield.getValues())
      results.push_back(mapping.lookupOrDefault(value));
    results.push_back(mapping.lookupOrDefault(originalYield.getConverged()));
    return results;
  };

  // The first copy always runs: the loop starts an iteration only when not yet converged, and
  // outer * factor is below the cap for every iteration under the new cap.
  SmallVector<Value> first = cloneStep(firstStep, carried);
  Value converged = first.pop_back_val();
  carried = first;
  stepsRun = arith::AddIOp::create(rewriter, loc, stepsRun, one);

  SmallVector<Type> stateTypes(loop.getInits().getTypes());
  stateTypes.push_back(rewriter.getI1Type());
  stateTypes.push_back(rewriter.getIndexType());
  for (int64_t copy = 1; copy < factor; ++copy) {
    Value step = arith::AddIOp::create(rewriter, loc, firstStep,
                                       arith::ConstantIndexOp::create(rewriter, loc, copy));
    Value active = arith::XOrIOp::create(rewriter, loc, converged, trueValue);
    if (needsCapCheck) {
      Value underCap =
          arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::ult, step, capValue);
      active = arith::AndIOp::create(rewriter, loc, active, underCap);
    }
    auto guard = scf::IfOp::create(rewriter, loc, stateTypes, active, /*withElse=*/true);

    // Then: one more step of the original body.
    rewriter.setInsertionPointToStart(guard.thenBlock());
    SmallVector<Value> thenValues = cloneStep(step, carried);
    thenValues.push_back(arith::AddIOp::create(rewriter, loc, stepsRun, one));
    scf::YieldOp::create(rewriter, loc, thenValues);

    // Else: converged or past the cap, pass the state through.
    rewriter.setInsertionPointToStart(guard.elseBlock());
    SmallVector<Value> elseValues(carried);
    elseValues.push_back(converged);
    elseValues.push_back(stepsRun);
    scf::YieldOp::create(rewriter, loc, elseValues);

    rewriter.setInsertionPointAfter(guard);
    ValueRange results = guard.getResults();
    carried.assign(results.begin(), results.begin() + carried.size());
    converged = results[carried.size()];
    stepsRun = results[carried.size() + 1];
  }
  SmallVector<Value> yielded(carried);
  yielded.push_back(stepsRun);
  YieldOp::create(rewriter, loc, converged, yielded);

  // Original results: the carried values, then the steps actually run (not the iterations).
  // (getResults() is the ODS group of carried results: the new loop's carried values plus the
  // step count it carries; its own `steps` result counts unrolled iterations and is dropped.)
  SmallVector<Value> replacements(unrolled.getResults());
  rewriter.replaceOp(loop, replacements);
}

struct UnrollDiffusionLoopPass
    : dlm::impl::UnrollDiffusionLoopPassBase<UnrollDiffusionLoopPass> {
  using UnrollDiffusionLoopPassBase::UnrollDiffusionLoopPassBase;

  void runOnOperation() override {
    if (factor < 1) {
      getOperation()->emitError() << "dlm-unroll-diffusion-loop: factor must be >= 1, got "
                                  << factor;
      return signalPassFailure();
    }
    if (factor == 1)
      return;
    SmallVector<DiffusionLoopOp> loops;
    // Post-order: inner loops (if any) are unrolled before the loops containing them.
    getOperation()->walk([&](DiffusionLoopOp loop) {
      // A loop of at most one step needs no unrolling (the canonicalizer inlines it).
      if (loop.getStepCap() > 1)
        loops.push_back(loop);
    });
    for (DiffusionLoopOp loop : loops)
      unrollLoop(loop, factor);
  }
};

} // namespace
