//===- GenerateOps.td - decoding policies in SSA form ----------------*- tablegen -*-===//
//
// The `generate` dialect: what a decoding policy's builder writes (compiler/programs/policies),
// and what dlm-lower-to-decode-program lowers into the `decode` dialect, whose ops are the
// records the runtime's interpreter runs. It has one op per decode record kind, the same kind
// in SSA form: derived from runtime/schema/DecodeOps.td by dlm-tblgen -gen-generate-ops
// (GenerateRecordOps.td, in the build tree), so the contract stays declared once. Values are
// i64, f64, i1 and the decode dialect's types; literals are decode.constant, facts decode.fact.
//
// The structured kinds are written here: their SSA form carries values through their regions,
// as scf.for and scf.if do, where the records read and write registers.
//
//===----------------------------------------------------------------------===//

#ifndef DLM_GENERATE_OPS_TD
#define DLM_GENERATE_OPS_TD

include "runtime/schema/DecodeOps.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

def Generate_Dialect : Dialect {
  let name = "generate";
  let cppNamespace = "::dlm::generate";
  let summary = "Decoding policies in SSA form, lowered into decode records";
  let dependentDialects = ["::dlm::decode::DecodeDialect"];
}

class Generate_RecordOp<string kind, list<Trait> traits = []>
    : Op<Generate_Dialect, kind, traits>;

include "GenerateRecordOps.td"

def Generate_YieldOp : Op<Generate_Dialect, "yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["BlockLoopOp", "DenoiseLoopOp", "IfOp"]>]> {
  let summary = "the values a structured op's region gives: its results, or the next iteration's";
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

// for index in [0, count): the body, with `inits` carried from one iteration to the next (the
// block's arguments after the index; its yield gives the next ones). The results are the last
// iteration's values, or the inits when count is 0. An exit_if leaves the loop at once: last in
// the body, with the values the body yields; before, with each carried value as it stands (the
// yielded one if it is defined before the exit_if, else the iteration's own). The lowering
// refuses an exit_if where the registers would not hold that.
def Generate_BlockLoopOp : Op<Generate_Dialect, "block_loop", [SingleBlock]> {
  let arguments = (ins Decode_Integer:$count, Variadic<AnyType>:$inits);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let hasVerifier = 1;
}

// Denoising steps: the body's arguments are the step's index, its global step (base + index)
// and the carried values; an until, last before the yield, ends the loop after a step whose
// cond is true. `ran` is the number of steps run; the other results, the last step's values.
def Generate_DenoiseLoopOp : Op<Generate_Dialect, "denoise_loop", [SingleBlock]> {
  let arguments = (ins Decode_Integer:$cap, Decode_Integer:$bound, Decode_Integer:$base,
                   OptionalAttr<I64Attr>:$unroll, Variadic<AnyType>:$inits);
  let results = (outs I64:$ran, Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let hasVerifier = 1;
}

// The then or the else region, each ending in a yield of the results (an if with results has
// both).
def Generate_IfOp : Op<Generate_Dialect, "if", []> {
  let arguments = (ins Decode_Boolean:$cond);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$thenRegion, MaxSizedRegion<1>:$elseRegion);
  let hasVerifier = 1;
}

#endif // DLM_GENERATE_OPS_TD
