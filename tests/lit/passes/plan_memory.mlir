// RUN: dlm-opt %s -dlm-plan-memory -split-input-file -mlir-print-op-on-diagnostic=false -verify-diagnostics | FileCheck %s

// A chain of three 4 KiB tensors: %a dies when %c is made, so %c reuses %a's bytes; the reshape
// shares %b's buffer; weights take no arena space.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: attributes {dlm.arena_bytes = 8192 : i64, dlm.unplanned_bytes = 12288 : i64}
// CHECK: %[[W:.*]] = dlm.weight "w" : tensor<32x32xf32>
// CHECK-NOT: arena_offset
// CHECK: dlm.embedding {{.*}} {dlm.arena_offset = [[A:[0-9]+]] : i64}
// CHECK: dlm.linear {{.*}} {dlm.arena_offset = [[B:[0-9]+]] : i64}
// CHECK: tensor.expand_shape
// CHECK-NOT: arena_offset
// CHECK: dlm.rope {{.*}} {dlm.arena_offset = [[A]] : i64
func.func @chain(%ids: tensor<32xi32>, %pos: tensor<32xi32>, %table: tensor<64x32xf32>) -> tensor<32x2x16xf32> {
  %w = dlm.weight "w" : tensor<32x32xf32>
  %a = dlm.embedding %ids, %table : tensor<32xi32>, tensor<64x32xf32> -> tensor<32x32xf32>
  %b = dlm.linear %a, %w : tensor<32x32xf32>, tensor<32x32xf32> -> tensor<32x32xf32>
  %b3 = tensor.expand_shape %b [[0], [1, 2]] output_shape [32, 2, 16] : tensor<32x32xf32> into tensor<32x2x16xf32>
  %c = dlm.rope %b3, %pos {theta = 1.0e4 : f64} : tensor<32x2x16xf32>, tensor<32xi32> -> tensor<32x2x16xf32>
  return %c : tensor<32x2x16xf32>
}

// -----

// A tensor read after a later one is made keeps its bytes: three distinct buffers.
// CHECK-LABEL: func.func @residual
// CHECK-SAME: dlm.arena_bytes = 12288 : i64
func.func @residual(%ids: tensor<32xi32>, %table: tensor<64x32xf32>, %w: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %a = dlm.embedding %ids, %table : tensor<32xi32>, tensor<64x32xf32> -> tensor<32x32xf32>
  %b = dlm.linear %a, %w : tensor<32x32xf32>, tensor<32x32xf32> -> tensor<32x32xf32>
  %c = arith.addf %a, %b : tensor<32x32xf32>
  return %c : tensor<32x32xf32>
}

// -----

// expected-remark@+1 {{dlm-plan-memory: not planned ('tensor<?x32xf32>' has a dynamic shape; run --dlm-specialize-shapes first)}}
func.func @dynamic(%ids: tensor<?xi32>, %table: tensor<64x32xf32>) -> tensor<?x32xf32> {
  %a = dlm.embedding %ids, %table : tensor<?xi32>, tensor<64x32xf32> -> tensor<?x32xf32>
  return %a : tensor<?x32xf32>
}
