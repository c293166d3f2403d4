// @generate, the exact form (no KV reuse):
//   gen = [mask] * G
//   for b in blocks:                                      scf.for
//     block, argmax, steps = dlm.diffusion_loop:          per-block denoise loop
//       sequence = prompt ++ gen with the current block
//       logits   = dlm.denoise_step @forward(sequence)    rows of the block sliced out
//       next, keep, argmax, done = dlm.entropy_accept ...
//     gen[b] = block (low-confidence) or argmax (entropy-bound commits the argmax canvas)
//   return gen
#include "compiler/programs/DecodingProgram.h"

#include "compiler/dialects/dlm/DlmDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

namespace dlm::programs {
namespace {

using namespace mlir;

int64_t moduleInt(ModuleOp module, StringRef name) {
  auto attr = module->getAttrOfType<IntegerAttr>(name);
  return attr ? attr.getInt() : -1;
}

// What one denoise step's accept reads.
struct AcceptOperands {
  Type blockType, keepType;
  Value blockLogits, canvas, previousArgmax, temperature, step, globalStep, start, requestKey;
  int64_t maskToken, stepsPerBlock, blockLength;
};

// The accept of one denoise step: the entropy bound (its temperature annealed over the block's
// steps), the confidence threshold, or the top-k schedule.
dlm::ir::EntropyAcceptOp createAccept(OpBuilder &b, Location loc, const DecodingPolicy &policy,
                                      const AcceptOperands &in) {
  MLIRContext *context = b.getContext();
  Type f32 = b.getF32Type();
  auto renoise = dlm::ir::RenoiseKindAttr::get(context, dlm::ir::RenoiseKind::mask_token);
  auto rule = [&](dlm::ir::AcceptRule r) { return dlm::ir::AcceptRuleAttr::get(context, r); };
  auto accept = [&](Value temperature, dlm::ir::AcceptRule acceptRule, FloatAttr entropyBound,
                    FloatAttr threshold, IntegerAttr blockTokens, IntegerAttr steps,
                    int64_t stability, double confidenceBound) {
    return dlm::ir::EntropyAcceptOp::create(
        b, loc, in.blockType, in.keepType, in.blockType, b.getI1Type(), in.blockLogits, in.canvas,
        in.previousArgmax, temperature, in.globalStep, in.start, in.requestKey, rule(acceptRule),
        entropyBound, threshold, blockTokens, steps, renoise, b.getI64IntegerAttr(in.maskToken),
        b.getI64IntegerAttr(stability), b.getF64FloatAttr(confidenceBound));
  };
  if (policy.name == "entropy-bound") {
    // T_n = t_min + (t_max - t_min) * (S - n) / S, n the step within the block.
    Value stepF = arith::UIToFPOp::create(
        b, loc, f32, arith::IndexCastOp::create(b, loc, b.getI64Type(), in.step));
    auto f = [&](double v) -> Value {
      return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(static_cast<float>(v)));
    };
    Value remaining = arith::SubFOp::create(b, loc, f(double(policy.maxSteps)), stepF);
    Value fraction = arith::DivFOp::create(b, loc, remaining, f(double(policy.maxSteps)));
    Value span = arith::MulFOp::create(b, loc, f(policy.tMax - policy.tMin), fraction);
    Value temperature = arith::AddFOp::create(b, loc, f(policy.tMin), span);
    return accept(temperature, dlm::ir::AcceptRule::entropy_bound,
                  b.getF64FloatAttr(policy.entropyBound), FloatAttr(), IntegerAttr(), IntegerAttr(),
                  policy.stability, policy.confidenceBound);
  }
  if (policy.threshold > 0.0)
    return accept(in.temperature, dlm::ir::AcceptRule::confidence_threshold, FloatAttr(),
                  b.getF64FloatAttr(policy.threshold), IntegerAttr(),
                  b.getI64IntegerAttr(in.stepsPerBlock), 0, 0.0);
  return accept(in.temperature, dlm::ir::AcceptRule::top_k_schedule, FloatAttr(), FloatAttr(),
                b.getI64IntegerAttr(in.blockLength), b.getI64IntegerAttr(in.stepsPerBlock), 0, 0.0);
}

} // namespace

