// RUN: dlm-opt %s -dlm-unroll-diffusion-loop=factor=2 -split-input-file | FileCheck %s
// RUN: dlm-opt %s -dlm-unroll-diffusion-loop=factor=1 -split-input-file | FileCheck %s --check-prefix=SAME

// A cap of 5 steps at factor 2 becomes 3 iterations of two steps. The first copy always runs;
// the second is guarded by "not converged and under the cap". The steps actually run replace
// the original step count.
// CHECK-LABEL: func.func @uneven_cap
// CHECK-SAME: (%[[INIT:.*]]: tensor<8xi32>, %[[FLAG:.*]]: i1)
// CHECK: %[[ZERO:.*]] = arith.constant 0 : index
// CHECK: %[[R:.*]]:2, %{{.*}} = dlm.diffusion_loop max_steps 3 step(%[[OUTER:[^)]*]]) iter_args(%[[X:.*]] = %[[INIT]], %[[COUNT:.*]] = %[[ZERO]]) : tensor<8xi32>, index {
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[TRUE:.*]] = arith.constant true
// CHECK-DAG: %[[CAP:.*]] = arith.constant 5 : index
// CHECK-DAG: %[[TWO:.*]] = arith.constant 2 : index
// CHECK: %[[FIRST:.*]] = arith.muli %[[OUTER]], %[[TWO]]
// CHECK: %[[Y0:.*]] = arith.addi %[[X]], %[[X]] : tensor<8xi32>
// CHECK: %[[COUNT0:.*]] = arith.addi %[[COUNT]], %[[ONE]] : index
// CHECK: %[[SECOND:.*]] = arith.addi %[[FIRST]], %{{.*}} : index
// CHECK: %[[LIVE:.*]] = arith.xori %[[FLAG]], %[[TRUE]] : i1
// CHECK: %[[UNDER:.*]] = arith.cmpi ult, %[[SECOND]], %[[CAP]] : index
// CHECK: %[[ACTIVE:.*]] = arith.andi %[[LIVE]], %[[UNDER]] : i1
// CHECK: %[[S1:.*]]:3 = scf.if %[[ACTIVE]] -> (tensor<8xi32>, i1, index) {
// CHECK:   %[[Y1:.*]] = arith.addi %[[Y0]], %[[Y0]]
// CHECK:   %[[COUNT1:.*]] = arith.addi %[[COUNT0]], %[[ONE]]
// CHECK:   scf.yield %[[Y1]], %[[FLAG]], %[[COUNT1]] : tensor<8xi32>, i1, index
// CHECK: } else {
// CHECK:   scf.yield %[[Y0]], %[[FLAG]], %[[COUNT0]] : tensor<8xi32>, i1, index
// CHECK: }
// CHECK: dlm.yield %[[S1]]#1, %[[S1]]#0, %[[S1]]#2 : tensor<8xi32>, index
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @uneven_cap(%init: tensor<8xi32>, %flag: i1) -> (tensor<8xi32>, index) {
  %r, %s = dlm.diffusion_loop max_steps 5 step(%i) iter_args(%x = %init) : tensor<8xi32> {
    %y = arith.addi %x, %x : tensor<8xi32>
    dlm.yield %flag, %y : tensor<8xi32>
  }
  return %r, %s : tensor<8xi32>, index
}

// SAME-LABEL: func.func @uneven_cap
// SAME: dlm.diffusion_loop max_steps 5
// SAME-NOT: scf.if

// -----

// When the factor divides the cap, no copy checks the cap; the step number of copy j is
// outer * factor + j.
// CHECK-LABEL: func.func @even_cap
// CHECK: dlm.diffusion_loop max_steps 2 step(%[[OUTER:[^)]*]])
// CHECK-NOT: arith.cmpi
// CHECK: %[[FIRST:.*]] = arith.muli %[[OUTER]], %{{.*}}
// CHECK: tensor.insert %{{.*}} into %{{.*}}[%[[FIRST]]]
// CHECK: %[[SECOND:.*]] = arith.addi %[[FIRST]], %{{.*}} : index
// CHECK: scf.if
// CHECK: tensor.insert %{{.*}} into %{{.*}}[%[[SECOND]]]
func.func @even_cap(%init: tensor<4xi32>, %flag: i1, %v: i32) -> tensor<4xi32> {
  %r, %s = dlm.diffusion_loop max_steps 4 step(%i) iter_args(%x = %init) : tensor<4xi32> {
    %y = tensor.insert %v into %x[%i] : tensor<4xi32>
    dlm.yield %flag, %y : tensor<4xi32>
  }
  return %r : tensor<4xi32>
}

// -----

// Single-step loops are left to the canonicalizer.
// CHECK-LABEL: func.func @single_step
// CHECK: dlm.diffusion_loop max_steps 1
// CHECK-NOT: scf.if
func.func @single_step(%init: tensor<8xi32>, %flag: i1) -> tensor<8xi32> {
  %r, %s = dlm.diffusion_loop max_steps 1 step(%i) iter_args(%x = %init) : tensor<8xi32> {
    dlm.yield %flag, %x : tensor<8xi32>
  }
  return %r : tensor<8xi32>
}
