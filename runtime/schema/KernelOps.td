//===- KernelOps.td - the kernel records: one definition per kind --*- tablegen -*-===//
//
// The contract of the kernel records, declared once: the compiled @forward as a flat, ordered
// list of kernel launches {kind, name, parameters} that dlmc writes (dlm-lower-to-kernel-program)
// and every backend executes (runtime/program/KernelProgram.h parses them) without knowing what a
// layer is. Each kind below gives its name, its operand count, whether it writes a result slot,
// its parameters (name, type, required or optional, and an optional one's default) and the
// check of its shapes (a KernelRecordChecks.h member).
//
// From this file dlm-tblgen -gen-kernel-record-spec writes the kinds' enum, the kind and
// parameter names, each kind's parameter table (runtime/model/KernelProgram.h includes them) and
// the dispatch tables of the checks, the CPU backend, CUDA codegen and the CUDA backend with
// their handlers' declarations; -gen-kernel-params writes each kind's typed parameter struct and
// its reader (runtime/model/KernelParams.h). The
// loader rejects, from the tables, a parameter its kind does not declare, of another type or
// outside its choices, and a missing required one.
//
// Value slots: 0 is the token ids, 1 the positions (the forward's two inputs); records number
// their results from 2 upward. Every intermediate is [tokens, width] and the token count is only
// known at run time, so the memory plan is per token row: a slot with offset o and width w
// occupies elements [o * T, (o + w) * T) of a workspace of `rowElements * T` floats for T tokens;
// two slots whose live ranges intersect never overlap, for any T. A slot whose offset equals its
// operand's was planned in place (rope, residual add, per-head norm, silu_mul).
//
//===----------------------------------------------------------------------===//

#ifndef DLM_KERNEL_OPS_TD
#define DLM_KERNEL_OPS_TD

//===----------------------------------------------------------------------===//
// Parameter types: the artifact's parameter values (integer, real, text, bool)
//===----------------------------------------------------------------------===//

class KernelValue<string type, string doc> {
  string kernelType = type; // ParameterType's enumerator
  list<string> choices = [];
  string summary = doc;
}
def Integer : KernelValue<"integer", "an integer">;
def Real : KernelValue<"real", "a real">;
def Text : KernelValue<"text", "text">;
def Flag : KernelValue<"flag", "a boolean">;
def Weight : KernelValue<"weight", "a canonical weight name (ModelSpec.h)">;
def Slots : KernelValue<"slots", "comma-separated value slots (\"4,5\")">;
class Choice<list<string> values> : KernelValue<"text", "one of its choices"> {
  let choices = values;
}

// The operator of a kind's parameter list, as ODS spells its arguments: (ins Required<Real>:$eps).
def ins;

// An optional parameter's default is a C++ expression in which $name stands for another
// parameter of the kind declared before it ("$head_dim / 2"); without one, the typed struct holds
// a std::optional (absent and given are told apart).
class KernelParameter<KernelValue value, bit isRequired, string defaultValue> {
  KernelValue parameterValue = value;
  bit required = isRequired;
  string defaultExpression = defaultValue;
}
class Required<KernelValue value> : KernelParameter<value, 1, "">;
class Optional<KernelValue value, string defaultValue = "">
    : KernelParameter<value, 0, defaultValue>;

// The C++ constant of a parameter whose name is also a kind's: kScaleParameter, not kScale.
class ParameterConstant<string parameterName, string cppName> {
  string name = parameterName;
  string constant = cppName;
}
def : ParameterConstant<"scale", "ScaleParameter">;
def : ParameterConstant<"down", "DownWeight">;

// A condition every record of a kind meets, as ODS's CPred: a C++ condition in which $name is a
// parameter of the kind (its typed value; a weight's WeightRef, resolved to its host tensor),
// $width the result's width (kinds with a result) and $operandN operand N's width. `message`
// says what is wrong, with the same $names standing for their values, and $(expression) for an
// expression's (evaluated only when the condition fails: guard what it divides by). The loader
// checks them in order: those that read no weight before the kind's check, those that read one
// after it (the check resolves the weights).
class Constraint<string condition, string text> {
  string predicate = condition;
  string message = text;
}
// Operand `index` has the result's width ("the first operand's width is 8, expected 16").
class OperandWidth<int index, string what>
    : Constraint<"$operand" # index # " == $width",
                 what # " is $operand" # index # ", expected $width">;
defvar TwoOperandsOfTheResultWidth = [OperandWidth<0, "the first operand's width">,
                                      OperandWidth<1, "the second operand's width">];

