// RUN: dlm-opt %s -split-input-file -verify-diagnostics
// The decode dialect's verifiers, generated from runtime/schema/DecodeOps.td.

func.func @comparison_into_an_int_register(%a: i64) {
  %out = decode.register "out" : !decode.reg<i64>
  // expected-error @+1 {{operand #2 must be register of 1-bit signless integer}}
  "decode.gt"(%a, %a, %out) : (i64, i64, !decode.reg<i64>) -> ()
  return
}

// -----

func.func @text_where_a_number_goes(%a: !decode.text) {
  %out = decode.register "out" : !decode.reg<i64>
  // expected-error @+1 {{operand #0 must be}}
  "decode.add"(%a, %a, %out) : (!decode.text, !decode.text, !decode.reg<i64>) -> ()
  return
}

// -----

func.func @knob_without_type() {
  // expected-error @+1 {{requires attribute 'type'}}
  %k = "decode.knob"() {name = "steps"} : () -> !decode.knob<i64>
  return
}

// -----

func.func @a_mode_forward_does_not_have(%n: i64) {
  // expected-error @+1 {{'mode' failed to satisfy constraint: string attribute one of full, cached, window, append, extend}}
  "decode.forward"(%n, %n, %n, %n) <{mode = "sideways", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 0, 0, 0, 0>}>
      : (i64, i64, i64, i64) -> ()
  return
}
