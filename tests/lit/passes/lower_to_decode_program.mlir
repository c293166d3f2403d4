// RUN: dlm-opt %s -dlm-lower-to-decode-program -split-input-file | FileCheck %s

// A loop's carried value is written in place when nothing reads the value it replaces after it
// is defined; here the old total is read after the new one is made, so the new one gets its own
// register ("total2", the name being taken) and a set writes it back before the closing exit_if.
// An if's result is written in place in the branch that defines it, by a set in the other.
// Constants, facts and knobs become literals, @facts and $knobs: no register.
// CHECK-LABEL: func.func @carried
// CHECK-DAG: %[[N:.*]] = "decode.knob"() <{default_ = 3 : i64, type = "int"}> {name = "n"}
// CHECK-DAG: %[[ZERO:.*]] = decode.constant 0 : i64
// CHECK-DAG: %[[ONE:.*]] = decode.constant 1 : i64
// CHECK-DAG: %[[TOTAL:.*]] = decode.register "total" : !decode.reg<i64>
// CHECK-DAG: %[[I:.*]] = decode.register "i" : !decode.reg<i64>
// CHECK-DAG: %[[TOTAL2:.*]] = decode.register "total2" : !decode.reg<i64>
// CHECK-DAG: %[[BIG:.*]] = decode.register "big" : !decode.reg<i1>
// CHECK-DAG: %[[PICK:.*]] = decode.register "pick" : !decode.reg<i64>
// CHECK-DAG: %[[SEEN:.*]] = decode.register "seen" : !decode.reg<i64>
// CHECK-DAG: %[[LEN:.*]] = decode.fact "prompt_len"
// CHECK: "decode.set"(%[[ZERO]], %[[TOTAL]])
// CHECK-NEXT: "decode.block_loop"(%[[N]], %[[I]]) ({
// CHECK-NEXT: "decode.add"(%[[TOTAL]], %[[I]], %[[TOTAL2]])
// CHECK-NEXT: "decode.gt"(%[[TOTAL2]], %[[N]], %[[BIG]])
// CHECK-NEXT: "decode.if"(%[[BIG]]) ({
// CHECK-NEXT: "decode.set"(%[[ONE]], %[[PICK]])
// CHECK-NEXT: }, {
// CHECK-NEXT: "decode.mul"(%[[TOTAL2]], %[[LEN]], %[[PICK]])
// CHECK-NEXT: })
// CHECK-NEXT: "decode.add"(%[[TOTAL]], %[[PICK]], %[[SEEN]])
// CHECK-NEXT: "decode.set"(%[[TOTAL2]], %[[TOTAL]])
// CHECK-NEXT: "decode.exit_if"(%[[BIG]])
// CHECK-NEXT: }) {name = "block"}
// CHECK-NEXT: "decode.finish"(%[[TOTAL]])
// CHECK-NOT: generate.
func.func @carried() {
  %n = "generate.knob"() <{name = "n", type = "int", default_ = 3 : i64}> : () -> i64
  %c0 = decode.constant 0 : i64 -> i64
  %c1 = decode.constant 1 : i64 -> i64
  %start = "generate.set"(%c0) {names = ["total"]} : (i64) -> i64
  %result = "generate.block_loop"(%n, %start) ({
  ^bb0(%i: i64, %total: i64):
    %next = "generate.add"(%total, %i) {names = ["total"]} : (i64, i64) -> i64
    %big = "generate.gt"(%next, %n) {names = ["big"]} : (i64, i64) -> i1
    %pick = "generate.if"(%big) ({
      generate.yield %c1 : i64
    }, {
      %length = decode.fact "prompt_len"
      %scaled = "generate.mul"(%next, %length) : (i64, i64) -> i64
      generate.yield %scaled : i64
    }) {names = ["pick"]} : (i1) -> i64
    %seen = "generate.add"(%total, %pick) {names = ["seen"]} : (i64, i64) -> i64
    "generate.exit_if"(%big) : (i1) -> ()
    generate.yield %next : i64
  }) {name = "block", arg_names = ["i"]} : (i64, i64) -> i64
  "generate.finish"(%result) : (i64) -> ()
  return
}

// -----

