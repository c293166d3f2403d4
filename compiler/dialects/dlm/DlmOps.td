//===- DlmOps.td - dlm operations ---------------------------*- tablegen -*-===//

#ifndef DLM_OPS_TD
#define DLM_OPS_TD

include "compiler/dialects/dlm/DlmBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Dlm_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dlm_Dialect, mnemonic, traits>;

def Dlm_TokenTensor : RankedTensorOf<[I32, I64]>;
def Dlm_FloatTensor : RankedTensorOf<[F32, F16, BF16]>;

//===----------------------------------------------------------------------===//
// First-class diffusion ops
//===----------------------------------------------------------------------===//

def Dlm_MaskedAttentionOp : Dlm_Op<"masked_attention",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "attention under an explicit mask kind, dense or through a paged KV cache";
  let description = [{
    Computes `softmax(scale * q k^T + mask) v` per query head; query head `h`
    reads key/value head `h / (q_heads / kv_heads)` (grouped-query attention).

    Dense form: `q : [S, Hq, D]`, `k : [T, Hkv, D]`, `v : [T, Hkv, Dv]`.
    Paged form (with `pages(%block_table)`): `k`/`v` are page pools
    `[num_pages, page_size, Hkv, D]` and logical key `j` lives in page
    `block_table[j / page_size]` at slot `j % page_size`; `positions(...)` is
    then required and its key list gives the logical key count.

    Positions: without `positions(...)`, key `j` is at position `j` and query
    `i` at `T - S + i` (the queries are the last `S` keys). The mask kinds:
    - `causal`: key position <= query position;
    - `bidirectional`: every key;
    - `block_causal`: `key / block_size <= query / block_size`;
    - `sliding_window`: `0 <= query - key < window`;
    - `sliding_window_symmetric`: `|query - key| < window`;
    - `prefix_window`: every key at or after the first query's position `F`
      (the fed tokens, bidirectionally), and the keys before it with
      `F - key < window` (DiffusionGemma's decoder on sliding layers: the
      canvas sees the last `window - 1` cached positions, whatever its offset).

    `scale` defaults to `1/sqrt(D)`.

    Example:
    ```mlir
    %o = dlm.masked_attention %q, %k, %v {mask = #dlm.mask<block_causal>, block_size = 32}
        : tensor<32x4x16xf32>, tensor<96x2x16xf32>, tensor<96x2x16xf32> -> tensor<32x4x16xf32>
    ```
  }];
  let arguments = (ins Dlm_FloatTensor:$query, Dlm_FloatTensor:$key, Dlm_FloatTensor:$value,
                       Optional<RankedTensorOf<[I32]>>:$query_positions,
                       Optional<RankedTensorOf<[I32]>>:$key_positions,
                       Optional<RankedTensorOf<[I32]>>:$block_table,
                       Dlm_MaskKindAttr:$mask,
                       OptionalAttr<I64Attr>:$window,
                       OptionalAttr<I64Attr>:$block_size,
                       OptionalAttr<F32Attr>:$scale);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value
    (`positions` `(` $query_positions^ `,` $key_positions `)`)?
    (`pages` `(` $block_table^ `)`)?
    attr-dict `:` type($query) `,` type($key) `,` type($value)
    (`,` type($query_positions)^ `,` type($key_positions))?
    (`,` type($block_table)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dlm_DenoiseStepOp : Dlm_Op<"denoise_step",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "one decoder-mode model pass over a canvas: logits for every canvas position";
  let description = [{
    Runs the model function `$model` in decoder mode over the canvas tokens at
    positions `start .. start + C - 1`: canvas positions attend to each other
    bidirectionally and to the committed keys/values in `$cache`, which is only
    read. The optional self-conditioning input `[C, H]` is added to the canvas
    embedding (DiffusionGemma). The result holds the logits `[C, V]`.

    Example:
    ```mlir
    %logits = dlm.denoise_step @forward(%canvas) at %start cache(%kv)
        : tensor<32xi32>, !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>
        -> tensor<32x512xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$model, Dlm_TokenTensor:$canvas, Index:$start,
                       Dlm_KVCacheType:$cache, Optional<Dlm_FloatTensor>:$self_conditioning);
  let results = (outs RankedTensorOf<[F32]>:$logits);
  let assemblyFormat = [{
    $model `(` $canvas `)` `at` $start `cache` `(` $cache `)`
    (`self_conditioning` `(` $self_conditioning^ `)`)?
    attr-dict `:` type($canvas) `,` qualified(type($cache)) (`,` type($self_conditioning)^)?
    `->` type($logits)
  }];
  let hasVerifier = 1;
}

def Dlm_EntropyAcceptOp : Dlm_Op<"entropy_accept", [Pure]> {
  let summary = "the accept rule: which canvas positions to keep, the next canvas, convergence";
  let description = [{
    One pass over the logits `[C, V]` of denoise step `step` at temperature
    `T`: per position the softmax statistics, entropy `H`, argmax and a
    Gumbel-max sample whose noise comes from the counter-based generator
    keyed by `request_key` (the request's `mix64(mix64(seed) ^ request)`),
    the stream, `step` and the absolute position (`canvas_start` + row) — so
    every backend draws the same noise. The rule chooses the positions to keep:
    - `entropy_bound` (`bound`): walk positions by ascending entropy and keep
      each while the entropy of those before it is `<= bound`; the lowest
      entropy position is always kept; every position is re-predicted;
    - `confidence_threshold` (`threshold` in (0, 1]): keep every masked
      position whose sampled-token probability is at least `threshold`, and
      at least the most confident one; with `schedule_steps`, the step
      numbered `schedule_steps - 1` within the block (the cap) unmasks all
      that remain;
    - `top_k_schedule` (`k`, `schedule_steps`): the `k` masked positions of
      the block are unmasked over `schedule_steps` steps, `k / schedule_steps`
      per step and one more in the first `k % schedule_steps` steps, most
      confident first (LLaDA's low-confidence remasking).
    Under the mask-absorbing rules only positions holding `mask_token_id` are
    candidates and kept positions stay. Rejected positions are renoised (the
    mask token, or a uniform random token). `converged` is true when the
    argmax canvas equals `previous_argmax` (`stability >= 1`) and the mean
    entropy is below `confidence`, or, for the mask-absorbing rules, when no
    masked position is left — the `dlm.diffusion_loop` ends on it.

    Example:
    ```mlir
    %next, %keep, %argmax, %done = dlm.entropy_accept %logits, %canvas, %prev, %temperature,
        %step, %start, %key {rule = #dlm.accept<entropy_bound>, bound = 0.1,
         renoise = #dlm.renoise<mask_token>, mask_token_id = 126336, stability = 1,
         confidence = 0.005}
        : tensor<32x512xf32>, tensor<32xi32>, tensor<32xi32>
        -> tensor<32xi32>, tensor<32xi1>, tensor<32xi32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$logits, Dlm_TokenTensor:$canvas,
                       Dlm_TokenTensor:$previous_argmax, F32:$temperature, Index:$step,
                       Index:$canvas_start, I64:$request_key,
                       Dlm_AcceptRuleAttr:$rule,
                       OptionalAttr<F64Attr>:$bound,
                       OptionalAttr<F64Attr>:$threshold,
                       OptionalAttr<I64Attr>:$k,
                       OptionalAttr<I64Attr>:$schedule_steps,
                       Dlm_RenoiseKindAttr:$renoise,
                       OptionalAttr<I64Attr>:$mask_token_id,
                       DefaultValuedAttr<I64Attr, "1">:$stability,
                       DefaultValuedAttr<F64Attr, "0.005">:$confidence);
  let results = (outs Dlm_TokenTensor:$next_canvas, RankedTensorOf<[I1]>:$keep,
                      Dlm_TokenTensor:$argmax, I1:$converged);
  let assemblyFormat = [{
    $logits `,` $canvas `,` $previous_argmax `,` $temperature `,` $step `,` $canvas_start `,` $request_key
    attr-dict `:` type($logits) `,` type($canvas) `,` type($previous_argmax)
    `->` type($next_canvas) `,` type($keep) `,` type($argmax)
  }];
  let hasVerifier = 1;
}

def Dlm_KVEmptyOp : Dlm_Op<"kv_empty", [Pure]> {
  let summary = "a KV cache holding no positions yet";
  let description = [{
    The cache of a new sequence. With `--cache none` the decoding program
    keeps the cache empty and each denoise step runs over the whole sequence.

    Example: `%kv = dlm.kv_empty : !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>`
  }];
  let results = (outs Dlm_KVCacheType:$cache);
  let assemblyFormat = [{ attr-dict `:` qualified(type($cache)) }];
}

def Dlm_SpecVerifyOp : Dlm_Op<"spec_verify", [Pure]> {
  let summary = "verify drafted tokens against the target's distributions";
  let description = [{
    `draft : [L]` holds drafted tokens; `target_logits : [L + 1, V]` are the
    target's logits at the anchor and after each drafted token (row `j`
    predicts draft `j`, row `L` gives the bonus token).
    - `greedy`: accept the longest prefix where `draft[j] == argmax(row j)`;
      the token after it is `argmax(row accepted)`.
    - `rejection` (lossless): with draft distributions `q : [L, V]`, accept
      `draft[j]` while `u * q[j][draft[j]] < p[j][draft[j]]`; at the first
      rejection sample from `normalize(max(0, p - q))`; if all are accepted,
      sample the bonus token from row `L`.
    Results: the accepted length `a` and `tokens : [L + 1]` whose first
    `a + 1` entries are the accepted drafts followed by the correction or
    bonus token (the rest repeat the last of them).

    Example:
    ```mlir
    %n, %tokens = dlm.spec_verify %draft, %target {mode = #dlm.verify<greedy>}
        : tensor<15xi32>, tensor<16x512xf32> -> index, tensor<16xi32>
    ```
  }];
  let arguments = (ins Dlm_TokenTensor:$draft, RankedTensorOf<[F32]>:$target_logits,
                       Optional<RankedTensorOf<[F32]>>:$draft_probs,
                       Dlm_VerifyModeAttr:$mode);
  let results = (outs Index:$accepted, Dlm_TokenTensor:$tokens);
  let assemblyFormat = [{
    $draft `,` $target_logits (`draft_probs` `(` $draft_probs^ `)`)? attr-dict `:`
    type($draft) `,` type($target_logits) (`,` type($draft_probs)^)?
    `->` type($accepted) `,` type($tokens)
  }];
  let hasVerifier = 1;
}

