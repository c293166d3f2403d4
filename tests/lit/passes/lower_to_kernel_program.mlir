// RUN: dlm-opt %s -dlm-fuse-norm-linear -dlm-lower-to-kernel-program -split-input-file -mlir-print-op-on-diagnostic=false -verify-diagnostics | FileCheck %s

// One layer (hidden 8, 2 heads and 1 KV head of 4, MLP 16, vocabulary 10 of 12 rows) with a
// dynamic token count. Expected program: the attention norm fused into q, k and v (norm_linear),
// kv_store before attention (one KV layer per attention), the gated MLP as gate, up, silu_mul,
// down, both residual adds folded into the o and down projections (accumulate: they take the
// residual as a second operand), the final norm folded into the LM head. Plan, in floats per
// token row (widths aligned to 16): x lives at 32 and o_proj accumulates into it in place; q (0)
// and k (48) are roped in place; attention (16) avoids q, k, v and x; mlp_norm cannot be in place
// (h is read again by down_proj); silu_mul overwrites the gate; down_proj accumulates into h in
// place; the logits are the caller's buffer (no offset). Peak: x, k, v, attention, q at once =
// 80.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: dlm.kernel_program = [
// CHECK-SAME: {kind = "embedding", layer = -1 : i64, name = "embedding", offset = 32 : i64, operands = array<i64: 0>, result = 2 : i64, weight = "embed", width = 8 : i64}
// CHECK-SAME: {eps = 1.000000e-05 : f64, kind = "norm_linear", layer = 0 : i64, name = "layers.0.q_proj", norm_weight = "layers.0.attn_norm", offset = 0 : i64, operands = array<i64: 2>, result = 3 : i64, weight = "layers.0.q", width = 8 : i64}
// CHECK-SAME: {eps = 1.000000e-05 : f64, kind = "norm_linear", layer = 0 : i64, name = "layers.0.k_proj", norm_weight = "layers.0.attn_norm", offset = 48 : i64, operands = array<i64: 2>, result = 4 : i64, weight = "layers.0.k", width = 4 : i64}
// CHECK-SAME: {eps = 1.000000e-05 : f64, kind = "norm_linear", layer = 0 : i64, name = "layers.0.v_proj", norm_weight = "layers.0.attn_norm", offset = 64 : i64, operands = array<i64: 2>, result = 5 : i64, weight = "layers.0.v", width = 4 : i64}
// CHECK-SAME: {head_dim = 4 : i64, kind = "rope", layer = 0 : i64, name = "layers.0.rope", offset = 0 : i64, operands = array<i64: 3, 1>, result = 6 : i64, theta = 1.000000e+04 : f64, width = 8 : i64}
// CHECK-SAME: {head_dim = 4 : i64, kind = "rope", layer = 0 : i64, name = "layers.0.rope#2", offset = 48 : i64, operands = array<i64: 4, 1>, result = 7 : i64, theta = 1.000000e+04 : f64, width = 4 : i64}
// CHECK-SAME: {kind = "kv_store", layer = 0 : i64, name = "layers.0.kv_store", operands = array<i64: 7, 5>}
// CHECK-SAME: {head_dim = 4 : i64, heads = 2 : i64, kind = "attention", kv_heads = 1 : i64, layer = 0 : i64, mask = "causal", name = "layers.0.attention", offset = 16 : i64, operands = array<i64: 6, 7, 5>, result = 8 : i64, width = 8 : i64}
// CHECK-SAME: {accumulate = true, kind = "linear", layer = 0 : i64, name = "layers.0.o_proj", offset = 32 : i64, operands = array<i64: 8, 2>, result = 9 : i64, weight = "layers.0.o", width = 8 : i64}
// CHECK-SAME: {eps = 1.000000e-05 : f64, kind = "rms_norm", layer = 0 : i64, name = "layers.0.mlp_norm", offset = 48 : i64, operands = array<i64: 9>, result = 10 : i64, weight = "layers.0.mlp_norm", width = 8 : i64}
// CHECK-SAME: {kind = "linear", layer = 0 : i64, name = "layers.0.gate_proj", offset = 0 : i64, operands = array<i64: 10>, result = 11 : i64, weight = "layers.0.gate", width = 16 : i64}
// CHECK-SAME: {kind = "linear", layer = 0 : i64, name = "layers.0.up_proj", offset = 16 : i64, operands = array<i64: 10>, result = 12 : i64, weight = "layers.0.up", width = 16 : i64}
// CHECK-SAME: {kind = "silu_mul", layer = 0 : i64, name = "layers.0.silu_mul", offset = 0 : i64, operands = array<i64: 11, 12>, result = 13 : i64, width = 16 : i64}
// CHECK-SAME: {accumulate = true, kind = "linear", layer = 0 : i64, name = "layers.0.down_proj", offset = 32 : i64, operands = array<i64: 13, 9>, result = 14 : i64, weight = "layers.0.down", width = 8 : i64}
// CHECK-SAME: {eps = 1.000000e-05 : f64, kind = "lm_head", layer = -1 : i64, logit_shift = false, name = "lm_head", norm_weight = "final_norm", operands = array<i64: 14>, result = 15 : i64, weight = "lm_head", width = 10 : i64}
// CHECK-SAME: dlm.unplanned_row_elements = 128 : i64, dlm.workspace_row_elements = 80 : i64
func.func @forward(%ids: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x10xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %ids, %c0 : tensor<?xi32>
  %embed = dlm.weight "embed" : tensor<12x8xf32>
  %x = dlm.embedding %ids, %embed : tensor<?xi32>, tensor<12x8xf32> -> tensor<?x8xf32>
  %g = dlm.weight "layers.0.attn_norm" : tensor<8xf32>
  %xn = dlm.rms_norm %x, %g {eps = 1.0e-5 : f64} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %wq = dlm.weight "layers.0.q" : tensor<8x8xf32>
  %q = dlm.linear %xn, %wq : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  %wk = dlm.weight "layers.0.k" : tensor<4x8xf32>
  %k = dlm.linear %xn, %wk : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
  %wv = dlm.weight "layers.0.v" : tensor<4x8xf32>
  %k3 = tensor.expand_shape %k [[0], [1, 2]] output_shape [%n, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
  %v = dlm.linear %xn, %wv : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
  %q3 = tensor.expand_shape %q [[0], [1, 2]] output_shape [%n, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
  %v3 = tensor.expand_shape %v [[0], [1, 2]] output_shape [%n, 1, 4] : tensor<?x4xf32> into tensor<?x1x4xf32>
  %qr = dlm.rope %q3, %pos {theta = 1.0e4 : f64} : tensor<?x2x4xf32>, tensor<?xi32> -> tensor<?x2x4xf32>
  %kr = dlm.rope %k3, %pos {theta = 1.0e4 : f64} : tensor<?x1x4xf32>, tensor<?xi32> -> tensor<?x1x4xf32>
  %a = dlm.masked_attention %qr, %kr, %v3 {mask = #dlm.mask<causal>} : tensor<?x2x4xf32>, tensor<?x1x4xf32>, tensor<?x1x4xf32> -> tensor<?x2x4xf32>
  %a2 = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
  %wo = dlm.weight "layers.0.o" : tensor<8x8xf32>
  %o = dlm.linear %a2, %wo : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  %h = arith.addf %x, %o : tensor<?x8xf32>
  %m = dlm.weight "layers.0.mlp_norm" : tensor<8xf32>
  %hn = dlm.rms_norm %h, %m {eps = 1.0e-5 : f64} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %wg = dlm.weight "layers.0.gate" : tensor<16x8xf32>
  %wu = dlm.weight "layers.0.up" : tensor<16x8xf32>
  %wd = dlm.weight "layers.0.down" : tensor<8x16xf32>
  %mlp = dlm.gated_mlp %hn, %wg, %wu, %wd {activation = #dlm.activation<silu>} : tensor<?x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  %y = arith.addf %h, %mlp : tensor<?x8xf32>
  %f = dlm.weight "final_norm" : tensor<8xf32>
  %yn = dlm.rms_norm %y, %f {eps = 1.0e-5 : f64} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %head = dlm.weight "lm_head" : tensor<12x8xf32>
  %logits = dlm.lm_head %yn, %head : tensor<?x8xf32>, tensor<12x8xf32> -> tensor<?x10xf32>
  return %logits : tensor<?x10xf32>
}

// -----

// A symmetric sliding window has no kernel yet.
func.func @forward(%ids: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x10xf32> {
  %embed = dlm.weight "embed" : tensor<12x8xf32>
  %x = dlm.embedding %ids, %embed : tensor<?xi32>, tensor<12x8xf32> -> tensor<?x8xf32>
  %c0 = arith.constant 0 : index
  %n = tensor.dim %ids, %c0 : tensor<?xi32>
  %q = tensor.expand_shape %x [[0], [1, 2]] output_shape [%n, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
  // expected-error @+1 {{dlm-lower-to-kernel-program: not supported yet: attention mask 'sliding_window_symmetric' in a kernel program}}
  %a = dlm.masked_attention %q, %q, %q {mask = #dlm.mask<sliding_window_symmetric>, window = 4 : i64} : tensor<?x2x4xf32>, tensor<?x2x4xf32>, tensor<?x2x4xf32> -> tensor<?x2x4xf32>
  %a2 = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
  %head = dlm.weight "lm_head" : tensor<12x8xf32>
  %logits = dlm.lm_head %a2, %head : tensor<?x8xf32>, tensor<12x8xf32> -> tensor<?x10xf32>
  return %logits : tensor<?x10xf32>
}

// -----

// A block-causal mask keeps its block size; a partial rotary embedding its rotary dims.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: {head_dim = 4 : i64, kind = "rope", {{.*}}rotary_dim = 2 : i64, theta = 1.000000e+04 : f64, width = 8 : i64}
// CHECK-SAME: {block_size = 4 : i64, head_dim = 4 : i64, heads = 2 : i64, kind = "attention", {{.*}}mask = "block_causal"
func.func @forward(%ids: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x10xf32> {
  %embed = dlm.weight "embed" : tensor<12x8xf32>
  %x = dlm.embedding %ids, %embed : tensor<?xi32>, tensor<12x8xf32> -> tensor<?x8xf32>
  %c0 = arith.constant 0 : index
  %n = tensor.dim %ids, %c0 : tensor<?xi32>
  %q = tensor.expand_shape %x [[0], [1, 2]] output_shape [%n, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
  %r = dlm.rope %q, %pos {theta = 1.0e+04 : f64, rotary_dim = 2 : i64} : tensor<?x2x4xf32>, tensor<?xi32> -> tensor<?x2x4xf32>
  %a = dlm.masked_attention %r, %q, %q {mask = #dlm.mask<block_causal>, block_size = 4 : i64} : tensor<?x2x4xf32>, tensor<?x2x4xf32>, tensor<?x2x4xf32> -> tensor<?x2x4xf32>
  %a2 = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
  %head = dlm.weight "lm_head" : tensor<12x8xf32>
  %logits = dlm.lm_head %a2, %head : tensor<?x8xf32>, tensor<12x8xf32> -> tensor<?x10xf32>
  return %logits : tensor<?x10xf32>
}

// -----

// An op with no cpu kernel is named.
func.func @forward(%ids: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x10xf32> {
  %embed = dlm.weight "embed" : tensor<12x8xf32>
  %x = dlm.embedding %ids, %embed : tensor<?xi32>, tensor<12x8xf32> -> tensor<?x8xf32>
  // expected-error @+1 {{dlm-lower-to-kernel-program: not supported yet: 'arith.mulf' in a cpu kernel program}}
  %y = arith.mulf %x, %x : tensor<?x8xf32>
  %head = dlm.weight "lm_head" : tensor<12x8xf32>
  %logits = dlm.lm_head %y, %head : tensor<?x8xf32>, tensor<12x8xf32> -> tensor<?x10xf32>
  return %logits : tensor<?x10xf32>
}

// -----

// The forward must return the LM head's logits.
func.func @forward(%ids: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x8xf32> {
  %embed = dlm.weight "embed" : tensor<12x8xf32>
  %x = dlm.embedding %ids, %embed : tensor<?xi32>, tensor<12x8xf32> -> tensor<?x8xf32>
  // expected-error @+1 {{dlm-lower-to-kernel-program: not supported yet: a forward that does not return the logits of a dlm.lm_head}}
  return %x : tensor<?x8xf32>
}

// -----

// expected-error @+1 {{dlm-lower-to-kernel-program: no function @forward}}
module {
  func.func @generate() {
    return
  }
}