// A denoise loop's index, global step and step count get registers; a carried credit updated in
// place (an in-out operand) stays in the init's register, and a value defined in the body after
// the last read of the value it replaces is written straight into its carried register, where
// its own reads find it: no set.
// CHECK-LABEL: func.func @in_place
// CHECK-DAG: %[[CREDIT:.*]] = decode.register "credit" : !decode.reg<!decode.credit>
// CHECK-DAG: %[[COUNT:.*]] = decode.register "count" : !decode.reg<i64>
// CHECK-DAG: %[[STEP:.*]] = decode.register "n" : !decode.reg<i64>
// CHECK-DAG: %[[GLOBAL:.*]] = decode.register "s" : !decode.reg<i64>
// CHECK-DAG: %[[RAN:.*]] = decode.register "ran" : !decode.reg<i64>
// CHECK-DAG: %[[DONE:.*]] = decode.register "done" : !decode.reg<i1>
// CHECK: "decode.credit_reset"(%{{.*}}, %[[CREDIT]])
// CHECK-NEXT: "decode.set"(%{{.*}}, %[[COUNT]])
// CHECK-NEXT: "decode.denoise_loop"(%{{.*}}, %{{.*}}, %{{.*}}, %[[STEP]], %[[GLOBAL]], %[[RAN]]) <{unroll = 4 : i64}> ({
// CHECK-NEXT: "decode.credit"(%[[CREDIT]],
// CHECK-NEXT: "decode.add"(%[[COUNT]], %[[GLOBAL]], %[[COUNT]])
// CHECK-NEXT: "decode.ge"(%[[COUNT]], %{{.*}}, %[[DONE]])
// CHECK-NEXT: "decode.until"(%[[DONE]])
// CHECK-NEXT: }) {name = "step"}
// CHECK-NEXT: "decode.finish"(%[[COUNT]])
func.func @in_place() {
  %c0 = decode.constant 0 : i64 -> i64
  %c8 = decode.constant 8 : i64 -> i64
  %half = decode.constant 0.5 : f64 -> f64
  %empty = "generate.credit_reset"(%c8) {names = ["credit"]} : (i64) -> !decode.credit
  %zero = "generate.set"(%c0) {names = ["count"]} : (i64) -> i64
  %ran, %credit, %count = "generate.denoise_loop"(%c8, %c8, %c0, %empty, %zero) <{unroll = 4 : i64}> ({
  ^bb0(%step: i64, %global: i64, %held: !decode.credit, %sum: i64):
    %updated = "generate.credit"(%held, %half, %half, %half) <{candidates = "masked"}> : (!decode.credit, f64, f64, f64) -> !decode.credit
    %more = "generate.add"(%sum, %global) : (i64, i64) -> i64
    %done = "generate.ge"(%more, %c8) {names = ["done"]} : (i64, i64) -> i1
    "generate.until"(%done) : (i1) -> ()
    generate.yield %updated, %more : !decode.credit, i64
  }) {name = "step", arg_names = ["n", "s"]} : (i64, i64, i64, !decode.credit, i64) -> (i64, !decode.credit, i64)
  "generate.finish"(%count) : (i64) -> ()
  return
}

// -----

// An in-out update in one branch of an if, the value passed on unchanged by the other: the if's
// result takes the carried register, which the update overwrites in place; no branch needs a set,
// and the else, left empty, is no `else` record (its region is empty).
// CHECK-LABEL: func.func @update_in_a_branch
// CHECK-DAG: %[[ON:.*]] = "decode.knob"() <{default_ = false, type = "bool"}> {name = "credit"}
// CHECK-DAG: %[[CREDIT:.*]] = decode.register "credit" : !decode.reg<!decode.credit>
// CHECK: "decode.denoise_loop"
// CHECK-NEXT: "decode.if"(%[[ON]]) ({
// CHECK-NEXT: "decode.credit"(%[[CREDIT]],
// CHECK-NEXT: }, {
// CHECK-NEXT: }) : (!decode.knob<i1>) -> ()
// CHECK-NEXT: "decode.until"
// CHECK-NOT: decode.set
func.func @update_in_a_branch() {
  %on = "generate.knob"() <{name = "credit", type = "bool", default_ = false}> : () -> i1
  %c8 = decode.constant 8 : i64 -> i64
  %half = decode.constant 0.5 : f64 -> f64
  %yes = decode.constant true -> i1
  %empty = "generate.credit_reset"(%c8) {names = ["credit"]} : (i64) -> !decode.credit
  %ran, %credit = "generate.denoise_loop"(%c8, %c8, %c8, %empty) ({
  ^bb0(%step: i64, %global: i64, %held: !decode.credit):
    %next = "generate.if"(%on) ({
      %updated = "generate.credit"(%held, %half, %half, %half) <{candidates = "masked"}> : (!decode.credit, f64, f64, f64) -> !decode.credit
      generate.yield %updated : !decode.credit
    }, {
      generate.yield %held : !decode.credit
    }) : (i1) -> !decode.credit
    "generate.until"(%yes) : (i1) -> ()
    generate.yield %next : !decode.credit
  }) : (i64, i64, i64, !decode.credit) -> (i64, !decode.credit)
  return
}