def Dlm_KVCommitOp : Dlm_Op<"kv_commit", [Pure, AllTypesMatch<["cache", "result"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "encoder-mode (causal) pass that writes a finished block's keys and values";
  let description = [{
    Runs the model function `$model` in encoder mode (causal attention) over
    `tokens` at positions `start .. start + n - 1`, attending to the cache, and
    returns the cache with those positions' keys and values appended. Used for
    the prompt (prefill) and for each committed block; its logits are unused.

    Example:
    ```mlir
    %kv1 = dlm.kv_commit @forward(%block) at %start into %kv0
        : tensor<32xi32>, !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$model, Dlm_TokenTensor:$tokens, Index:$start,
                       Dlm_KVCacheType:$cache);
  let results = (outs Dlm_KVCacheType:$result);
  let assemblyFormat = [{
    $model `(` $tokens `)` `at` $start `into` $cache attr-dict `:` type($tokens) `,` qualified(type($cache))
  }];
  let hasVerifier = 1;
}

def Dlm_DiffusionLoopOp : Dlm_Op<"diffusion_loop", [RecursiveMemoryEffects, SingleBlock]> {
  let summary = "the per-block denoise loop: repeat the body until it converges or hits the step cap";
  let description = [{
    Runs its body with the step number (0, 1, ...) and the carried values,
    at most `max_steps` times. The body yields a convergence flag and the next
    carried values; the loop ends after the first step whose flag is true, or
    after `max_steps` steps. Results: the final carried values and the number
    of steps run. This is the unit that passes unroll and capture as a CUDA
    graph; with `max_steps = 0` the body never runs.

    Example:
    ```mlir
    %canvas, %argmax, %steps = dlm.diffusion_loop max_steps 48 step(%step)
        iter_args(%c = %init, %a = %none) : tensor<32xi32>, tensor<32xi32> {
      ...
      dlm.yield %done, %next, %argmax : tensor<32xi32>, tensor<32xi32>
    }
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$inits, I64Attr:$max_steps);
  let results = (outs Variadic<AnyType>:$results, Index:$steps);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "::mlir::ValueRange":$inits, "int64_t":$maxSteps)>
  ];
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
    ::mlir::BlockArgument getStepArgument() { return getBodyBlock().getArgument(0); }
    ::mlir::Block::BlockArgListType getCarriedArguments() {
      return getBodyBlock().getArguments().drop_front();
    }
    YieldOp getYield();
    // max_steps as a signed number (I64Attr getters are unsigned).
    int64_t getStepCap() { return getMaxStepsAttr().getInt(); }
  }];
}