//===----------------------------------------------------------------------===//
// What every record has, whatever its kind
//===----------------------------------------------------------------------===//

// layer        the transformer layer (KV cache layer for kv_store / attention); -1 = none. The
//              KV cache has a layer for every kv_store layer of any function: a DFlash
//              drafter's layers follow its target's (L, L+1, ...).
// operands     the value slots read; a kind without operands may leave it out
// result       the value slot written (kinds with a result)
// offset       where the result lives in the workspace, in elements per token row (not lm_head)
// width        the result's elements per token row
// function     the forward function the record belongs to; absent = "forward". An artifact may
//              hold several (DiffusionGemma: "encode" and "decode"), each a complete program of
//              its own (own slots, own memory plan, own lm_head) over the same weights and the
//              same KV cache; DecodeModel::forward names one.
// cuda_kernel  the generated CUDA kernel the record launches (dlmc --target cuda|all);
//              comma-separated when it launches several (lm_head: its norm and its soft-cap;
//              moe: route, plan, gate_up, down, combine)
def KernelRecordCommon {
  dag parameters = (ins Required<Integer>:$layer, Optional<Slots>:$operands,
                        Optional<Integer>:$result, Optional<Integer>:$offset,
                        Optional<Integer>:$width, Optional<Text>:$function,
                        Optional<Text>:$cuda_kernel);
}

//===----------------------------------------------------------------------===//
// The kinds, in the order of the runtime's KernelKind enum
//===----------------------------------------------------------------------===//

// operands: the count (without the residual of an accumulating linear); -1: one or more.
// The handlers of the kind are member functions that dlm-tblgen's dispatch tables name; each
// defaults to the kind's name (`rms_norm`: rmsNorm, runRmsNorm, rmsNorm), and kinds that share
// one say which:
//   check        the check of its shapes (RecordChecker, runtime/program/KernelRecordChecks.h);
//                "constraintsOnly" when its `constraints` say all (it resolves the weights)
//   cpuRunner    its CPU runner (CpuBackend)
//   cudaKernels  the generator of the CUDA kernels it launches (a RecordKernels member,
//                compiler/codegen/RecordKernels.h, defined beside its generator in
//                compiler/codegen/kernels/; a kind that launches none has one too)
//   cudaLaunch   its launch on the CUDA backend (CudaBackend): by default enqueueDeclared, which
//                launches its kernel as the generator declared (runtime/model/DeclaredLaunch.h:
//                each argument's binding and the grid); a kind whose launch is more (several
//                kernels, a GEMM, part by part, device copies) names its own
class KernelKind<string kindName, int operandCount> {
  string name = kindName;
  string cppKind = "";          // the enumerator; the name in lower camel case when empty
  int operands = operandCount;
  bit hasResult = 1;
  dag parameters = (ins);
  string check = "";
  string cpuRunner = "";
  string cudaKernels = "";
  string cudaLaunch = "enqueueDeclared";
  // 0: a record of the kind may run on CUDA without a generated kernel (a cuBLASLt GEMM, device
  // copies). lm_head is 0: a record with a fused norm (a norm weight) needs the norm's kernel
  // whatever its kind says.
  bit cudaNeedsKernel = 1;
  // The category of its profile events (profile::Category's enumerator).
  string profileCategory = "elementwise";
  // Where the memory plan may place its result on a slot it reads (the last read of that slot):
  // "none"; "first", on its first operand (it reads each element before writing it); "any", on
  // any operand (an add commutes; a row selection reads each row of either operand first). An
  // accumulating linear sits on its residual whatever this says.
  string inPlace = "none";
  // Conditions on its shapes and parameters, checked after `check` (Constraint above).
  list<Constraint> constraints = [];
}

