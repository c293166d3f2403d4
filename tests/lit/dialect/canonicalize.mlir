// RUN: dlm-opt %s -canonicalize -split-input-file | FileCheck %s

// A loop with a zero step cap is its initial values and zero steps.
// CHECK-LABEL: func.func @zero_step_loop
// CHECK-SAME: (%[[INIT:.*]]: tensor<8xi32>)
// CHECK-NOT: dlm.diffusion_loop
// CHECK: %[[ZERO:.*]] = arith.constant 0 : index
// CHECK: return %[[INIT]], %[[ZERO]]
func.func @zero_step_loop(%init: tensor<8xi32>) -> (tensor<8xi32>, index) {
  %r, %s = dlm.diffusion_loop max_steps 0 step(%i) iter_args(%x = %init) : tensor<8xi32> {
    %f = arith.constant false
    %y = arith.addi %x, %x : tensor<8xi32>
    dlm.yield %f, %y : tensor<8xi32>
  }
  return %r, %s : tensor<8xi32>, index
}

// -----

// A loop whose body always converges runs once: its body inlined at step 0.
// CHECK-LABEL: func.func @always_converges
// CHECK-SAME: (%[[INIT:.*]]: tensor<8xi32>)
// CHECK-NOT: dlm.diffusion_loop
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[SUM:.*]] = arith.addi %[[INIT]], %[[INIT]]
// CHECK: return %[[SUM]], %[[ONE]]
func.func @always_converges(%init: tensor<8xi32>) -> (tensor<8xi32>, index) {
  %r, %s = dlm.diffusion_loop max_steps 48 step(%i) iter_args(%x = %init) : tensor<8xi32> {
    %t = arith.constant true
    %y = arith.addi %x, %x : tensor<8xi32>
    dlm.yield %t, %y : tensor<8xi32>
  }
  return %r, %s : tensor<8xi32>, index
}

// -----

// A one-step cap also runs the body once, whatever the flag; the step number becomes 0.
// CHECK-LABEL: func.func @one_step_cap
// CHECK-SAME: (%[[INIT:.*]]: tensor<8xi32>, %{{.*}}: i1, %{{.*}}: index)
// CHECK-NOT: dlm.diffusion_loop
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : index
// CHECK: return %[[INIT]], %[[ONE]], %[[ZERO]]
func.func @one_step_cap(%init: tensor<8xi32>, %flag: i1, %init_step: index) -> (tensor<8xi32>, index, index) {
  %r:2, %s = dlm.diffusion_loop max_steps 1 step(%i) iter_args(%x = %init, %j = %init_step) : tensor<8xi32>, index {
    dlm.yield %flag, %x, %i : tensor<8xi32>, index
  }
  return %r#0, %s, %r#1 : tensor<8xi32>, index, index
}

// -----

// A loop that may run several steps stays.
// CHECK-LABEL: func.func @real_loop
// CHECK: dlm.diffusion_loop max_steps 8
func.func @real_loop(%init: tensor<8xi32>, %flag: i1) -> tensor<8xi32> {
  %r, %s = dlm.diffusion_loop max_steps 8 step(%i) iter_args(%x = %init) : tensor<8xi32> {
    %y = arith.addi %x, %x : tensor<8xi32>
    dlm.yield %flag, %y : tensor<8xi32>
  }
  return %r : tensor<8xi32>
}