def Dlm_YieldOp : Dlm_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"DiffusionLoopOp">]> {
  let summary = "ends a diffusion loop step: convergence flag and next carried values";
  let description = [{
    The first operand says whether the loop has converged; the others are the
    carried values for the next step (or the loop's results).

    Example: `dlm.yield %done, %canvas : tensor<32xi32>`
  }];
  let arguments = (ins I1:$converged, Variadic<AnyType>:$values);
  let assemblyFormat = [{ $converged (`,` $values^ `:` type($values))? attr-dict }];
}

//===----------------------------------------------------------------------===//
// Coarse model ops (the @forward graph)
//===----------------------------------------------------------------------===//

def Dlm_EmbeddingOp : Dlm_Op<"embedding", [Pure]> {
  let summary = "token embedding lookup, optionally scaled";
  let description = [{
    `result[i] = table[ids[i]] * scale` with `ids : [S]`, `table : [Vpad, H]`.
    Ids outside `[0, Vpad)` are an error at run time.

    Example:
    `%x = dlm.embedding %ids, %table : tensor<8xi32>, tensor<512x64xf32> -> tensor<8x64xf32>`
  }];
  let arguments = (ins Dlm_TokenTensor:$ids, Dlm_FloatTensor:$table,
                       DefaultValuedAttr<F32Attr, "1.0">:$scale);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $table attr-dict `:` type($ids) `,` type($table) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dlm_LinearOp : Dlm_Op<"linear", [Pure]> {
  let summary = "x w^T (+ b) with the weight in [out, in] layout";
  let description = [{
    `x : [S, K]`, `weight : [N, K]` (PyTorch layout), optional `bias : [N]`;
    result `[S, N]`.

    Example:
    `%y = dlm.linear %x, %w : tensor<8x64xf32>, tensor<128x64xf32> -> tensor<8x128xf32>`
  }];
  let arguments = (ins Dlm_FloatTensor:$input, Dlm_FloatTensor:$weight,
                       Optional<Dlm_FloatTensor>:$bias);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`bias` `(` $bias^ `)`)? attr-dict `:` type($input) `,` type($weight)
    (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dlm_NormLinearOp : Dlm_Op<"norm_linear", [Pure]> {
  let summary = "RMSNorm fused into the linear that consumes it: (norm(x) * w_norm) w^T (+ b)";
  let description = [{
    `dlm.rms_norm` followed by `dlm.linear`, as one op so a kernel can
    normalise each row in the GEMM's prologue instead of writing the
    normalised activations to memory and reading them back. Produced by
    `--dlm-fuse-norm-linear`. Shapes as for the two ops it replaces:
    `x : [S, K]`, `norm_weight : [K]`, `weight : [N, K]`, `bias : [N]`.

    Example:
    ```mlir
    %y = dlm.norm_linear %x, %g, %w {eps = 1.0e-05 : f64}
        : tensor<8x64xf32>, tensor<64xf32>, tensor<128x64xf32> -> tensor<8x128xf32>
    ```
  }];
  let arguments = (ins Dlm_FloatTensor:$input, Dlm_FloatTensor:$norm_weight,
                       Dlm_FloatTensor:$weight, Optional<Dlm_FloatTensor>:$bias, F64Attr:$eps);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $norm_weight `,` $weight (`bias` `(` $bias^ `)`)? attr-dict `:` type($input) `,`
    type($norm_weight) `,` type($weight) (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dlm_RMSNormOp : Dlm_Op<"rms_norm", [Pure]> {
  let summary = "RMS normalisation over the last dimension";
  let description = [{
    `x * rsqrt(mean(x^2) + eps) * weight` over the last dimension (of size H),
    computed in fp32; `weight : [H]` is used as is (not `1 + w`). Without a
    weight, `x * rsqrt(mean(x^2) + eps)` (Gemma's v_norm and router norm).

    Example:
    `%y = dlm.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<8x64xf32>, tensor<64xf32> -> tensor<8x64xf32>`
    `%y = dlm.rms_norm %x {eps = 1.0e-06 : f64} : tensor<8x64xf32> -> tensor<8x64xf32>`
  }];
  let arguments = (ins Dlm_FloatTensor:$input, Optional<Dlm_FloatTensor>:$weight, F64Attr:$eps);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`,` $weight^)? attr-dict `:` type($input) (`,` type($weight)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dlm_RoPEOp : Dlm_Op<"rope", [Pure]> {
  let summary = "rotary position embedding (NeoX pairing) of the first rotary_dim dims";
  let description = [{
    `x : [S, heads, D]`, `positions : [S]`. Dimension pairs `(j, j + R/2)` of
    the first `R = rotary_dim` (default D) are rotated by
    `positions[s] * theta^(-2j/R)`; the rest pass through.

    With `rotated_pairs = P` instead (Gemma's "proportional" RoPE), the pairs
    are `(j, j + D/2)` over the whole head, pair `j < P` rotates by
    `positions[s] * theta^(-2j/D)` (the exponent uses the whole head dim) and
    the pairs `j >= P` pass through. At most one of the two is given.

    Example:
    `%y = dlm.rope %x, %pos {theta = 5.0e+05 : f64} : tensor<8x4x16xf32>, tensor<8xi32> -> tensor<8x4x16xf32>`
  }];
  let arguments = (ins Dlm_FloatTensor:$input, RankedTensorOf<[I32]>:$positions,
                       F64Attr:$theta, OptionalAttr<I64Attr>:$rotary_dim,
                       OptionalAttr<I64Attr>:$rotated_pairs);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $positions attr-dict `:` type($input) `,` type($positions) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dlm_GatedMLPOp : Dlm_Op<"gated_mlp", [Pure]> {
  let summary = "down(act(gate x) * up x)";
  let description = [{
    `x : [S, H]`, `gate, up : [I, H]`, `down : [H, I]`; result `[S, H]`.

    Example:
    ```mlir
    %y = dlm.gated_mlp %x, %g, %u, %d {activation = #dlm.activation<silu>}
        : tensor<8x64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32> -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Dlm_FloatTensor:$input, Dlm_FloatTensor:$gate, Dlm_FloatTensor:$up,
                       Dlm_FloatTensor:$down, Dlm_ActivationAttr:$activation);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gate `,` $up `,` $down attr-dict `:` type($input) `,` type($gate) `,`
    type($up) `,` type($down) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dlm_LMHeadOp : Dlm_Op<"lm_head", [Pure]> {
  let summary = "logits over the vocabulary, dropping padded rows, with optional soft-capping";
  let description = [{
    `x : [S, H]`, `weight : [Vpad, H]`; result `[S, V]` in fp32 with
    `V <= Vpad` (rows of a padded embedding past the vocabulary are dropped).
    With `softcap = c`, logits become `c * tanh(logits / c)`.

    Example:
    `%l = dlm.lm_head %x, %w : tensor<8x64xf32>, tensor<576x64xf32> -> tensor<8x512xf32>`
  }];
  let arguments = (ins Dlm_FloatTensor:$input, Dlm_FloatTensor:$weight,
                       OptionalAttr<F64Attr>:$softcap);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dlm_ScaleOp : Dlm_Op<"scale", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "multiplies every element by a one-element weight";
  let description = [{
    `result = input * factor[0]` with `factor : [1]` (Gemma's per-layer
    `layer_scalar`, which scales the whole residual stream).

    Example:
    `%y = dlm.scale %x, %s : tensor<8x64xf32>, tensor<1xf32>`
  }];
  let arguments = (ins Dlm_FloatTensor:$input, Dlm_FloatTensor:$factor);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $factor attr-dict `:` type($input) `,` type($factor)
  }];
  let hasVerifier = 1;
}

def Dlm_SelectInputRowsOp : Dlm_Op<"select_input_rows",
    [Pure, AllTypesMatch<["with_input", "others", "result"]>]> {
  let summary = "rows that have forward input rows take one operand, the others the other";
  let description = [{
    `result[r] = r < input_rows ? with_input[r] : others[r]`, where `input_rows`
    is how many of the forward's fed rows come with input rows (the caller's,
    known at run time). A DFlash drafter's keys and values: its context rows
    (the target's projected hidden states, fed as input) and its block rows
    (the normed states of its own tokens) go through the same projections.

    Example:
    `%kv = dlm.select_input_rows %ctx, %h : tensor<?x64xf32>`
  }];
  let arguments = (ins Dlm_FloatTensor:$with_input, Dlm_FloatTensor:$others);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $with_input `,` $others attr-dict `:` type($result)
  }];
}

def Dlm_SoftEmbeddingOp : Dlm_Op<"soft_embedding", [Pure]> {
  let summary = "the expected embedding under softmax(logits), scaled";
  let description = [{
    `result[s] = scale * softmax(logits[s]) @ table[:V]` with `logits : [S, V]`
    (float32), `table : [Vpad, H]`, `V <= Vpad`: DiffusionGemma's
    self-conditioning signal from the previous step's logits, without a
    `[S, V]` probability tensor in memory. When the logits are absent at run
    time (a canvas's first step) the result is zero. The forward's caller may
    scale it further at run time (a decode forward's `input_scale`). With
    `mask_token`, rows whose token is another id are zero: iteration
    smoothing's expected embeddings, on the masked positions only.

    Example:
    `%e = dlm.soft_embedding %l, %t {scale = 8.0 : f32} : tensor<8x512xf32>, tensor<512x64xf32> -> tensor<8x64xf32>`
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$logits, Dlm_FloatTensor:$table,
                       DefaultValuedAttr<F32Attr, "1.0">:$scale,
                       OptionalAttr<I64Attr>:$mask_token);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $table attr-dict `:` type($logits) `,` type($table) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dlm_MoEOp : Dlm_Op<"moe", [Pure, AttrSizedOperandSegments]> {
  let summary = "routed mixture of gated experts (DiffusionGemma's, Qwen3-MoE's, LLaDA2's)";
  let description = [{
    `router_input, input : [S, H]`; `router : [E, H]`, `gate_up : [E, 2I, H]` (rows
    `[0, I)` the gate, `[I, 2I)` the up projection), `down : [E, H, I]`, and optionally
    `router_scale : [H]`, `expert_scale : [E]` and `expert_bias : [E]`; result `[S, H]`:

        z = rms_norm(router_input, eps) * router_scale * router_input_scale   with eps
        z = router_input                                                      without
        p = softmax(z @ router^T)                 over the E experts, fp32
        p = sigmoid(z @ router^T)                 with sigmoid_scores instead
        c = p + expert_bias                       when given: the bias only chooses
        c = -inf outside the top_groups best of `groups` groups (a group scores the
                 sum of its two largest c; groups > 1 needs sigmoid_scores and
                 expert_bias)
        e = top_k(c), w = p[e]                    ties to the lower expert id
        w = w / sum(w)                            when normalize_top_k (the default)
        w = w * expert_scale[e] * routed_scale    the scale when given
        result = sum_j w_j * down[e_j] (act(gate[e_j] x) * up[e_j] x)

    DiffusionGemma normalises and scales its router input; Qwen3-MoE reads the
    layer's normed input as it is (no eps, no scales) and renormalises the chosen
    weights when its config says `norm_topk_prob`. LLaDA2 scores with sigmoids,
    chooses with its expert bias among the best groups and scales the weights by
    its routed_scaling_factor.

    Example:
    ```mlir
    %y = dlm.moe %r, %x, %router, %gu, %d router_scale(%rs : tensor<64xf32>)
          expert_scale(%es : tensor<4xf32>) {top_k = 2 : i64, eps = 1.0e-06 : f64,
          router_input_scale = 0.125 : f64, activation = #dlm.activation<gelu_tanh>}
        : tensor<8x64xf32>, tensor<8x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>,
          tensor<4x64x16xf32> -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Dlm_FloatTensor:$router_input, Dlm_FloatTensor:$input,
                       Dlm_FloatTensor:$router, Optional<Dlm_FloatTensor>:$router_scale,
                       Optional<Dlm_FloatTensor>:$expert_scale,
                       Optional<Dlm_FloatTensor>:$expert_bias, Dlm_FloatTensor:$gate_up,
                       Dlm_FloatTensor:$down, I64Attr:$top_k, OptionalAttr<F64Attr>:$eps,
                       DefaultValuedAttr<F64Attr, "1.0">:$router_input_scale,
                       DefaultValuedAttr<BoolAttr, "true">:$normalize_top_k,
                       DefaultValuedAttr<BoolAttr, "false">:$sigmoid_scores,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       DefaultValuedAttr<I64Attr, "1">:$top_groups,
                       DefaultValuedAttr<F64Attr, "1.0">:$routed_scale,
                       Dlm_ActivationAttr:$activation);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{
    $router_input `,` $input `,` $router `,` $gate_up `,` $down
    (`router_scale` `(` $router_scale^ `:` type($router_scale) `)`)?
    (`expert_scale` `(` $expert_scale^ `:` type($expert_scale) `)`)?
    (`expert_bias` `(` $expert_bias^ `:` type($expert_bias) `)`)?
    attr-dict `:` type($router_input) `,` type($input) `,` type($router) `,` type($gate_up) `,`
    type($down) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Dlm_WeightOp : Dlm_Op<"weight", [Pure]> {
  let summary = "a named model weight, referenced rather than inlined";
  let description = [{
    A tensor of the checkpoint (and later of the artifact's weight section),
    named as in the checkpoint. The IR never holds the bytes.

    Example: `%w = dlm.weight "model.transformer.wte.weight" : tensor<576x64xbf16>`
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs Dlm_FloatTensor:$result);
  let assemblyFormat = [{ $name attr-dict `:` type($result) }];
}

#endif // DLM_OPS_TD