// tokens → x: the rows of `weight` [E, W] for the token ids, times scale (1.0: none), in float32.
def Embedding : KernelKind<"embedding", 1> {
  let constraints = [Constraint<"std::isfinite($scale)", "the embedding scale is not finite">];
  let profileCategory = "embedding";
  let parameters = (ins Required<Weight>:$weight, Optional<Real, "1.0">:$scale);
}
// x → y: x * rsqrt(mean x^2 + eps) * weight over groups of the weight's size; without a weight,
// over groups of norm_width (a divisor of the row width; the row when absent).
def RmsNorm : KernelKind<"rms_norm", 1> {
  let cudaLaunch = "enqueueRmsNorm";
  let profileCategory = "rmsnorm";
  let inPlace = "first";
  let parameters = (ins Optional<Weight>:$weight, Required<Real>:$eps,
                        Optional<Integer>:$norm_width);
}
// x [, residual] → y: rms_norm(x, norm_weight) W^T (+ bias) (+ residual when accumulate).
def NormLinear : KernelKind<"norm_linear", 1> {
  let profileCategory = "gemm";
  let check = "linear";
  let cpuRunner = "runLinear";
  let cudaLaunch = "enqueueProjection";
  let parameters = (ins Required<Weight>:$norm_weight, Required<Real>:$eps,
                        Required<Weight>:$weight, Optional<Weight>:$bias,
                        Optional<Flag, "false">:$accumulate);
}
// x [, residual] → y: x W^T for weight [N, K] (+ bias) (+ residual when accumulate: the residual
// add the compiler folded into the GEMM's epilogue).
def Linear : KernelKind<"linear", 1> {
  let profileCategory = "gemm";
  let cudaLaunch = "enqueueProjection";
  let cudaNeedsKernel = 0;
  let parameters = (ins Required<Weight>:$weight, Optional<Weight>:$bias,
                        Optional<Flag, "false">:$accumulate);
}
// x, positions → y: of each head, pairs (j, j + rotary_dim / 2) with j < rotated_pairs rotate by
// position * theta^(-2j / rotary_dim); the other dims pass through. rotary_dim (head_dim when
// absent) below head_dim: partial rotary (LLaDA2's partial_rotary_factor); rotated_pairs below
// rotary_dim / 2, the later pairs passing through at rotary_dim = head_dim: Gemma's "proportional"
// RoPE.
def Rope : KernelKind<"rope", 2> {
  let check = "constraintsOnly";
  let constraints = [OperandWidth<0, "the input width">,
                     Constraint<"$head_dim > 0 && $head_dim % 2 == 0 && $width % $head_dim == 0",
                                "head_dim $head_dim does not split rows of $width into heads of " #
                                "pairs">,
                     Constraint<"$rotary_dim >= 2 && $rotary_dim % 2 == 0 && " #
                                "$rotary_dim <= $head_dim",
                                "rotary_dim $rotary_dim is not an even number in [2, head_dim " #
                                "$head_dim]">,
                     Constraint<"$rotated_pairs >= 0 && $rotated_pairs <= $rotary_dim / 2",
                                "rotated_pairs $rotated_pairs is outside [0, $($rotary_dim / 2)] " #
                                "(rotary_dim $rotary_dim)">,
                     Constraint<"$theta > 0", "theta must be positive">];
  let cudaLaunch = "enqueueRope";
  let profileCategory = "rope";
  let inPlace = "first";
  let parameters = (ins Required<Real>:$theta, Required<Integer>:$head_dim,
                        Optional<Integer, "$head_dim">:$rotary_dim,
                        Optional<Integer, "$rotary_dim / 2">:$rotated_pairs);
}
// k, v → the KV cache of `layer`.
def KvStore : KernelKind<"kv_store", 2> {
  let profileCategory = "kvStore";
  let cudaLaunch = "enqueuePerPart";
  let hasResult = 0;
}
// q, k, v → o over the KV cache of `layer` (k and v as stored by that layer's kv_store); scores
// are scale * q.k (scale: 1 / sqrt(head_dim) when absent). mask: causal, a query at position i
// sees keys j <= i; block_causal (block_size B), keys j with j / B <= i / B (LLaDA2's, SDAR's
// blocks from position 0); bidirectional, every key. window (none when absent): causal: keys
// with i - W < j <= i; bidirectional: every key at or after the forward's first fed position,
// and the keys j before it with first - j < W (DiffusionGemma's decoder on sliding layers: the
// last W - 1 cached positions).
def Attention : KernelKind<"attention", 3> {
  // A positive scale: a kernel reads 0 as "1 / sqrt(head_dim)" (AttentionShape).
  let constraints = [Constraint<"$scale > 0 && std::isfinite($scale)",
                                "the attention scale $scale is not positive and finite">,
                     Constraint<"!$window || *$window > 0", "window $window is not positive">,
                     Constraint<"($mask == spec::kernels::AttentionMask::blockCausal) == " #
                                "$block_size.has_value()",
                                "block_size goes with mask block_causal, and only with it">,
                     Constraint<"!$block_size || (*$block_size > 0 && !$window)",
                                "block_size $block_size is not positive or has a window">];
  let cudaLaunch = "enqueueAttention";
  let profileCategory = "attention";
  let parameters = (ins Required<Choice<["causal", "bidirectional", "block_causal"]>>:$mask,
                        Required<Integer>:$heads, Required<Integer>:$kv_heads,
                        Required<Integer>:$head_dim,
                        Optional<Real, "1.0 / std::sqrt(static_cast<double>($head_dim))">:$scale,
                        Optional<Integer>:$window, Optional<Integer>:$block_size);
}
// a, b → a + b.
def Add : KernelKind<"add", 2> {
  let inPlace = "any";
  let check = "constraintsOnly";
  let constraints = TwoOperandsOfTheResultWidth;
  let cpuRunner = "runElementwise";
}
// gate, up → silu(gate) * up.
def SiluMul : KernelKind<"silu_mul", 2> {
  let inPlace = "first";
  let check = "constraintsOnly";
  let constraints = TwoOperandsOfTheResultWidth;
  let cpuRunner = "runElementwise";
  let cudaKernels = "gatedActivation";
}
// x → logits of the requested rows: norm_weight (the final norm, optional), weight, logit_shift;
// softcap (none when absent): logits = softcap * tanh(logits / softcap), in float32. The last
// record of its function.
def LmHead : KernelKind<"lm_head", 1> {
  let constraints = [Constraint<"!$softcap || (*$softcap > 0 && std::isfinite(*$softcap))",
                                "softcap must be positive">];
  let profileCategory = "lmHead";
  let cudaLaunch = "enqueueProjection";
  let cudaNeedsKernel = 0;
  let parameters = (ins Optional<Weight>:$norm_weight, Optional<Real>:$eps,
                        Required<Weight>:$weight, Required<Flag>:$logit_shift,
                        Optional<Real>:$softcap);
}
// x → x * weight[0]; weight [1].
def Scale : KernelKind<"scale", 1> {
  let inPlace = "first";
  let parameters = (ins Required<Weight>:$weight);
}
// gate, up → gelu_tanh(gate) * up.
def GeluMul : KernelKind<"gelu_mul", 2> {
  let inPlace = "first";
  let check = "constraintsOnly";
  let constraints = TwoOperandsOfTheResultWidth;
  let cpuRunner = "runElementwise";
  let cudaKernels = "gatedActivation";
}
// (no operands) → [T, H]: softmax(input row) @ weight[:V'] * scale * the forward's input scale
// for each fed token, where the input is the forward's float input rows ([T, V'], V' <= the
// table's rows; DecodeModel's ForwardSpec::input and inputScale), and zero rows when the forward
// has no input (self-conditioning's first step) and for the fed rows before the input's first
// (ForwardSpec::inputFirst). With mask_token (>= 0), only the rows whose
// token is that id; the others are zero rows (iteration smoothing's masked positions). weight
// [E, H] (the embedding table).
def SoftEmbedding : KernelKind<"soft_embedding", 0> {
  let constraints = [Constraint<"std::isfinite($scale)", "the embedding scale is not finite">];
  let profileCategory = "embedding";
  let cudaLaunch = "enqueuePerPart";
  let parameters = (ins Required<Weight>:$weight, Optional<Real, "1.0">:$scale,
                        Optional<Integer>:$mask_token);
}
// Mixture of experts: operands (router input r, expert input x), both [T, H] → y [T, H].
//   z = rms_norm_noweight(r, eps) * router_scale * router_input_scale with router_norm (a
//   missing router_scale counts as ones), z = r without; p = softmax(z @ router^T) over the
//   `experts` experts (float32), or with sigmoid_scores p = sigmoid(z @ router^T); the choice
//   reads c = p + expert_bias (the bias, when given, only chooses); with groups > 1 the experts
//   form `groups` contiguous groups, a group scores the sum of its two largest c and only the
//   top_groups best groups' experts may be chosen (ties: the lower group); the top_k largest c
//   (ties: lower expert id first), their weights p renormalised to sum 1 with normalize_top_k,
//   each times expert_scale[e] when given, times routed_scale;
//   y = sum over the chosen e of weight_e * down_e(act(gate_e x) * up_e x), where
//   gate_up_e = gate_up[e] is [2I, H] (rows [0, I) the gate, [I, 2I) the up projection) and
//   down_e = down[e] is [H, I].
// DiffusionGemma: router_norm, both scales, normalize_top_k, gelu_tanh. Qwen3-MoE: no router
// norm and no scales, normalize_top_k = the config's norm_topk_prob, silu. LLaDA2: no router
// norm, sigmoid_scores, expert_bias, groups = n_group, top_groups = topk_group, normalize_top_k =
// norm_topk_prob, routed_scale = routed_scaling_factor (its shared expert is a gated MLP beside
// the record).
// Weights: router [E, H], router_scale [H], expert_scale [E], gate_up [E, 2I, H] and down
// [E, H, I] (rank-3 tensors, which a HostTensor holds as rows = E * 2I (E * H), cols = H (I)).
// activation: "gelu_tanh" (GELU's tanh approximation) or "silu".
def Moe : KernelKind<"moe", 2> {
  let constraints = [OperandWidth<0, "the router input's width">,
                     OperandWidth<1, "the expert input's width">,
                     Constraint<"$eps > 0 && $eps < 1", "eps $eps is not in (0, 1)">,
                     Constraint<"$router_input_scale > 0 && std::isfinite($router_input_scale)",
                                "router_input_scale $router_input_scale is not positive and finite">,
                     Constraint<"$experts > 0", "experts $experts is not positive">,
                     Constraint<"$top_k >= 1 && $top_k <= $experts",
                                "top_k $top_k is outside [1, $experts]">,
                     Constraint<"$router_norm || (!$router_scale && $router_input_scale == 1)",
                                "router_scale and router_input_scale scale the normed router input: they need router_norm">,
                     Constraint<"$groups >= 1 && $experts % $groups == 0 && ($groups == 1 || $experts / $groups >= 2)",
                                "groups $groups do not split $experts experts into groups of two or more">,
                     Constraint<"$top_groups >= 1 && $top_groups <= $groups && $top_k <= $top_groups * ($experts / $groups)",
                                "top_groups $top_groups is outside [1, $groups] or holds fewer than top_k $top_k experts">,
                     Constraint<"$groups == 1 || ($sigmoid_scores && $expert_bias)",
                                "group-limited routing (groups $groups) is LLaDA2's: sigmoid_scores and an expert_bias (without a bias SGLang scores a group by its largest, not its two largest)">,
                     Constraint<"$routed_scale > 0 && std::isfinite($routed_scale)",
                                "routed_scale $routed_scale is not positive and finite">];
  let cudaLaunch = "enqueueMoe";
  let profileCategory = "moe";
  let parameters = (ins Required<Integer>:$experts, Required<Integer>:$top_k,
                        Optional<Flag, "true">:$router_norm, Optional<Real, "1e-6">:$eps,
                        Optional<Real, "1.0">:$router_input_scale,
                        Optional<Flag, "true">:$normalize_top_k,
                        Optional<Flag, "false">:$sigmoid_scores,
                        Optional<Integer, "1">:$groups, Optional<Integer, "1">:$top_groups,
                        Optional<Real, "1.0">:$routed_scale,
                        Required<Choice<["gelu_tanh", "silu"]>>:$activation,
                        Required<Weight>:$router, Optional<Weight>:$router_scale,
                        Optional<Weight>:$expert_scale, Optional<Weight>:$expert_bias,
                        Required<Weight>:$gate_up,
                        Required<Weight>:$down);
}
// Speculative decoding's data paths (DFlash, docs/design/speculative-decoding.md §2.2):
// (no operands) → [T, width]: the forward's input rows (ForwardSpec::input; `width` must equal
// its inputWidth), rows past ForwardSpec::inputRows zero. The drafter's context features.
def ForwardInput : KernelKind<"forward_input", 0> {
  let cudaLaunch = "enqueueForwardInput";
  let profileCategory = "embedding";
  let cudaKernels = "deviceCopy";
  let cudaNeedsKernel = 0;
}
// a, b → y (all one width): rows r < ForwardSpec::inputRows take a's row r, the others b's. The
// drafter's K/V input: the context rows' projected features, then the block rows' normed states.
def SelectInputRows : KernelKind<"select_input_rows", 2> {
  let inPlace = "any";
  let check = "constraintsOnly";
  let constraints = TwoOperandsOfTheResultWidth;
  let cudaKernels = "deviceCopy";
  let cudaNeedsKernel = 0;
  let cudaLaunch = "enqueuePerPart";
}
// x_0, ..., x_{n-1} (each [T, w]) → no slot: the forward's captured rows [T, n*w], x_i in
// columns [i*w, (i+1)*w) (DecodeModel::capturedRows). The target's hidden states after the
// layers a drafter reads. At most one per function.
def Capture : KernelKind<"capture", -1> {
  let cudaLaunch = "enqueueCapture";
  let cudaKernels = "deviceCopy";
  let cudaNeedsKernel = 0;
  let hasResult = 0;
}

#endif // DLM_KERNEL_OPS_TD
