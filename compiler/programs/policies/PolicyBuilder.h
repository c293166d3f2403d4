// What a decoding policy's builder writes its program with: a function of the generate dialect
// (compiler/dialects/generate/GenerateOps.td), one op per record in SSA form, that
// dlm-lower-to-decode-program lowers into decode records. The helpers give literals, facts and
// knobs, and name the values whose registers the records will write. Records come out in the
// order they are built, so a builder makes one record per statement where C++ would otherwise
// leave the order of two calls to the compiler (two arguments of one call).
#pragma once

#include "compiler/dialects/generate/GenerateDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <initializer_list>
#include <optional>

namespace dlm::programs {

class PolicyBuilder {
public:
  // Starts the function @`policy` in `module`.
  PolicyBuilder(mlir::ModuleOp module, llvm::StringRef policy);

  mlir::ImplicitLocOpBuilder &b() { return builder_; }

  mlir::Type i64() { return builder_.getI64Type(); }
  mlir::Type f64() { return builder_.getF64Type(); }
  mlir::Type i1() { return builder_.getI1Type(); }
  mlir::Type tokens() { return decode::TokensType::get(builder_.getContext()); }
  mlir::Type reals() { return decode::RealsType::get(builder_.getContext()); }
  mlir::Type flags() { return decode::FlagsType::get(builder_.getContext()); }
  mlir::Type list() { return decode::ListType::get(builder_.getContext()); }
  mlir::Type credit() { return decode::CreditType::get(builder_.getContext()); }
  mlir::Type logits() { return decode::LogitsType::get(builder_.getContext()); }

  // Literals (decode.constant) and facts of the model or the request (@prompt_len, ...).
  mlir::Value integer(int64_t value);
  mlir::Value real(double value);
  mlir::Value boolean(bool value);
  mlir::Value text(llvm::StringRef value);
  mlir::Value fact(llvm::StringRef name);

  // Knobs: the value a request gives, else the default dlmc stores, else `fallback` (none for an
  // optional knob, which `defined` tests). `oneOf` lists a text knob's values (comma-separated)
  // and `error` its message for others ("{}": the value); `min` and `max` bound a number.
  struct KnobSpec {
    mlir::Attribute fallback;
    bool optional = false;
    llvm::StringRef oneOf = {}, error = {};
    mlir::Attribute min = {}, max = {};
  };
  mlir::Value knob(llvm::StringRef name, mlir::Type type, const KnobSpec &spec);
  mlir::Value intKnob(llvm::StringRef name, int64_t fallback,
                      std::optional<int64_t> min = std::nullopt,
                      std::optional<int64_t> max = std::nullopt);
  mlir::Value realKnob(llvm::StringRef name, double fallback);
  mlir::Value boolKnob(llvm::StringRef name, bool fallback);
  mlir::Value textKnob(llvm::StringRef name, std::optional<llvm::StringRef> fallback,
                       llvm::StringRef oneOf, llvm::StringRef error);

  // Scalar records, each result's register named `name`. Arithmetic gives a real when either
  // operand is one, computed in `precision` (f64 when empty, or f32: rounded as float32 is).
  mlir::Value add(llvm::StringRef name, mlir::Value a, mlir::Value b,
                  llvm::StringRef precision = {});
  mlir::Value sub(llvm::StringRef name, mlir::Value a, mlir::Value b,
                  llvm::StringRef precision = {});
  mlir::Value mul(llvm::StringRef name, mlir::Value a, mlir::Value b,
                  llvm::StringRef precision = {});
  mlir::Value div(llvm::StringRef name, mlir::Value a, mlir::Value b,
                  llvm::StringRef precision = {});
  mlir::Value rem(llvm::StringRef name, mlir::Value a, mlir::Value b);
  mlir::Value gt(llvm::StringRef name, mlir::Value a, mlir::Value b);
  mlir::Value ge(llvm::StringRef name, mlir::Value a, mlir::Value b);
  mlir::Value le(llvm::StringRef name, mlir::Value a, mlir::Value b);
  mlir::Value eq(llvm::StringRef name, mlir::Value a, mlir::Value b);
  mlir::Value both(llvm::StringRef name, mlir::Value a, mlir::Value b);   // and
  mlir::Value either(llvm::StringRef name, mlir::Value a, mlir::Value b); // or
  mlir::Value negate(llvm::StringRef name, mlir::Value a);                // not
  mlir::Value select(llvm::StringRef name, mlir::Value cond, mlir::Value a, mlir::Value b);
  mlir::Value set(llvm::StringRef name, mlir::Value a);
  mlir::Value toReal(llvm::StringRef name, mlir::Value a, llvm::StringRef precision = {});
  mlir::Value defined(llvm::StringRef name, mlir::Value knob);

