// RUN: dlm-opt %s -dlm-fuse-norm-linear | FileCheck %s

// One norm feeding q, k and v (with a bias) is fused into each; the norm itself goes away.
// CHECK-LABEL: func.func @qkv
// CHECK-SAME: (%[[X:[^:]*]]: tensor<8x64xf32>
// CHECK-NOT: dlm.rms_norm
// CHECK-DAG: dlm.norm_linear %[[X]], %[[G:[^,]*]], %{{.*}} {eps = 1.000000e-05 : f64} : tensor<8x64xf32>, tensor<64xf32>, tensor<64x64xf32> -> tensor<8x64xf32>
// CHECK-DAG: dlm.norm_linear %[[X]], %[[G]], %{{.*}} bias(%{{.*}}) {eps = 1.000000e-05 : f64} : tensor<8x64xf32>, tensor<64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<8x32xf32>
func.func @qkv(%x: tensor<8x64xf32>, %g: tensor<64xf32>, %wq: tensor<64x64xf32>,
               %wk: tensor<32x64xf32>, %bk: tensor<32xf32>) -> (tensor<8x64xf32>, tensor<8x32xf32>) {
  %h = dlm.rms_norm %x, %g {eps = 1.0e-5 : f64} : tensor<8x64xf32>, tensor<64xf32> -> tensor<8x64xf32>
  %q = dlm.linear %h, %wq : tensor<8x64xf32>, tensor<64x64xf32> -> tensor<8x64xf32>
  %k = dlm.linear %h, %wk bias(%bk) : tensor<8x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<8x32xf32>
  return %q, %k : tensor<8x64xf32>, tensor<8x32xf32>
}

// A norm that something else reads too stays for that reader.
// CHECK-LABEL: func.func @shared_norm
// CHECK: %[[H:.*]] = dlm.rms_norm
// CHECK: dlm.norm_linear
// CHECK: dlm.gated_mlp %[[H]]
func.func @shared_norm(%x: tensor<8x64xf32>, %g: tensor<64xf32>, %w: tensor<64x64xf32>,
                       %gate: tensor<128x64xf32>, %down: tensor<64x128xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>) {
  %h = dlm.rms_norm %x, %g {eps = 1.0e-5 : f64} : tensor<8x64xf32>, tensor<64xf32> -> tensor<8x64xf32>
  %y = dlm.linear %h, %w : tensor<8x64xf32>, tensor<64x64xf32> -> tensor<8x64xf32>
  %m = dlm.gated_mlp %h, %gate, %gate, %down {activation = #dlm.activation<silu>}
      : tensor<8x64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32> -> tensor<8x64xf32>
  return %y, %m : tensor<8x64xf32>, tensor<8x64xf32>
}

// Per-head norms (rank 3, Qwen3's q/k norms) are not row norms of a linear's input.
// CHECK-LABEL: func.func @head_norm
// CHECK: dlm.rms_norm
// CHECK-NOT: dlm.norm_linear
func.func @head_norm(%x: tensor<8x4x16xf32>, %g: tensor<16xf32>) -> tensor<8x4x16xf32> {
  %h = dlm.rms_norm %x, %g {eps = 1.0e-6 : f64} : tensor<8x4x16xf32>, tensor<16xf32> -> tensor<8x4x16xf32>
  return %h : tensor<8x4x16xf32>
}
