// Every dlm op round-trips through the custom and the generic form.
// RUN: dlm-opt %s | dlm-opt | FileCheck %s
// RUN: dlm-opt %s --mlir-print-op-generic | dlm-opt | FileCheck %s

!kv = !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>

func.func @forward(%ids: tensor<32xi32>) -> tensor<32x512xf32> {
  %l = arith.constant dense<0.0> : tensor<32x512xf32>
  return %l : tensor<32x512xf32>
}

// CHECK-LABEL: func.func @attention_masks
func.func @attention_masks(%q: tensor<32x4x16xf32>, %k: tensor<96x2x16xf32>,
                           %v: tensor<96x2x16xf32>, %qp: tensor<32xi32>, %kp: tensor<96xi32>)
    -> (tensor<32x4x16xf32>, tensor<32x4x16xf32>, tensor<32x4x16xf32>, tensor<32x4x16xf32>,
        tensor<32x4x16xf32>) {
  // CHECK: dlm.masked_attention %{{.*}}, %{{.*}}, %{{.*}} {mask = #dlm.mask<causal>}
  %0 = dlm.masked_attention %q, %k, %v {mask = #dlm.mask<causal>}
      : tensor<32x4x16xf32>, tensor<96x2x16xf32>, tensor<96x2x16xf32> -> tensor<32x4x16xf32>
  // CHECK: {mask = #dlm.mask<bidirectional>, scale = 2.500000e-01 : f32}
  %1 = dlm.masked_attention %q, %k, %v {mask = #dlm.mask<bidirectional>, scale = 0.25 : f32}
      : tensor<32x4x16xf32>, tensor<96x2x16xf32>, tensor<96x2x16xf32> -> tensor<32x4x16xf32>
  // CHECK: {block_size = 32 : i64, mask = #dlm.mask<block_causal>}
  %2 = dlm.masked_attention %q, %k, %v {mask = #dlm.mask<block_causal>, block_size = 32}
      : tensor<32x4x16xf32>, tensor<96x2x16xf32>, tensor<96x2x16xf32> -> tensor<32x4x16xf32>
  // CHECK: positions(%{{.*}}, %{{.*}}) {mask = #dlm.mask<sliding_window>, window = 64 : i64}
  %3 = dlm.masked_attention %q, %k, %v positions(%qp, %kp)
      {mask = #dlm.mask<sliding_window>, window = 64}
      : tensor<32x4x16xf32>, tensor<96x2x16xf32>, tensor<96x2x16xf32>, tensor<32xi32>,
        tensor<96xi32> -> tensor<32x4x16xf32>
  // CHECK: {mask = #dlm.mask<sliding_window_symmetric>, window = 1024 : i64}
  %4 = dlm.masked_attention %q, %k, %v {mask = #dlm.mask<sliding_window_symmetric>, window = 1024}
      : tensor<32x4x16xf32>, tensor<96x2x16xf32>, tensor<96x2x16xf32> -> tensor<32x4x16xf32>
  return %0, %1, %2, %3, %4 : tensor<32x4x16xf32>, tensor<32x4x16xf32>, tensor<32x4x16xf32>,
      tensor<32x4x16xf32>, tensor<32x4x16xf32>
}

// CHECK-LABEL: func.func @paged_attention
func.func @paged_attention(%q: tensor<8x4x16xbf16>, %kpool: tensor<64x16x2x16xbf16>,
                           %vpool: tensor<64x16x2x16xbf16>, %qp: tensor<8xi32>,
                           %kp: tensor<?xi32>, %table: tensor<?xi32>) -> tensor<8x4x16xbf16> {
  // CHECK: dlm.masked_attention {{.*}} positions({{.*}}) pages(%{{.*}}) {mask = #dlm.mask<bidirectional>}
  %0 = dlm.masked_attention %q, %kpool, %vpool positions(%qp, %kp) pages(%table)
      {mask = #dlm.mask<bidirectional>}
      : tensor<8x4x16xbf16>, tensor<64x16x2x16xbf16>, tensor<64x16x2x16xbf16>, tensor<8xi32>,
        tensor<?xi32>, tensor<?xi32> -> tensor<8x4x16xbf16>
  return %0 : tensor<8x4x16xbf16>
}

// CHECK-LABEL: func.func @generate_block
func.func @generate_block(%prompt: tensor<32xi32>, %canvas0: tensor<32xi32>, %t: f32,
                          %key: i64) -> (tensor<32xi32>, index) {
  // CHECK: %[[EMPTY:.*]] = dlm.kv_empty : !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>
  %kv0 = dlm.kv_empty : !kv
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  // CHECK: %[[KV:.*]] = dlm.kv_commit @forward(%{{.*}}) at %{{.*}} into %{{.*}} : tensor<32xi32>, !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>
  %kv1 = dlm.kv_commit @forward(%prompt) at %c0 into %kv0 : tensor<32xi32>, !kv
  // CHECK: dlm.diffusion_loop max_steps 48 step(%[[STEP:.*]]) iter_args(%[[C:.*]] = %{{.*}}, %[[A:.*]] = %{{.*}}) : tensor<32xi32>, tensor<32xi32> {
  %canvas, %argmax, %steps = dlm.diffusion_loop max_steps 48 step(%step)
      iter_args(%c = %canvas0, %a = %canvas0) : tensor<32xi32>, tensor<32xi32> {
    // CHECK: dlm.denoise_step @forward(%[[C]]) at %{{.*}} cache(%[[KV]])
    %logits = dlm.denoise_step @forward(%c) at %c32 cache(%kv1)
        : tensor<32xi32>, !kv -> tensor<32x512xf32>
    // CHECK: dlm.entropy_accept
    // CHECK-SAME: rule = #dlm.accept<entropy_bound>
    %next, %keep, %am, %done = dlm.entropy_accept %logits, %c, %a, %t, %step, %step, %key
        {rule = #dlm.accept<entropy_bound>, bound = 0.1, renoise = #dlm.renoise<mask_token>,
         mask_token_id = 7}
        : tensor<32x512xf32>, tensor<32xi32>, tensor<32xi32>
        -> tensor<32xi32>, tensor<32xi1>, tensor<32xi32>
    // CHECK: dlm.yield %{{.*}}, %{{.*}}, %{{.*}} : tensor<32xi32>, tensor<32xi32>
    dlm.yield %done, %next, %am : tensor<32xi32>, tensor<32xi32>
  }
  return %argmax, %steps : tensor<32xi32>, index
}

// CHECK-LABEL: func.func @self_conditioned_step
func.func @self_conditioned_step(%c: tensor<32xi32>, %kv: !kv, %sc: tensor<32x64xf32>,
                                 %s: index) -> tensor<32x512xf32> {
  // CHECK: dlm.denoise_step @forward(%{{.*}}) at %{{.*}} cache(%{{.*}}) self_conditioning(%{{.*}})
  %l = dlm.denoise_step @forward(%c) at %s cache(%kv) self_conditioning(%sc)
      : tensor<32xi32>, !kv, tensor<32x64xf32> -> tensor<32x512xf32>
  return %l : tensor<32x512xf32>
}

// CHECK-LABEL: func.func @accept_rules
func.func @accept_rules(%l: tensor<32x512xf32>, %c: tensor<32xi32>, %t: f32, %step: index, %key: i64)
    -> (tensor<32xi32>, tensor<32xi32>) {
  // CHECK: rule = #dlm.accept<confidence_threshold>
  %n0, %k0, %a0, %d0 = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key
      {rule = #dlm.accept<confidence_threshold>, threshold = 0.9,
       renoise = #dlm.renoise<mask_token>, mask_token_id = 511}
      : tensor<32x512xf32>, tensor<32xi32>, tensor<32xi32>
      -> tensor<32xi32>, tensor<32xi1>, tensor<32xi32>
  // CHECK: rule = #dlm.accept<top_k_schedule>, schedule_steps = 8
  %n1, %k1, %a1, %d1 = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key
      {rule = #dlm.accept<top_k_schedule>, k = 32, schedule_steps = 8, renoise = #dlm.renoise<mask_token>,
       mask_token_id = 511, stability = 0, confidence = 0.0}
      : tensor<32x512xf32>, tensor<32xi32>, tensor<32xi32>
      -> tensor<32xi32>, tensor<32xi1>, tensor<32xi32>
  return %n0, %n1 : tensor<32xi32>, tensor<32xi32>
}

// CHECK-LABEL: func.func @verify_drafts
func.func @verify_drafts(%d: tensor<15xi32>, %p: tensor<16x512xf32>, %q: tensor<15x512xf32>)
    -> (index, index) {
  // CHECK: dlm.spec_verify %{{.*}}, %{{.*}} {mode = #dlm.verify<greedy>}
  %n0, %t0 = dlm.spec_verify %d, %p {mode = #dlm.verify<greedy>}
      : tensor<15xi32>, tensor<16x512xf32> -> index, tensor<16xi32>
  // CHECK: dlm.spec_verify %{{.*}}, %{{.*}} draft_probs(%{{.*}}) {mode = #dlm.verify<rejection>}
  %n1, %t1 = dlm.spec_verify %d, %p draft_probs(%q) {mode = #dlm.verify<rejection>}
      : tensor<15xi32>, tensor<16x512xf32>, tensor<15x512xf32> -> index, tensor<16xi32>
  return %n0, %n1 : index, index
}

// CHECK-LABEL: func.func @transformer_pieces
func.func @transformer_pieces(%ids: tensor<8xi32>, %pos: tensor<8xi32>) -> tensor<8x512xf32> {
  // CHECK: dlm.weight "model.transformer.wte.weight" : tensor<576x64xbf16>
  %wte = dlm.weight "model.transformer.wte.weight" : tensor<576x64xbf16>
  %norm = dlm.weight "model.transformer.blocks.0.attn_norm.weight" : tensor<64xf32>
  %wq = dlm.weight "model.transformer.blocks.0.q_proj.weight" : tensor<64x64xf32>
  %bq = dlm.weight "model.layers.0.self_attn.q_proj.bias" : tensor<64xf32>
  %g = dlm.weight "g" : tensor<128x64xf32>
  %u = dlm.weight "u" : tensor<128x64xf32>
  %d = dlm.weight "d" : tensor<64x128xf32>
  // CHECK: dlm.embedding %{{.*}}, %{{.*}} {scale = 8.000000e+00 : f32}
  %x = dlm.embedding %ids, %wte {scale = 8.0 : f32} : tensor<8xi32>, tensor<576x64xbf16> -> tensor<8x64xf32>
  // CHECK: dlm.rms_norm %{{.*}}, %{{.*}} {eps = 1.000000e-05 : f64}
  %h = dlm.rms_norm %x, %norm {eps = 1.0e-5 : f64} : tensor<8x64xf32>, tensor<64xf32> -> tensor<8x64xf32>
  // CHECK: dlm.linear %{{.*}}, %{{.*}} bias(%{{.*}})
  %q = dlm.linear %h, %wq bias(%bq) : tensor<8x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<8x64xf32>
  %q3 = tensor.expand_shape %q [[0], [1, 2]] output_shape [8, 4, 16] : tensor<8x64xf32> into tensor<8x4x16xf32>
  // CHECK: dlm.rope %{{.*}}, %{{.*}} {rotary_dim = 8 : i64, theta = 5.000000e+05 : f64}
  %r = dlm.rope %q3, %pos {theta = 5.0e5 : f64, rotary_dim = 8} : tensor<8x4x16xf32>, tensor<8xi32> -> tensor<8x4x16xf32>
  // CHECK: dlm.gated_mlp {{.*}} {activation = #dlm.activation<silu>}
  %m = dlm.gated_mlp %h, %g, %u, %d {activation = #dlm.activation<silu>}
      : tensor<8x64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32> -> tensor<8x64xf32>
  // CHECK: dlm.norm_linear %{{.*}}, %{{.*}}, %{{.*}} bias(%{{.*}}) {eps = 1.000000e-05 : f64}
  %nl = dlm.norm_linear %x, %norm, %wq bias(%bq) {eps = 1.0e-5 : f64} : tensor<8x64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<8x64xf32>
  // CHECK: dlm.lm_head %{{.*}}, %{{.*}} {softcap = 3.000000e+01 : f64}
  %logits = dlm.lm_head %m, %wte {softcap = 30.0 : f64} : tensor<8x64xf32>, tensor<576x64xbf16> -> tensor<8x512xf32>
  return %logits : tensor<8x512xf32>
}

// DiffusionGemma's ops: a weightless norm, proportional RoPE, the layer scalar, the
// self-conditioning soft embedding and the experts.
// CHECK-LABEL: func.func @gemma_ops
func.func @gemma_ops(%x: tensor<8x64xf32>, %v: tensor<8x2x16xf32>, %pos: tensor<8xi32>,
                     %l: tensor<8x512xf32>) -> (tensor<8x64xf32>, tensor<8x2x16xf32>) {
  %wte = dlm.weight "embed" : tensor<576x64xbf16>
  %s = dlm.weight "layer_scalar" : tensor<1xbf16>
  %router = dlm.weight "router" : tensor<4x64xf32>
  %rs = dlm.weight "router_scale" : tensor<64xf32>
  %es = dlm.weight "expert_scale" : tensor<4xf32>
  %gu = dlm.weight "gate_up" : tensor<4x32x64xf32>
  %dn = dlm.weight "down" : tensor<4x64x16xf32>
  // CHECK: dlm.rms_norm %{{[a-z0-9]+}} {eps = {{.*}} : f64} : tensor<8x2x16xf32> -> tensor<8x2x16xf32>
  %vn = dlm.rms_norm %v {eps = 1.0e-5 : f64} : tensor<8x2x16xf32> -> tensor<8x2x16xf32>
  // CHECK: dlm.rope %{{.*}}, %{{.*}} {rotated_pairs = 2 : i64, theta = 1.000000e+06 : f64}
  %r = dlm.rope %vn, %pos {theta = 1.0e6 : f64, rotated_pairs = 2} : tensor<8x2x16xf32>, tensor<8xi32> -> tensor<8x2x16xf32>
  // CHECK: dlm.scale %{{.*}}, %{{.*}} : tensor<8x64xf32>, tensor<1xbf16>
  %y = dlm.scale %x, %s : tensor<8x64xf32>, tensor<1xbf16>
  // CHECK: dlm.soft_embedding %{{.*}}, %{{.*}} {scale = 8.000000e+00 : f32}
  %e = dlm.soft_embedding %l, %wte {scale = 8.0 : f32} : tensor<8x512xf32>, tensor<576x64xbf16> -> tensor<8x64xf32>
  // CHECK: dlm.soft_embedding %{{.*}}, %{{.*}} {mask_token = 511 : i64}
  %smoothing = dlm.soft_embedding %l, %wte {mask_token = 511 : i64} : tensor<8x512xf32>, tensor<576x64xbf16> -> tensor<8x64xf32>
  // CHECK: dlm.moe {{.*}} router_scale(%{{.*}} : tensor<64xf32>) expert_scale(%{{.*}} : tensor<4xf32>) {activation = #dlm.activation<gelu_tanh>, eps = {{.*}} : f64, router_input_scale = 1.250000e-01 : f64, top_k = 2 : i64}
  %m = dlm.moe %y, %e, %router, %gu, %dn router_scale(%rs : tensor<64xf32>)
        expert_scale(%es : tensor<4xf32>) {top_k = 2 : i64, eps = 1.0e-6 : f64,
        router_input_scale = 0.125 : f64, activation = #dlm.activation<gelu_tanh>}
      : tensor<8x64xf32>, tensor<8x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>,
        tensor<4x64x16xf32> -> tensor<8x64xf32>
  // Qwen3-MoE's routing: the input as it is, no scales, the chosen weights as the softmax gave.
  // CHECK: dlm.moe %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}} {activation = #dlm.activation<silu>, normalize_top_k = false, top_k = 2 : i64} :
  %q = dlm.moe %m, %m, %router, %gu, %dn {top_k = 2 : i64, normalize_top_k = false,
        activation = #dlm.activation<silu>}
      : tensor<8x64xf32>, tensor<8x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>,
        tensor<4x64x16xf32> -> tensor<8x64xf32>
  // LLaDA2's routing: sigmoid scores, an expert bias, the best 1 of 2 groups, a routed scale.
  // CHECK: dlm.moe {{.*}} expert_bias(%{{.*}} : tensor<4xf32>) {activation = #dlm.activation<silu>, groups = 2 : i64, routed_scale = 2.500000e+00 : f64, sigmoid_scores = true, top_k = 2 : i64}
  %l2 = dlm.moe %q, %q, %router, %gu, %dn expert_bias(%es : tensor<4xf32>)
        {top_k = 2 : i64, sigmoid_scores = true, groups = 2 : i64, top_groups = 1 : i64,
         routed_scale = 2.5 : f64, activation = #dlm.activation<silu>}
      : tensor<8x64xf32>, tensor<8x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>,
        tensor<4x64x16xf32> -> tensor<8x64xf32>
  return %l2, %r : tensor<8x64xf32>, tensor<8x2x16xf32>
}