  // `op`'s results get registers named `names`, in order.
  template <typename OpT> OpT named(std::initializer_list<llvm::StringRef> names, OpT op) {
    nameResults(op.getOperation(), names);
    return op;
  }
  // The one result of `op`, its register named `name`.
  template <typename OpT> mlir::Value value(llvm::StringRef name, OpT op) {
    nameResults(op.getOperation(), {name});
    return op->getResult(0);
  }

  // A check that fails the request with `message` ("{}" takes arg0, arg1, ... in turn).
  void check(mlir::Value cond, llvm::StringRef message, mlir::Value arg0 = {},
             mlir::Value arg1 = {});

  // A block_loop named `name` (its profile scope) over index in [0, count), carrying `inits`:
  // `body` gets the index and the carried values and returns the next ones. `argNames` name the
  // index's and the carried values' registers. The results are the carried values at the end.
  mlir::ValueRange
  blockLoop(llvm::StringRef name, mlir::Value count, mlir::ValueRange inits,
            std::initializer_list<llvm::StringRef> argNames,
            llvm::function_ref<llvm::SmallVector<mlir::Value>(mlir::Value, mlir::ValueRange)> body);

  // A forward of seq[0, count) (mode full, cached, window, append or extend) whose logit rows
  // [rowBegin, rowEnd) the records after it read; see DecodeOps.td's forward.
  struct Forward {
    llvm::StringRef mode;
    mlir::Value count, keep, rowBegin, rowEnd;
    mlir::Value feedEnd = {};
    std::optional<bool> decoded = std::nullopt;
    llvm::StringRef function = {};
    mlir::Value input = {}, first = {};
    mlir::Type capture = {};
    mlir::Value inputScale = {}; // with input: ForwardSpec::inputScale (a real)
    mlir::Value inputAt = {}; // with input: the position of its first row (ForwardSpec::inputFirst)
  };
  generate::ForwardOp forward(const Forward &f);

  // An if: `then` (and `otherwise`, when given) write records and give no values.
  void ifThen(mlir::Value cond, llvm::function_ref<void()> then,
              llvm::function_ref<void()> otherwise = nullptr);

  // An if whose branches each give values of `types`, its results (registers named `names`).
  mlir::ValueRange ifElse(mlir::Value cond, mlir::TypeRange types,
                          std::initializer_list<llvm::StringRef> names,
                          llvm::function_ref<llvm::SmallVector<mlir::Value>()> then,
                          llvm::function_ref<llvm::SmallVector<mlir::Value>()> otherwise);

  // A denoise_loop named `name` of at most min(cap, bound) steps from global step `base`,
  // carrying `inits`: `body` gets the step's index, its global step and the carried values, and
  // returns the until condition (the loop ends after a step where it holds) and the next carried
  // values. `argNames` name the index's, the global step's and the carried values' registers.
  struct DenoiseLoop {
    mlir::Value ran;          // the steps run
    mlir::ValueRange carried; // the carried values after the last step
  };
  using DenoiseBody = llvm::function_ref<std::pair<mlir::Value, llvm::SmallVector<mlir::Value>>(
      mlir::Value, mlir::Value, mlir::ValueRange)>;
  DenoiseLoop denoiseLoop(llvm::StringRef name, mlir::Value cap, mlir::Value bound,
                          mlir::Value base, mlir::ValueRange inits,
                          std::initializer_list<llvm::StringRef> argNames, llvm::StringRef ranName,
                          DenoiseBody body);

  // Ends the function (func.return).
  void finish();

private:
  void nameResults(mlir::Operation *op, std::initializer_list<llvm::StringRef> names);
  mlir::ArrayAttr names(std::initializer_list<llvm::StringRef> names);
  template <typename OpT>
  mlir::Value arithmetic(llvm::StringRef name, mlir::Value a, mlir::Value b,
                         llvm::StringRef precision = {});
  mlir::StringAttr optionalText(llvm::StringRef text);
  template <typename OpT> mlir::Value compare(llvm::StringRef name, mlir::Value a, mlir::Value b);

  mlir::ImplicitLocOpBuilder builder_;
};

} // namespace dlm::programs