LogicalResult buildGenerateFunction(ModuleOp module, const DecodingPolicy &policy) {
  MLIRContext *context = module.getContext();
  context->loadDialect<scf::SCFDialect, tensor::TensorDialect, arith::ArithDialect>();
  const bool entropyBound = policy.name == "entropy-bound";
  if (!hasGenerateFunction(policy.name))
    return module.emitError() << "unknown policy '" << policy.name << "'";
  const int64_t genLength = policy.genLength, blockLength = policy.blockLength;
  if (genLength <= 0 || blockLength <= 0 || genLength % blockLength != 0)
    return module.emitError() << "gen_length " << genLength
                              << " must be a positive multiple of block_length " << blockLength;
  const int64_t blocks = genLength / blockLength;
  if (!entropyBound && (policy.steps <= 0 || policy.steps % blocks != 0))
    return module.emitError() << "steps " << policy.steps << " must be divisible by the "
                              << blocks << " blocks";
  const int64_t vocab = moduleInt(module, "dlm.vocab_size");
  const int64_t maskToken = moduleInt(module, "dlm.mask_token_id");
  const int64_t layers = moduleInt(module, "dlm.num_layers");
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward || vocab <= 0 || layers <= 0)
    return module.emitError("@generate needs @forward and the dlm.* model attributes");
  if (maskToken < 0)
    return module.emitError("this policy needs a model with a mask token (dlm.mask_token_id)");
  // Step cap per block: the schedule's steps, the entropy-bound cap, or for the threshold
  // variant its explicit cap (whose last step unmasks what remains), else the block length,
  // which never decides (every step unmasks at least one position).
  const bool threshold = !entropyBound && policy.threshold > 0.0;
  const int64_t stepsPerBlock =
      entropyBound ? policy.maxSteps
      : threshold  ? (policy.stepCap > 0 ? policy.stepCap : blockLength)
                   : policy.steps / blocks;

  OpBuilder b(context);
  Location loc = b.getUnknownLoc();
  b.setInsertionPointToEnd(module.getBody());
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  auto promptType = RankedTensorType::get({ShapedType::kDynamic}, i32);
  auto genType = RankedTensorType::get({genLength}, i32);
  auto blockType = RankedTensorType::get({blockLength}, i32);
  auto blockLogitsType = RankedTensorType::get({blockLength, vocab}, f32);
  auto logitsType = RankedTensorType::get({ShapedType::kDynamic, vocab}, f32);
  auto keepType = RankedTensorType::get({blockLength}, b.getI1Type());

  auto fn = func::FuncOp::create(
      b, loc, "generate", b.getFunctionType({promptType, f32, b.getI64Type()}, {genType}));
  fn->setAttr("dlm.policy", b.getStringAttr(policy.name));
  fn->setAttr("dlm.gen_length", b.getI64IntegerAttr(genLength));
  fn->setAttr("dlm.block_length", b.getI64IntegerAttr(blockLength));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value prompt = entry->getArgument(0), temperature = entry->getArgument(1),
        requestKey = entry->getArgument(2);

  auto cst = [&](int64_t v) -> Value { return arith::ConstantIndexOp::create(b, loc, v); };
  auto cacheType = dlm::ir::KVCacheType::get(
      context, layers, std::max<int64_t>(moduleInt(module, "dlm.num_kv_heads"), 1),
      std::max<int64_t>(moduleInt(module, "dlm.head_dim"), 1), policy.pageSize);
  Value cache = dlm::ir::KVEmptyOp::create(b, loc, cacheType);
  Value zero = cst(0);
  Value promptLength = tensor::DimOp::create(b, loc, prompt, 0);
  Value masks = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(genType, b.getI32IntegerAttr(maskToken).getValue()));
  Value noArgmax = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(blockType, b.getI32IntegerAttr(-1).getValue()));
  Value blockLengthValue = cst(blockLength);
  Value stepsPerBlockValue = cst(stepsPerBlock);

  auto blockLoop =
      scf::ForOp::create(b, loc, zero, cst(blocks), cst(1), ValueRange{masks});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(blockLoop.getBody());
    Value blockIndex = blockLoop.getInductionVar();
    Value gen = blockLoop.getRegionIterArgs()[0];
    Value offset = arith::MulIOp::create(b, loc, blockIndex, blockLengthValue);
    Value start = arith::AddIOp::create(b, loc, promptLength, offset);
    Value firstStep = arith::MulIOp::create(b, loc, blockIndex, stepsPerBlockValue);
    SmallVector<OpFoldResult> blockOffset{offset}, blockSize{b.getIndexAttr(blockLength)},
        unit{b.getIndexAttr(1)};
    Value initialBlock =
        tensor::ExtractSliceOp::create(b, loc, blockType, gen, blockOffset, blockSize, unit);

    auto loop = dlm::ir::DiffusionLoopOp::create(b, loc, ValueRange{initialBlock, noArgmax},
                                                 stepsPerBlock);
    {
      OpBuilder::InsertionGuard loopGuard(b);
      b.setInsertionPointToStart(&loop.getBodyBlock());
      Value step = loop.getStepArgument();
      Value canvas = loop.getCarriedArguments()[0];
      Value previousArgmax = loop.getCarriedArguments()[1];
      Value current =
          tensor::InsertSliceOp::create(b, loc, canvas, gen, blockOffset, blockSize, unit);
      Value sequence = tensor::ConcatOp::create(b, loc, promptType, 0, ValueRange{prompt, current});
      Value logits = dlm::ir::DenoiseStepOp::create(b, loc, logitsType, "forward", sequence, zero,
                                                    cache, Value());
      Value blockLogits = tensor::ExtractSliceOp::create(
          b, loc, blockLogitsType, logits, SmallVector<OpFoldResult>{start, b.getIndexAttr(0)},
          SmallVector<OpFoldResult>{b.getIndexAttr(blockLength), b.getIndexAttr(vocab)},
          SmallVector<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(1)});
      Value globalStep = arith::AddIOp::create(b, loc, firstStep, step);

      dlm::ir::EntropyAcceptOp acceptOp =
          createAccept(b, loc, policy,
                       AcceptOperands{blockType, keepType, blockLogits, canvas, previousArgmax,
                                      temperature, step, globalStep, start, requestKey, maskToken,
                                      stepsPerBlock, blockLength});
      dlm::ir::YieldOp::create(b, loc, acceptOp.getConverged(),
                               ValueRange{acceptOp.getNextCanvas(), acceptOp.getArgmax()});
    }
    // Mask-absorbing schedules commit the canvas; the entropy-bound sampler commits the argmax
    // canvas of its last step.
    Value committed = loop.getResults()[entropyBound ? 1 : 0];
    Value nextGen =
        tensor::InsertSliceOp::create(b, loc, committed, gen, blockOffset, blockSize, unit);
    scf::YieldOp::create(b, loc, nextGen);
  }
  func::ReturnOp::create(b, loc, blockLoop.getResult(0));
  return success();
}

bool hasGenerateFunction(std::string_view policy) {
  return policy == "low-confidence" || policy == "entropy-bound";
}

} // namespace dlm::programs
