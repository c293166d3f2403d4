// One case per verifier rule of the dlm ops.
// RUN: dlm-opt %s -split-input-file -verify-diagnostics

func.func @attention_query_rank(%q: tensor<4x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{query must have rank 3, got rank 2}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<causal>}
      : tensor<4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_kv_shapes(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>, %v: tensor<9x2x16xf32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{key and value shapes differ in dimension 0 (8 vs 9)}}
  %0 = dlm.masked_attention %q, %k, %v {mask = #dlm.mask<causal>}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<9x2x16xf32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_head_dim(%q: tensor<4x4x32xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{key head_dim is 16, expected 32}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<causal>}
      : tensor<4x4x32xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_gqa(%q: tensor<4x5x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x5x16xf32> {
  // expected-error@+1 {{query heads (5) must be a multiple of kv heads (2)}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<causal>}
      : tensor<4x5x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x5x16xf32>
  return %0 : tensor<4x5x16xf32>
}

// -----

func.func @attention_result(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x2x16xf32> {
  // expected-error@+1 {{result heads is 2, expected 4}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<causal>}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x2x16xf32>
  return %0 : tensor<4x2x16xf32>
}

// -----

func.func @attention_more_queries_than_keys(%q: tensor<9x4x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<9x4x16xf32> {
  // expected-error@+1 {{without positions the 9 queries must be the last keys, but there are only 8 keys}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<bidirectional>}
      : tensor<9x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<9x4x16xf32>
  return %0 : tensor<9x4x16xf32>
}

// -----

func.func @attention_positions(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>, %qp: tensor<5xi32>, %kp: tensor<8xi32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{query positions length is 5, expected 4}}
  %0 = dlm.masked_attention %q, %k, %k positions(%qp, %kp) {mask = #dlm.mask<causal>}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32>, tensor<5xi32>, tensor<8xi32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_key_positions(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>, %qp: tensor<4xi32>, %kp: tensor<7xi32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{key positions length is 7, expected 8}}
  %0 = dlm.masked_attention %q, %k, %k positions(%qp, %kp) {mask = #dlm.mask<causal>}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32>, tensor<4xi32>, tensor<7xi32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_paged_rank(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>, %qp: tensor<4xi32>, %kp: tensor<8xi32>, %t: tensor<2xi32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{paged key pool must have rank 4, got rank 3}}
  %0 = dlm.masked_attention %q, %k, %k positions(%qp, %kp) pages(%t) {mask = #dlm.mask<causal>}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32>, tensor<4xi32>, tensor<8xi32>, tensor<2xi32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_paged_needs_positions(%q: tensor<4x4x16xf32>, %k: tensor<8x16x2x16xf32>, %t: tensor<2xi32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{paged attention needs positions(query, key) to know the key count}}
  %0 = "dlm.masked_attention"(%q, %k, %k, %t) <{mask = #dlm.mask<causal>, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 1>}>
      : (tensor<4x4x16xf32>, tensor<8x16x2x16xf32>, tensor<8x16x2x16xf32>, tensor<2xi32>) -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_window_missing(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{mask sliding_window_symmetric needs a window}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<sliding_window_symmetric>}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_window_range(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{window must be positive, got 0}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<sliding_window>, window = 0}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_window_unexpected(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{window is only meaningful for sliding-window masks, not causal}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<causal>, window = 4}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_block_missing(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{mask block_causal needs a block_size}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<block_causal>}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_block_range(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{block_size must be positive, got -2}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<block_causal>, block_size = -2}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_block_unexpected(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{block_size is only meaningful for block_causal masks, not bidirectional}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<bidirectional>, block_size = 4}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

func.func @attention_scale(%q: tensor<4x4x16xf32>, %k: tensor<8x2x16xf32>) -> tensor<4x4x16xf32> {
  // expected-error@+1 {{scale must be positive and finite, got -1}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<causal>, scale = -1.0 : f32}
      : tensor<4x4x16xf32>, tensor<8x2x16xf32>, tensor<8x2x16xf32> -> tensor<4x4x16xf32>
  return %0 : tensor<4x4x16xf32>
}

// -----

!kv = !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>
func.func private @forward(%ids: tensor<8xi32>) -> tensor<8x64xf32>
func.func @denoise_canvas_rank(%c: tensor<2x8xi32>, %kv: !kv, %s: index) -> tensor<8x64xf32> {
  // expected-error@+1 {{canvas must have rank 1, got rank 2}}
  %l = dlm.denoise_step @forward(%c) at %s cache(%kv) : tensor<2x8xi32>, !kv -> tensor<8x64xf32>
  return %l : tensor<8x64xf32>
}

// -----

!kv = !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>
func.func private @forward(%ids: tensor<8xi32>) -> tensor<8x64xf32>
func.func @denoise_rows(%c: tensor<8xi32>, %kv: !kv, %s: index) -> tensor<7x64xf32> {
  // expected-error@+1 {{logits rows is 7, expected 8}}
  %l = dlm.denoise_step @forward(%c) at %s cache(%kv) : tensor<8xi32>, !kv -> tensor<7x64xf32>
  return %l : tensor<7x64xf32>
}

// -----

!kv = !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>
func.func private @forward(%ids: tensor<8xi32>) -> tensor<8x64xf32>
func.func @denoise_self_conditioning(%c: tensor<8xi32>, %kv: !kv, %s: index, %sc: tensor<4x32xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{self-conditioning rows is 4, expected 8}}
  %l = dlm.denoise_step @forward(%c) at %s cache(%kv) self_conditioning(%sc) : tensor<8xi32>, !kv, tensor<4x32xf32> -> tensor<8x64xf32>
  return %l : tensor<8x64xf32>
}

// -----

!kv = !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>
func.func @denoise_unknown_model(%c: tensor<8xi32>, %kv: !kv, %s: index) -> tensor<8x64xf32> {
  // expected-error@+1 {{model function @missing is not a func.func in scope}}
  %l = dlm.denoise_step @missing(%c) at %s cache(%kv) : tensor<8xi32>, !kv -> tensor<8x64xf32>
  return %l : tensor<8x64xf32>
}

// -----

// expected-error@+1 {{kv_cache page_size must be a positive power of two, got 12}}
func.func @kv_page_size(%kv: !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 12>)

// -----

// expected-error@+1 {{kv_cache needs at least one layer, got 0}}
func.func @kv_layers(%kv: !dlm.kv_cache<layers = 0, kv_heads = 2, head_dim = 16, page_size = 16>)

// -----

!kv = !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>
func.func private @forward(%ids: tensor<8xi32>) -> tensor<8x64xf32>
func.func @commit_rank(%t: tensor<1x8xi32>, %kv: !kv, %s: index) -> !kv {
  // expected-error@+1 {{tokens must have rank 1, got rank 2}}
  %0 = dlm.kv_commit @forward(%t) at %s into %kv : tensor<1x8xi32>, !kv
  return %0 : !kv
}

// -----

!kv = !dlm.kv_cache<layers = 2, kv_heads = 2, head_dim = 16, page_size = 16>
func.func @commit_unknown_model(%t: tensor<8xi32>, %kv: !kv, %s: index) -> !kv {
  // expected-error@+1 {{model function @nowhere is not a func.func in scope}}
  %0 = dlm.kv_commit @nowhere(%t) at %s into %kv : tensor<8xi32>, !kv
  return %0 : !kv
}

// -----

func.func @accept_lengths(%l: tensor<8x64xf32>, %c: tensor<7xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{canvas length is 7, expected 8}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<entropy_bound>, bound = 0.1, renoise = #dlm.renoise<uniform_token>}
      : tensor<8x64xf32>, tensor<7xi32>, tensor<7xi32> -> tensor<7xi32>, tensor<7xi1>, tensor<7xi32>
  return
}

// -----

func.func @accept_bound_missing(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{rule entropy_bound needs an entropy bound}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<entropy_bound>, renoise = #dlm.renoise<uniform_token>}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_bound_range(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{entropy bound must be positive and finite, got 0}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<entropy_bound>, bound = 0.0, renoise = #dlm.renoise<uniform_token>}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_foreign_parameter(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{threshold is not a parameter of rule entropy_bound}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<entropy_bound>, bound = 0.1, threshold = 0.5, renoise = #dlm.renoise<uniform_token>}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_threshold_missing(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{rule confidence_threshold needs a threshold}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<confidence_threshold>, renoise = #dlm.renoise<mask_token>, mask_token_id = 3}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_threshold_range(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{threshold must be in (0, 1], got 1.5}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<confidence_threshold>, threshold = 1.5, renoise = #dlm.renoise<mask_token>, mask_token_id = 3}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_k_missing(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{rule top_k_schedule needs k and schedule_steps}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<top_k_schedule>, schedule_steps = 2, renoise = #dlm.renoise<mask_token>, mask_token_id = 3}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_k_range(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{k must be in [1, canvas length 8], got 9}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<top_k_schedule>, k = 9, schedule_steps = 2, renoise = #dlm.renoise<mask_token>, mask_token_id = 3}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_schedule_steps(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{schedule_steps must be in [1, 65536], got 0}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<top_k_schedule>, k = 8, schedule_steps = 0, renoise = #dlm.renoise<mask_token>, mask_token_id = 3}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_schedule_foreign(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{schedule_steps is not a parameter of rule entropy_bound}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<entropy_bound>, bound = 0.1, schedule_steps = 2, renoise = #dlm.renoise<mask_token>, mask_token_id = 3}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_mask_token_missing(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{rule entropy_bound with renoise mask_token needs mask_token_id}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<entropy_bound>, bound = 0.1, renoise = #dlm.renoise<mask_token>}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_mask_token_range(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{mask_token_id 64 is outside the vocabulary [0, 64)}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<entropy_bound>, bound = 0.1, renoise = #dlm.renoise<mask_token>, mask_token_id = 64}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_stability(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{stability must be in [0, 1024], got -1}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<entropy_bound>, bound = 0.1, renoise = #dlm.renoise<uniform_token>, stability = -1}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @accept_confidence(%l: tensor<8x64xf32>, %c: tensor<8xi32>, %t: f32, %step: index, %key: i64) {
  // expected-error@+1 {{confidence bound must be non-negative and finite, got -0.5}}
  %n, %k, %a, %d = dlm.entropy_accept %l, %c, %c, %t, %step, %step, %key {rule = #dlm.accept<entropy_bound>, bound = 0.1, renoise = #dlm.renoise<uniform_token>, confidence = -0.5}
      : tensor<8x64xf32>, tensor<8xi32>, tensor<8xi32> -> tensor<8xi32>, tensor<8xi1>, tensor<8xi32>
  return
}

// -----

func.func @verify_lengths(%d: tensor<15xi32>, %p: tensor<15x64xf32>) {
  // expected-error@+1 {{mismatched draft/target lengths: 15 drafted tokens need 16 target rows, got 15}}
  %n, %t = dlm.spec_verify %d, %p {mode = #dlm.verify<greedy>} : tensor<15xi32>, tensor<15x64xf32> -> index, tensor<16xi32>
  return
}

// -----

func.func @verify_tokens_length(%d: tensor<15xi32>, %p: tensor<16x64xf32>) {
  // expected-error@+1 {{tokens length is 15, expected 16}}
  %n, %t = dlm.spec_verify %d, %p {mode = #dlm.verify<greedy>} : tensor<15xi32>, tensor<16x64xf32> -> index, tensor<15xi32>
  return
}

// -----

func.func @verify_rejection_needs_q(%d: tensor<15xi32>, %p: tensor<16x64xf32>) {
  // expected-error@+1 {{rejection verification needs the draft distributions (draft_probs)}}
  %n, %t = dlm.spec_verify %d, %p {mode = #dlm.verify<rejection>} : tensor<15xi32>, tensor<16x64xf32> -> index, tensor<16xi32>
  return
}

// -----

func.func @verify_greedy_takes_no_q(%d: tensor<15xi32>, %p: tensor<16x64xf32>, %q: tensor<15x64xf32>) {
  // expected-error@+1 {{greedy verification takes no draft distributions}}
  %n, %t = dlm.spec_verify %d, %p draft_probs(%q) {mode = #dlm.verify<greedy>} : tensor<15xi32>, tensor<16x64xf32>, tensor<15x64xf32> -> index, tensor<16xi32>
  return
}

// -----

func.func @verify_q_vocab(%d: tensor<15xi32>, %p: tensor<16x64xf32>, %q: tensor<15x32xf32>) {
  // expected-error@+1 {{draft distribution vocab is 32, expected 64}}
  %n, %t = dlm.spec_verify %d, %p draft_probs(%q) {mode = #dlm.verify<rejection>} : tensor<15xi32>, tensor<16x64xf32>, tensor<15x32xf32> -> index, tensor<16xi32>
  return
}

// -----

func.func @loop_step_cap(%c: tensor<8xi32>) {
  // expected-error@+1 {{max_steps must be in [0, 65536], got -1}}
  %r, %s = dlm.diffusion_loop max_steps -1 step(%i) iter_args(%x = %c) : tensor<8xi32> {
    %t = arith.constant true
    dlm.yield %t, %x : tensor<8xi32>
  }
  return
}

// -----

func.func @loop_step_cap_too_large(%c: tensor<8xi32>) {
  // expected-error@+1 {{max_steps must be in [0, 65536], got 100000}}
  %r, %s = dlm.diffusion_loop max_steps 100000 step(%i) iter_args(%x = %c) : tensor<8xi32> {
    %t = arith.constant true
    dlm.yield %t, %x : tensor<8xi32>
  }
  return
}

// -----

func.func @loop_yield_count(%c: tensor<8xi32>) {
  // expected-error@+1 {{dlm.yield gives 0 carried values, expected 1}}
  %r, %s = dlm.diffusion_loop max_steps 4 step(%i) iter_args(%x = %c) : tensor<8xi32> {
    %t = arith.constant true
    dlm.yield %t
  }
  return
}

// -----

func.func @loop_yield_type(%c: tensor<8xi32>, %d: tensor<4xi32>) {
  // expected-error@+1 {{dlm.yield value #0 has type 'tensor<4xi32>', expected 'tensor<8xi32>'}}
  %r, %s = dlm.diffusion_loop max_steps 4 step(%i) iter_args(%x = %c) : tensor<8xi32> {
    %t = arith.constant true
    dlm.yield %t, %d : tensor<4xi32>
  }
  return
}

// -----

func.func @loop_block_arguments(%c: tensor<8xi32>) {
  // expected-error@+1 {{body must take the step and 1 carried values, takes 1 arguments}}
  %r, %s = "dlm.diffusion_loop"(%c) <{max_steps = 4 : i64}> ({
  ^bb0(%i: index):
    %t = arith.constant true
    "dlm.yield"(%t, %c) : (i1, tensor<8xi32>) -> ()
  }) : (tensor<8xi32>) -> (tensor<8xi32>, index)
  return
}

// -----

func.func @loop_step_argument(%c: tensor<8xi32>) {
  // expected-error@+1 {{the first body argument (the step) must be an index}}
  %r, %s = "dlm.diffusion_loop"(%c) <{max_steps = 4 : i64}> ({
  ^bb0(%i: i32, %x: tensor<8xi32>):
    %t = arith.constant true
    "dlm.yield"(%t, %x) : (i1, tensor<8xi32>) -> ()
  }) : (tensor<8xi32>) -> (tensor<8xi32>, index)
  return
}

// -----

func.func @loop_result_count(%c: tensor<8xi32>) {
  // expected-error@+1 {{expected 1 carried results, got 0}}
  %s = "dlm.diffusion_loop"(%c) <{max_steps = 4 : i64}> ({
  ^bb0(%i: index, %x: tensor<8xi32>):
    %t = arith.constant true
    "dlm.yield"(%t, %x) : (i1, tensor<8xi32>) -> ()
  }) : (tensor<8xi32>) -> (index)
  return
}

// -----

func.func @loop_argument_type(%c: tensor<8xi32>) {
  // expected-error@+1 {{carried value #0 has type 'tensor<8xi32>' but the body argument has type 'tensor<8xi64>'}}
  %r, %s = "dlm.diffusion_loop"(%c) <{max_steps = 4 : i64}> ({
  ^bb0(%i: index, %x: tensor<8xi64>):
    %t = arith.constant true
    "dlm.yield"(%t, %c) : (i1, tensor<8xi32>) -> ()
  }) : (tensor<8xi32>) -> (tensor<8xi32>, index)
  return
}

// -----

func.func @loop_result_type(%c: tensor<8xi32>) {
  // expected-error@+1 {{result #0 has type 'tensor<8xi64>' but carried value #0 has type 'tensor<8xi32>'}}
  %r, %s = "dlm.diffusion_loop"(%c) <{max_steps = 4 : i64}> ({
  ^bb0(%i: index, %x: tensor<8xi32>):
    %t = arith.constant true
    "dlm.yield"(%t, %x) : (i1, tensor<8xi32>) -> ()
  }) : (tensor<8xi32>) -> (tensor<8xi64>, index)
  return
}

// -----

func.func @yield_outside_loop(%t: i1) {
  // expected-error@+1 {{expects parent op 'dlm.diffusion_loop'}}
  dlm.yield %t
}

// -----

func.func @embedding_width(%ids: tensor<8xi32>, %w: tensor<512x64xf32>) -> tensor<8x32xf32> {
  // expected-error@+1 {{result width is 32, expected 64}}
  %0 = dlm.embedding %ids, %w : tensor<8xi32>, tensor<512x64xf32> -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}

// -----

func.func @embedding_table_rank(%ids: tensor<8xi32>, %w: tensor<512xf32>) -> tensor<8x32xf32> {
  // expected-error@+1 {{embedding table must have rank 2, got rank 1}}
  %0 = dlm.embedding %ids, %w : tensor<8xi32>, tensor<512xf32> -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}

// -----

func.func @linear_width(%x: tensor<8x64xf32>, %w: tensor<128x32xf32>) -> tensor<8x128xf32> {
  // expected-error@+1 {{weight input width is 32, expected 64}}
  %0 = dlm.linear %x, %w : tensor<8x64xf32>, tensor<128x32xf32> -> tensor<8x128xf32>
  return %0 : tensor<8x128xf32>
}

// -----

func.func @linear_bias(%x: tensor<8x64xf32>, %w: tensor<128x64xf32>, %b: tensor<64xf32>) -> tensor<8x128xf32> {
  // expected-error@+1 {{bias length is 64, expected 128}}
  %0 = dlm.linear %x, %w bias(%b) : tensor<8x64xf32>, tensor<128x64xf32>, tensor<64xf32> -> tensor<8x128xf32>
  return %0 : tensor<8x128xf32>
}

// -----

func.func @rms_norm_weight(%x: tensor<8x64xf32>, %w: tensor<32xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{weight length is 32, expected 64}}
  %0 = dlm.rms_norm %x, %w {eps = 1.0e-5 : f64} : tensor<8x64xf32>, tensor<32xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @rms_norm_eps(%x: tensor<8x64xf32>, %w: tensor<64xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{eps must be in (0, 1), got 0}}
  %0 = dlm.rms_norm %x, %w {eps = 0.0 : f64} : tensor<8x64xf32>, tensor<64xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @rms_norm_shape(%x: tensor<8x64xf32>, %w: tensor<64xf32>) -> tensor<4x64xf32> {
  // expected-error@+1 {{result shape must equal the input shape}}
  %0 = dlm.rms_norm %x, %w {eps = 1.0e-5 : f64} : tensor<8x64xf32>, tensor<64xf32> -> tensor<4x64xf32>
  return %0 : tensor<4x64xf32>
}

// -----

func.func @rope_odd(%x: tensor<8x4x15xf32>, %p: tensor<8xi32>) -> tensor<8x4x15xf32> {
  // expected-error@+1 {{head_dim must be even for rotary pairs, got 15}}
  %0 = dlm.rope %x, %p {theta = 1.0e4 : f64} : tensor<8x4x15xf32>, tensor<8xi32> -> tensor<8x4x15xf32>
  return %0 : tensor<8x4x15xf32>
}

// -----

func.func @rope_theta(%x: tensor<8x4x16xf32>, %p: tensor<8xi32>) -> tensor<8x4x16xf32> {
  // expected-error@+1 {{theta must be finite and greater than 1, got 0.5}}
  %0 = dlm.rope %x, %p {theta = 0.5 : f64} : tensor<8x4x16xf32>, tensor<8xi32> -> tensor<8x4x16xf32>
  return %0 : tensor<8x4x16xf32>
}

// -----

func.func @rope_rotary_dim(%x: tensor<8x4x16xf32>, %p: tensor<8xi32>) -> tensor<8x4x16xf32> {
  // expected-error@+1 {{rotary_dim must be even and in (0, head_dim 16], got 18}}
  %0 = dlm.rope %x, %p {theta = 1.0e4 : f64, rotary_dim = 18} : tensor<8x4x16xf32>, tensor<8xi32> -> tensor<8x4x16xf32>
  return %0 : tensor<8x4x16xf32>
}

// -----

func.func @rope_positions(%x: tensor<8x4x16xf32>, %p: tensor<4xi32>) -> tensor<8x4x16xf32> {
  // expected-error@+1 {{positions length is 4, expected 8}}
  %0 = dlm.rope %x, %p {theta = 1.0e4 : f64} : tensor<8x4x16xf32>, tensor<4xi32> -> tensor<8x4x16xf32>
  return %0 : tensor<8x4x16xf32>
}

// -----

func.func @mlp_down(%x: tensor<8x64xf32>, %g: tensor<128x64xf32>, %d: tensor<64x96xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{down weight input width is 96, expected 128}}
  %0 = dlm.gated_mlp %x, %g, %g, %d {activation = #dlm.activation<silu>}
      : tensor<8x64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x96xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @mlp_up(%x: tensor<8x64xf32>, %g: tensor<128x64xf32>, %u: tensor<96x64xf32>, %d: tensor<64x128xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{up weight rows is 96, expected 128}}
  %0 = dlm.gated_mlp %x, %g, %u, %d {activation = #dlm.activation<gelu_tanh>}
      : tensor<8x64xf32>, tensor<128x64xf32>, tensor<96x64xf32>, tensor<64x128xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @lm_head_vocab(%x: tensor<8x64xf32>, %w: tensor<512x64xf32>) -> tensor<8x576xf32> {
  // expected-error@+1 {{vocabulary (576) exceeds the weight rows (512)}}
  %0 = dlm.lm_head %x, %w : tensor<8x64xf32>, tensor<512x64xf32> -> tensor<8x576xf32>
  return %0 : tensor<8x576xf32>
}

// -----

func.func @lm_head_softcap(%x: tensor<8x64xf32>, %w: tensor<512x64xf32>) -> tensor<8x512xf32> {
  // expected-error@+1 {{softcap must be positive and finite, got 0}}
  %0 = dlm.lm_head %x, %w {softcap = 0.0 : f64} : tensor<8x64xf32>, tensor<512x64xf32> -> tensor<8x512xf32>
  return %0 : tensor<8x512xf32>
}

// -----

func.func @norm_linear_norm_weight(%x: tensor<8x64xf32>, %g: tensor<32xf32>, %w: tensor<128x64xf32>) -> tensor<8x128xf32> {
  // expected-error@+1 {{norm weight length is 32, expected 64}}
  %0 = dlm.norm_linear %x, %g, %w {eps = 1.0e-5 : f64} : tensor<8x64xf32>, tensor<32xf32>, tensor<128x64xf32> -> tensor<8x128xf32>
  return %0 : tensor<8x128xf32>
}

// -----

func.func @norm_linear_width(%x: tensor<8x64xf32>, %g: tensor<64xf32>, %w: tensor<128x32xf32>) -> tensor<8x128xf32> {
  // expected-error@+1 {{weight input width is 32, expected 64}}
  %0 = dlm.norm_linear %x, %g, %w {eps = 1.0e-5 : f64} : tensor<8x64xf32>, tensor<64xf32>, tensor<128x32xf32> -> tensor<8x128xf32>
  return %0 : tensor<8x128xf32>
}

// -----

func.func @norm_linear_eps(%x: tensor<8x64xf32>, %g: tensor<64xf32>, %w: tensor<128x64xf32>) -> tensor<8x128xf32> {
  // expected-error@+1 {{eps must be in (0, 1), got 2}}
  %0 = dlm.norm_linear %x, %g, %w {eps = 2.0 : f64} : tensor<8x64xf32>, tensor<64xf32>, tensor<128x64xf32> -> tensor<8x128xf32>
  return %0 : tensor<8x128xf32>
}

// -----

func.func @kv_empty_bad(%x: i1) {
  // expected-error@+1 {{kv_cache head_dim must be positive, got 0}}
  %kv = dlm.kv_empty : !dlm.kv_cache<layers = 1, kv_heads = 1, head_dim = 0, page_size = 16>
  return
}

// -----

func.func @rope_both_widths(%x: tensor<8x4x16xf32>, %p: tensor<8xi32>) -> tensor<8x4x16xf32> {
  // expected-error@+1 {{rotary_dim and rotated_pairs exclude each other}}
  %0 = dlm.rope %x, %p {theta = 1.0e4 : f64, rotary_dim = 8, rotated_pairs = 2} : tensor<8x4x16xf32>, tensor<8xi32> -> tensor<8x4x16xf32>
  return %0 : tensor<8x4x16xf32>
}

// -----

func.func @rope_rotated_pairs(%x: tensor<8x4x16xf32>, %p: tensor<8xi32>) -> tensor<8x4x16xf32> {
  // expected-error@+1 {{rotated_pairs must be in [0, head_dim / 2 = 8], got 9}}
  %0 = dlm.rope %x, %p {theta = 1.0e4 : f64, rotated_pairs = 9} : tensor<8x4x16xf32>, tensor<8xi32> -> tensor<8x4x16xf32>
  return %0 : tensor<8x4x16xf32>
}

// -----

func.func @prefix_window_needs_window(%q: tensor<8x4x16xf32>, %k: tensor<16x2x16xf32>) -> tensor<8x4x16xf32> {
  // expected-error@+1 {{mask prefix_window needs a window}}
  %0 = dlm.masked_attention %q, %k, %k {mask = #dlm.mask<prefix_window>} : tensor<8x4x16xf32>, tensor<16x2x16xf32>, tensor<16x2x16xf32> -> tensor<8x4x16xf32>
  return %0 : tensor<8x4x16xf32>
}

// -----

func.func @scale_factor(%x: tensor<8x64xf32>, %s: tensor<2xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{factor must be a one-element vector, got 'tensor<2xf32>'}}
  %0 = dlm.scale %x, %s : tensor<8x64xf32>, tensor<2xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @soft_embedding_table(%l: tensor<8x512xf32>, %t: tensor<256x64xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{logits over 512 tokens need a table of at least that many rows, got 256}}
  %0 = dlm.soft_embedding %l, %t : tensor<8x512xf32>, tensor<256x64xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @soft_embedding_mask_token(%l: tensor<8x512xf32>, %t: tensor<576x64xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{mask_token 576 is not a row of the table}}
  %0 = dlm.soft_embedding %l, %t {mask_token = 576 : i64} : tensor<8x512xf32>, tensor<576x64xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @moe_top_k(%x: tensor<8x64xf32>, %r: tensor<4x64xf32>, %rs: tensor<64xf32>, %es: tensor<4xf32>,
                     %gu: tensor<4x32x64xf32>, %d: tensor<4x64x16xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{top_k must be in [1, 4], got 5}}
  %0 = dlm.moe %x, %x, %r, %gu, %d router_scale(%rs : tensor<64xf32>)
        expert_scale(%es : tensor<4xf32>) {top_k = 5 : i64, eps = 1.0e-6 : f64,
        router_input_scale = 0.125 : f64, activation = #dlm.activation<gelu_tanh>}
      : tensor<8x64xf32>, tensor<8x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>,
        tensor<4x64x16xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @moe_shapes(%x: tensor<8x64xf32>, %r: tensor<4x64xf32>, %rs: tensor<64xf32>, %es: tensor<4xf32>,
                      %gu: tensor<4x30x64xf32>, %d: tensor<4x64x16xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{gate_up rows (twice down's width) is 30, expected 32}}
  %0 = dlm.moe %x, %x, %r, %gu, %d router_scale(%rs : tensor<64xf32>)
        expert_scale(%es : tensor<4xf32>) {top_k = 2 : i64, eps = 1.0e-6 : f64,
        router_input_scale = 0.125 : f64, activation = #dlm.activation<gelu_tanh>}
      : tensor<8x64xf32>, tensor<8x64xf32>, tensor<4x64xf32>, tensor<4x30x64xf32>,
        tensor<4x64x16xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @moe_scale_without_norm(%x: tensor<8x64xf32>, %r: tensor<4x64xf32>, %rs: tensor<64xf32>,
                                  %gu: tensor<4x32x64xf32>, %d: tensor<4x64x16xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{router_scale and router_input_scale scale the normed router input: they need eps (the router norm's)}}
  %0 = dlm.moe %x, %x, %r, %gu, %d router_scale(%rs : tensor<64xf32>)
        {top_k = 2 : i64, activation = #dlm.activation<silu>}
      : tensor<8x64xf32>, tensor<8x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>,
        tensor<4x64x16xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @moe_expert_scale_length(%x: tensor<8x64xf32>, %r: tensor<4x64xf32>, %es: tensor<3xf32>,
                                   %gu: tensor<4x32x64xf32>, %d: tensor<4x64x16xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{expert scale length is 3, expected 4}}
  %0 = dlm.moe %x, %x, %r, %gu, %d expert_scale(%es : tensor<3xf32>)
        {top_k = 2 : i64, activation = #dlm.activation<silu>}
      : tensor<8x64xf32>, tensor<8x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>,
        tensor<4x64x16xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @moe_groups_need_sigmoid(%x: tensor<8x64xf32>, %r: tensor<4x64xf32>,
                                   %gu: tensor<4x32x64xf32>, %d: tensor<4x64x16xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{group-limited routing is LLaDA2's: sigmoid_scores and an expert_bias}}
  %0 = dlm.moe %x, %x, %r, %gu, %d {top_k = 2 : i64, groups = 2 : i64, top_groups = 1 : i64,
        activation = #dlm.activation<silu>}
      : tensor<8x64xf32>, tensor<8x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>,
        tensor<4x64x16xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}

// -----

func.func @moe_top_groups(%x: tensor<8x64xf32>, %r: tensor<4x64xf32>,
                          %gu: tensor<4x32x64xf32>, %d: tensor<4x64x16xf32>) -> tensor<8x64xf32> {
  // expected-error@+1 {{top_groups 1 is outside [1, 2] or holds fewer than top_k 3 experts}}
  %0 = dlm.moe %x, %x, %r, %gu, %d {top_k = 3 : i64, groups = 2 : i64, top_groups = 1 : i64,
        sigmoid_scores = true, activation = #dlm.activation<silu>}
      : tensor<8x64xf32>, tensor<8x64xf32>, tensor<4x64xf32>, tensor<4x32x64xf32>,
        tensor<4x64x16xf32> -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}
