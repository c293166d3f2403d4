// RUN: dlm-opt %s | dlm-opt | FileCheck %s
// The decode dialect (runtime/schema/DecodeOps.td): one op per decode record kind, registers and
// knobs as typed references. The head of the low-confidence program and one step's records.

// CHECK-LABEL: func.func @low_confidence_records
// CHECK: %[[GEN:.*]] = "decode.knob"() <{default_ = 32 : i64, type = "int"}>
// CHECK-SAME: {name = "gen_length"} : () -> !decode.knob<i64>
// CHECK: %[[ZERO:.*]] = decode.constant 0 : i64 -> i64
// CHECK: %[[POSITIVE:.*]] = decode.register "genPositive" : !decode.reg<i1>
// CHECK: "decode.gt"(%[[GEN]], %[[ZERO]], %[[POSITIVE]])
// CHECK: "decode.check"(%[[POSITIVE]], %[[GEN]])
// CHECK: "decode.block_loop"
// CHECK: "decode.forward"
// CHECK: "decode.accept"
// CHECK: "decode.if"
// CHECK: "decode.sample"
func.func @low_confidence_records() {
  %gen_length = "decode.knob"() <{type = "int", default_ = 32 : i64}> {name = "gen_length"}
      : () -> !decode.knob<i64>
  %threshold = "decode.knob"() <{type = "real", optional = true}> {name = "threshold"}
      : () -> !decode.knob<f64>
  %zero = decode.constant 0 : i64 -> i64
  %positive = decode.register "genPositive" : !decode.reg<i1>
  "decode.gt"(%gen_length, %zero, %positive)
      : (!decode.knob<i64>, i64, !decode.reg<i1>) -> ()
  "decode.check"(%positive, %gen_length)
      <{message = "gen_length {} is not positive", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>}>
      : (!decode.reg<i1>, !decode.knob<i64>) -> ()
  %prompt = decode.fact "prompt_len"
  %total = decode.register "total" : !decode.reg<i64>
  "decode.add"(%prompt, %gen_length, %total) : (i64, !decode.knob<i64>, !decode.reg<i64>) -> ()
  %blocks = decode.constant 2 : i64 -> i64
  %b = decode.register "b" : !decode.reg<i64>
  "decode.block_loop"(%blocks, %b) ({
    "decode.forward"(%total, %zero, %prompt, %total)
        <{mode = "full", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 0, 0, 0, 0>}>
        : (!decode.reg<i64>, i64, i64, !decode.reg<i64>) -> ()
    %confidence = decode.register "confidence" : !decode.reg<!decode.reals>
    %accepted = decode.register "accepted" : !decode.reg<!decode.flags>
    "decode.accept"(%confidence, %threshold, %accepted)
        <{rule = "threshold", candidates = "masked",
          operandSegmentSizes = array<i32: 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0>}>
        : (!decode.reg<!decode.reals>, !decode.knob<f64>, !decode.reg<!decode.flags>) -> ()
    %later = decode.register "later" : !decode.reg<i1>
    "decode.if"(%later) ({
      %proposal = decode.register "proposal" : !decode.reg<!decode.tokens>
      %temperature = decode.constant 0.0 : f64 -> f64
      "decode.sample"(%temperature, %zero, %zero, %proposal, %confidence)
          <{kind = "gumbel_max", candidates = "masked",
            operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 0, 0, 0>}>
          : (f64, i64, i64, !decode.reg<!decode.tokens>, !decode.reg<!decode.reals>) -> ()
    }, {
    }) : (!decode.reg<i1>) -> ()
  }) : (i64, !decode.reg<i64>) -> ()
  return
}
