// RUN: dlm-opt %s -dlm-lower-to-decode-program -split-input-file -mlir-print-op-on-diagnostic=false -verify-diagnostics

// An in-out operand's register is overwritten by the record: the value it held may not be read
// again.
func.func @in_out_read_after() {
  %c8 = decode.constant 8 : i64 -> i64
  %half = decode.constant 0.5 : f64 -> f64
  %empty = "generate.credit_reset"(%c8) : (i64) -> !decode.credit
  // expected-error @+1 {{'generate.credit' op in-out credit is read after the op, again by it, or in a loop below its definition: the record overwrites its register}}
  %updated = "generate.credit"(%empty, %half, %half, %half) <{candidates = "masked"}> : (!decode.credit, f64, f64, f64) -> !decode.credit
  %again = "generate.credit"(%empty, %half, %half, %half) <{candidates = "masked"}> : (!decode.credit, f64, f64, f64) -> !decode.credit
  return
}

// -----

// An in-out operand must be a register, not a literal or a knob.
func.func @in_out_knob() {
  %n = "generate.knob"() <{name = "n", type = "int", default_ = 3 : i64}> : () -> i64
  %half = decode.constant 0.5 : f64 -> f64
  %score = "generate.fill_row"(%half) : (f64) -> !decode.reals
  // expected-error @+1 {{'generate.accept' op in-out run must be a value a record wrote, not a literal, knob or fact}}
  %run, %keep = "generate.accept"(%score, %n) <{rule = "top_k", candidates = "all", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0>, resultSegmentSizes = array<i32: 0, 1, 1, 0>}> : (!decode.reals, i64) -> (i64, !decode.flags)
  return
}

// -----

// A denoise loop ends each step with until.
func.func @no_until() {
  %c8 = decode.constant 8 : i64 -> i64
  // expected-error @+1 {{'generate.denoise_loop' op body does not end with an until}}
  %ran = "generate.denoise_loop"(%c8, %c8, %c8) ({
  ^bb0(%step: i64, %global: i64):
    generate.yield
  }) : (i64, i64, i64) -> i64
  return
}

// -----

// Leaving a loop early would skip the sets of its carried values: %next, defined before the
// exit_if, is not written in place (the old total is read after it).
func.func @early_exit() {
  %c8 = decode.constant 8 : i64 -> i64
  %yes = decode.constant true -> i1
  %sum = "generate.block_loop"(%c8, %c8) ({
  ^bb0(%i: i64, %total: i64):
    %next = "generate.add"(%total, %i) : (i64, i64) -> i64
    %again = "generate.add"(%total, %next) : (i64, i64) -> i64
    // expected-error @+1 {{'generate.exit_if' op not supported yet: leaving the loop when its carried value 0 is neither the iteration's nor written in place}}
    "generate.exit_if"(%yes) : (i1) -> ()
    "generate.window"(%i, %i) : (i64, i64) -> ()
    generate.yield %next : i64
  }) : (i64, i64) -> i64
  return
}

// -----

func.func @nested_exit() {
  %c8 = decode.constant 8 : i64 -> i64
  %yes = decode.constant true -> i1
  // expected-error @+1 {{'generate.block_loop' op not supported yet: an exit_if nested in an if of a loop that carries values}}
  %sum = "generate.block_loop"(%c8, %c8) ({
  ^bb0(%i: i64, %total: i64):
    %next = "generate.add"(%total, %i) : (i64, i64) -> i64
    "generate.if"(%yes) ({
      "generate.exit_if"(%yes) : (i1) -> ()
      generate.yield
    }, {
    }) : (i1) -> ()
    generate.yield %next : i64
  }) : (i64, i64) -> i64
  return
}

// -----

// Two carried values that trade places would each need the other's old value.
func.func @swap() {
  %c8 = decode.constant 8 : i64 -> i64
  %a = "generate.set"(%c8) : (i64) -> i64
  %b = "generate.set"(%c8) : (i64) -> i64
  %x, %y = "generate.block_loop"(%c8, %a, %b) ({
  ^bb0(%i: i64, %p: i64, %q: i64):
    // expected-error @+1 {{'generate.yield' op not supported yet: carried values that trade places}}
    generate.yield %q, %p : i64, i64
  }) : (i64, i64, i64) -> (i64, i64)
  return
}

// -----

// Only the generate dialect, decode.constant and decode.fact have records.
func.func @foreign_op() {
  // expected-error @+1 {{'arith.constant' op has no decode record}}
  %c = arith.constant 1 : i64
  "generate.finish"(%c) : (i64) -> ()
  return
}

// -----

// A row value that is not replaced in place cannot be carried: set copies scalars only.
func.func @row_copy() {
  %c8 = decode.constant 8 : i64 -> i64
  %row = "generate.fill_row"(%c8) : (i64) -> !decode.tokens
  // expected-error @+1 {{'generate.block_loop' op carries a '!decode.tokens' that is read after it: set copies scalars only}}
  %last = "generate.block_loop"(%c8, %row) ({
  ^bb0(%i: i64, %held: !decode.tokens):
    generate.yield %held : !decode.tokens
  }) : (i64, !decode.tokens) -> !decode.tokens
  %again = "generate.block_loop"(%c8, %row) ({
  ^bb0(%i: i64, %held: !decode.tokens):
    generate.yield %held : !decode.tokens
  }) : (i64, !decode.tokens) -> !decode.tokens
  return
}

// -----

// An in-out operand read again by the same op would be read after the op overwrote it.
func.func @in_out_read_twice() {
  %n = "generate.knob"() <{name = "n", type = "int", default_ = 3 : i64}> : () -> i64
  %half = decode.constant 0.5 : f64 -> f64
  %score = "generate.fill_row"(%half) : (f64) -> !decode.reals
  %zero = decode.constant 0 : i64 -> i64
  %run = "generate.set"(%zero) : (i64) -> i64
  // expected-error @+1 {{'generate.accept' op in-out run is read after the op, again by it, or in a loop below its definition: the record overwrites its register}}
  %run2, %keep = "generate.accept"(%score, %run, %run) <{rule = "entropy_bound", candidates = "all", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0>, resultSegmentSizes = array<i32: 0, 1, 1, 0>}> : (!decode.reals, i64, i64) -> (i64, !decode.flags)
  return
}

// -----

// An in-out result needs its operand.
func.func @in_out_without_operand() {
  %half = decode.constant 0.5 : f64 -> f64
  %score = "generate.fill_row"(%half) : (f64) -> !decode.reals
  // expected-error @+1 {{'generate.accept' op gives in-out run without reading it}}
  %run2, %keep = "generate.accept"(%score) <{rule = "entropy_bound", candidates = "all", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 0, 1, 1, 0>}> : (!decode.reals) -> (i64, !decode.flags)
  return
}

// -----

// `defined` reads a knob.
func.func @defined_of_no_knob() {
  %zero = decode.constant 0 : i64 -> i64
  // expected-error @+1 {{'generate.defined' op reads the knob of a value that is no knob's}}
  %on = "generate.defined"(%zero) : (i64) -> i1
  return
}
