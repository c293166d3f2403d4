// RUN: dlm-opt %s -dlm-specialize-shapes=prompt-length=8 -canonicalize | FileCheck %s

!kv = !dlm.kv_cache<layers = 1, kv_heads = 2, head_dim = 16, page_size = 16>

// The model as the importer emits it: every sequence dimension dynamic.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: tensor<?xi32>
func.func @forward(%ids: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %ids, %c0 : tensor<?xi32>
  %table = dlm.weight "embed" : tensor<64x32xf32>
  %wq = dlm.weight "q" : tensor<32x32xf32>
  %g = dlm.weight "norm" : tensor<32xf32>
  %x = dlm.embedding %ids, %table : tensor<?xi32>, tensor<64x32xf32> -> tensor<?x32xf32>
  %h = dlm.rms_norm %x, %g {eps = 1.0e-5 : f64} : tensor<?x32xf32>, tensor<32xf32> -> tensor<?x32xf32>
  %q = dlm.linear %h, %wq : tensor<?x32xf32>, tensor<32x32xf32> -> tensor<?x32xf32>
  %q3 = tensor.expand_shape %q [[0], [1, 2]] output_shape [%n, 2, 16] : tensor<?x32xf32> into tensor<?x2x16xf32>
  %r = dlm.rope %q3, %pos {theta = 1.0e4 : f64} : tensor<?x2x16xf32>, tensor<?xi32> -> tensor<?x2x16xf32>
  %a = dlm.masked_attention %r, %r, %r {mask = #dlm.mask<bidirectional>} : tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32> -> tensor<?x2x16xf32>
  %a2 = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x2x16xf32> into tensor<?x32xf32>
  %s = arith.addf %x, %a2 : tensor<?x32xf32>
  %l = dlm.lm_head %s, %table : tensor<?x32xf32>, tensor<64x32xf32> -> tensor<?x64xf32>
  return %l : tensor<?x64xf32>
}

// The static clone for the 8 + 16 tokens @generate now runs, with no dynamic shape left.
// CHECK-LABEL: func.func @forward_24(
// CHECK-SAME: %{{.*}}: tensor<24xi32>, %{{.*}}: tensor<24xi32>) -> tensor<24x64xf32>
// CHECK-NOT: ?x
// CHECK: dlm.embedding {{.*}} -> tensor<24x32xf32>
// CHECK: dlm.rms_norm {{.*}} -> tensor<24x32xf32>
// CHECK: dlm.linear {{.*}} -> tensor<24x32xf32>
// CHECK: tensor.expand_shape {{.*}} output_shape [24, 2, 16]
// CHECK: dlm.rope {{.*}} -> tensor<24x2x16xf32>
// CHECK: dlm.masked_attention {{.*}} -> tensor<24x2x16xf32>
// CHECK: arith.addf {{.*}} : tensor<24x32xf32>
// CHECK: %[[L:.*]] = dlm.lm_head {{.*}} -> tensor<24x64xf32>
// CHECK: return %[[L]] : tensor<24x64xf32>

// CHECK-LABEL: func.func @generate(
// CHECK-SAME: %[[PROMPT:[^:]*]]: tensor<8xi32>
// CHECK: %[[SEQ:.*]] = tensor.concat dim(0) %[[PROMPT]], %{{.*}} : (tensor<8xi32>, tensor<16xi32>) -> tensor<24xi32>
// CHECK: dlm.denoise_step @forward_24(%[[SEQ]]) {{.*}} -> tensor<24x64xf32>
func.func @generate(%prompt: tensor<?xi32>, %gen: tensor<16xi32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %kv = dlm.kv_empty : !kv
  %seq = tensor.concat dim(0) %prompt, %gen : (tensor<?xi32>, tensor<16xi32>) -> tensor<?xi32>
  %logits = dlm.denoise_step @forward(%seq) at %c0 cache(%kv) : tensor<?xi32>, !kv -> tensor<?x64xf32>
  return %logits : tensor<?x64xf32>
}
