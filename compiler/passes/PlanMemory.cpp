// dlm-plan-memory: one arena for the intermediates of a static function (see Passes.td).
//
// Live range of a buffer: from its producer to its last reader, in program order (a reader
// inside a nested region counts at the position of its ancestor in the body). Reshapes and casts
// alias their operand's buffer instead of getting one. Placement: ArenaPlanner.h (greedy by size).
#include "compiler/passes/ArenaPlanner.h"
#include "compiler/passes/Passes.h"

#include "llvm/ADT/EquivalenceClasses.h"

namespace dlm {
#define GEN_PASS_DEF_PLANMEMORYPASS
#include "compiler/passes/Passes.h.inc"
} // namespace dlm

using namespace mlir;

namespace {

struct Buffer {
  Operation *producer;
  int64_t first, last; // program positions
  int64_t bytes;
  int64_t offset = -1;
};

bool aliasesOperand(Operation *op) {
  return isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp>(op);
}

struct PlanMemoryPass : dlm::impl::PlanMemoryPassBase<PlanMemoryPass> {
  using PlanMemoryPassBase::PlanMemoryPassBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal())
      return;
    if (alignment < 1 || (alignment & (alignment - 1)) != 0) {
      fn.emitError() << "dlm-plan-memory: alignment must be a power of two, got " << alignment;
      return signalPassFailure();
    }
    if (!fn.getBody().hasOneBlock()) {
      fn.emitRemark("dlm-plan-memory: not planned (body has several blocks)");
      return;
    }
    Block &body = fn.getBody().front();
    DenseMap<Operation *, int64_t> position;
    for (auto [index, op] : llvm::enumerate(body))
      position[&op] = index;

    // Tensors that need storage of their own, and which buffer every tensor lives in.
    llvm::EquivalenceClasses<Value> sameBuffer;
    SmallVector<Value> roots;
    for (Operation &op : body) {
      // Weights live in the artifact's weight section; constants are baked into the program.
      if (isa<dlm::ir::WeightOp, arith::ConstantOp>(op))
        continue;
      for (Value result : op.getResults()) {
        auto type = dyn_cast<RankedTensorType>(result.getType());
        if (!type)
          continue;
        if (!type.hasStaticShape()) {
          fn.emitRemark() << "dlm-plan-memory: not planned (" << type
                          << " has a dynamic shape; run --dlm-specialize-shapes first)";
          return;
        }
        sameBuffer.insert(result);
        Value source = aliasesOperand(&op) ? op.getOperand(0) : Value();
        if (source && sameBuffer.contains(source))
          sameBuffer.unionSets(source, result);
        else
          roots.push_back(result);
      }
    }

    // Live ranges, per buffer.
    DenseMap<Value, Buffer> buffers;
    for (Value root : roots) {
      Operation *producer = root.getDefiningOp();
      auto type = cast<RankedTensorType>(root.getType());
      int64_t bytes = type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
      buffers[root] = {producer, position[producer], position[producer], bytes};
    }
    for (Value root : roots) {
      Buffer &buffer = buffers[root];
      for (auto it = sameBuffer.findLeader(root); it != sameBuffer.member_end(); ++it)
        for (OpOperand &use : it->getUses())
          if (Operation *user = body.findAncestorOpInBlock(*use.getOwner()))
            buffer.last = std::max(buffer.last, position[user]);
    }

    std::vector<dlm::passes::ArenaBuffer> arena;
    for (Value root : roots)
      arena.push_back({buffers[root].first, buffers[root].last, buffers[root].bytes});
    dlm::passes::ArenaPlan plan = dlm::passes::planArena(arena, alignment);
    for (auto [root, placed] : llvm::zip(roots, arena))
      buffers[root].offset = placed.offset;
    int64_t arenaBytes = plan.arenaSize, unplannedBytes = plan.unplannedSize;

    Builder b(&getContext());
    for (Value root : roots)
      buffers[root].producer->setAttr("dlm.arena_offset",
                                      b.getI64IntegerAttr(buffers[root].offset));
    fn->setAttr("dlm.arena_bytes", b.getI64IntegerAttr(arenaBytes));
    fn->setAttr("dlm.unplanned_bytes", b.getI64IntegerAttr(unplannedBytes));
  }
};

} // namespace
