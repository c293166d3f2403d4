//===- DlmBase.td - the dlm dialect and its attributes -----*- tablegen -*-===//
//
// The dlm dialect describes diffusion language models and their decoding
// programs: the model graph (@forward) out of coarse transformer ops, and the
// decoding loop (@generate) out of first-class diffusion ops.
//
//===----------------------------------------------------------------------===//

#ifndef DLM_BASE_TD
#define DLM_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Dlm_Dialect : Dialect {
  let name = "dlm";
  let cppNamespace = "::dlm::ir";
  let summary = "Diffusion language models: model graph and decoding programs";
  let description = [{
    First-class ops are the denoise step, mask-aware attention, the accept
    rule, speculative verification, the KV commit pass and the per-block
    diffusion loop. Dense math (embedding, linear, RMSNorm, RoPE, gated MLP,
    LM head) is kept coarse so fusion and kernel selection see whole pieces.
    Target facts live as module attributes (`dlm.target`, `dlm.page_size`,
    `dlm.canvas_length`).
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  // Canonicalization patterns create arith constants (step numbers, flags).
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Dlm_MaskKind : I32EnumAttr<"MaskKind", "which keys a query may see", [
    I32EnumAttrCase<"causal", 0>,
    I32EnumAttrCase<"bidirectional", 1>,
    I32EnumAttrCase<"block_causal", 2>,
    I32EnumAttrCase<"sliding_window", 3>,
    I32EnumAttrCase<"sliding_window_symmetric", 4>,
    I32EnumAttrCase<"prefix_window", 5>
  ]> {
  let cppNamespace = "::dlm::ir";
  let genSpecializedAttr = 0;
}
def Dlm_MaskKindAttr : EnumAttr<Dlm_Dialect, Dlm_MaskKind, "mask"> {
  let assemblyFormat = "`<` $value `>`";
}

def Dlm_AcceptRule : I32EnumAttr<"AcceptRule", "which canvas positions are kept", [
    I32EnumAttrCase<"entropy_bound", 0>,
    I32EnumAttrCase<"confidence_threshold", 1>,
    I32EnumAttrCase<"top_k_schedule", 2>
  ]> {
  let cppNamespace = "::dlm::ir";
  let genSpecializedAttr = 0;
}
def Dlm_AcceptRuleAttr : EnumAttr<Dlm_Dialect, Dlm_AcceptRule, "accept"> {
  let assemblyFormat = "`<` $value `>`";
}

def Dlm_RenoiseKind : I32EnumAttr<"RenoiseKind", "what replaces a rejected position", [
    I32EnumAttrCase<"mask_token", 0>,
    I32EnumAttrCase<"uniform_token", 1>
  ]> {
  let cppNamespace = "::dlm::ir";
  let genSpecializedAttr = 0;
}
def Dlm_RenoiseKindAttr : EnumAttr<Dlm_Dialect, Dlm_RenoiseKind, "renoise"> {
  let assemblyFormat = "`<` $value `>`";
}

def Dlm_VerifyMode : I32EnumAttr<"VerifyMode", "how drafted tokens are verified", [
    I32EnumAttrCase<"greedy", 0>,
    I32EnumAttrCase<"rejection", 1>
  ]> {
  let cppNamespace = "::dlm::ir";
  let genSpecializedAttr = 0;
}
def Dlm_VerifyModeAttr : EnumAttr<Dlm_Dialect, Dlm_VerifyMode, "verify"> {
  let assemblyFormat = "`<` $value `>`";
}

def Dlm_Activation : I32EnumAttr<"Activation", "gate activation of an MLP", [
    I32EnumAttrCase<"silu", 0>,
    I32EnumAttrCase<"gelu_tanh", 1>
  ]> {
  let cppNamespace = "::dlm::ir";
  let genSpecializedAttr = 0;
}
def Dlm_ActivationAttr : EnumAttr<Dlm_Dialect, Dlm_Activation, "activation"> {
  let assemblyFormat = "`<` $value `>`";
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

class Dlm_Type<string name, string typeMnemonic> : TypeDef<Dlm_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def Dlm_KVCacheType : Dlm_Type<"KVCache", "kv_cache"> {
  let summary = "a paged key/value cache of one sequence, as a value";
  let description = [{
    The committed keys and values of every layer of one sequence, stored in
    fixed-size pages. Ops that write the cache (`dlm.kv_commit`) return a new
    cache value, so the decoding program stays in value semantics and the
    runtime maps the chain onto in-place sequence operations.

    Example: `!dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>`
  }];
  let parameters = (ins "int64_t":$layers, "int64_t":$kvHeads,
                        "int64_t":$headDim, "int64_t":$pageSize);
  let assemblyFormat = [{
    `<` `layers` `=` $layers `,` `kv_heads` `=` $kvHeads `,`
        `head_dim` `=` $headDim `,` `page_size` `=` $pageSize `>`
  }];
  let genVerifyDecl = 1;
}

#endif // DLM_BASE_TD