// -----

// An init the loop's body reads itself keeps its own register: the carried value gets another,
// set from it before the loop.
// CHECK-LABEL: func.func @init_read_inside
// CHECK-DAG: %[[X:.*]] = decode.register "x" : !decode.reg<i64>
// CHECK-DAG: %[[ACC:.*]] = decode.register "acc" : !decode.reg<i64>
// CHECK: "decode.set"(%{{.*}}, %[[X]])
// CHECK-NEXT: "decode.set"(%[[X]], %[[ACC]])
// CHECK-NEXT: "decode.block_loop"
// CHECK-NEXT: "decode.add"(%[[ACC]], %[[X]], %[[ACC]])
func.func @init_read_inside() {
  %c1 = decode.constant 1 : i64 -> i64
  %c8 = decode.constant 8 : i64 -> i64
  %x = "generate.set"(%c1) {names = ["x"]} : (i64) -> i64
  %r = "generate.block_loop"(%c8, %x) ({
  ^bb0(%i: i64, %acc: i64):
    %next = "generate.add"(%acc, %x) {names = ["acc"]} : (i64, i64) -> i64
    generate.yield %next : i64
  }) {arg_names = ["i", "acc"]} : (i64, i64) -> i64
  "generate.finish"(%r) : (i64) -> ()
  return
}

// -----

// A closing exit_if whose condition is a carried register that a set overwrites reads a copy
// made before the sets.
// CHECK-LABEL: func.func @closing_condition
// CHECK-DAG: %[[PREV:.*]] = decode.register "prev" : !decode.reg<i1>
// CHECK-DAG: %[[NOW:.*]] = decode.register "now" : !decode.reg<i1>
// CHECK-DAG: %[[COPY:.*]] = decode.register "condition" : !decode.reg<i1>
// CHECK: "decode.ge"(%{{.*}}, %{{.*}}, %[[NOW]])
// CHECK-NEXT: "decode.set"(%[[PREV]], %[[COPY]])
// CHECK-NEXT: "decode.set"(%[[NOW]], %[[PREV]])
// CHECK-NEXT: "decode.exit_if"(%[[COPY]])
func.func @closing_condition() {
  %c3 = decode.constant 3 : i64 -> i64
  %c8 = decode.constant 8 : i64 -> i64
  %no = decode.constant false -> i1
  %f0 = "generate.set"(%no) {names = ["prev"]} : (i1) -> i1
  %r = "generate.block_loop"(%c8, %f0) ({
  ^bb0(%i: i64, %prev: i1):
    %now = "generate.ge"(%i, %c3) {names = ["now"]} : (i64, i64) -> i1
    "generate.exit_if"(%prev) : (i1) -> ()
    generate.yield %now : i1
  }) : (i64, i1) -> i1
  return
}

// -----

// A value preferred into a carried register is not written there while another value the
// register holds (an inner loop's result, carried in place from the outer argument) is read
// later: it gets its own register and a set at the end.
// CHECK-LABEL: func.func @preferred_but_taken
// CHECK: "decode.block_loop"
// CHECK-NEXT: "decode.block_loop"
// CHECK-NEXT: "decode.add"
// CHECK-NEXT: })
// CHECK-NEXT: "decode.add"(%{{.*}}, %{{.*}}, %[[N:[^)]*]])
// CHECK-NEXT: "decode.add"(%[[L:[^,]*]], %[[N]], %[[M:[^)]*]])
// CHECK-NEXT: "decode.window"(%[[M]], %[[M]])
// CHECK-NEXT: "decode.set"(%[[N]], %[[L]])
func.func @preferred_but_taken() {
  %c1 = decode.constant 1 : i64 -> i64
  %c2 = decode.constant 2 : i64 -> i64
  %c3 = decode.constant 3 : i64 -> i64
  %a0 = "generate.set"(%c1) {names = ["a"]} : (i64) -> i64
  %r = "generate.block_loop"(%c2, %a0) ({
  ^bb0(%i: i64, %a: i64):
    %l = "generate.block_loop"(%c3, %a) ({
    ^bb0(%j: i64, %z: i64):
      %w = "generate.add"(%z, %c1) : (i64, i64) -> i64
      generate.yield %w : i64
    }) : (i64, i64) -> i64
    %n = "generate.add"(%i, %c2) {names = ["n"]} : (i64, i64) -> i64
    %m = "generate.add"(%l, %n) {names = ["m"]} : (i64, i64) -> i64
    "generate.window"(%m, %m) : (i64, i64) -> ()
    generate.yield %n : i64
  }) : (i64, i64) -> i64
  return
}
