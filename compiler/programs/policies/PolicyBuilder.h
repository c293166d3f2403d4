// What a decoding policy's builder writes its program with: a function of the generate dialect
// (compiler/dialects/generate/GenerateOps.td), one op per record in SSA form, that
// dlm-lower-to-decode-program lowers into decode records. The helpers give literals, facts and
// knobs, and name the values whose registers the records will write.
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

  // Literals (decode.constant) and facts of the model or the request (@prompt_len, ...).
  mlir::Value integer(int64_t value);
  mlir::Value real(double value);
  mlir::Value boolean(bool value);
  mlir::Value text(llvm::StringRef value);
  mlir::Value fact(llvm::StringRef name);

  // Knobs: the value a request gives, else the default dlmc stores, else this one.
  mlir::Value intKnob(llvm::StringRef name, int64_t fallback,
                      std::optional<int64_t> min = std::nullopt,
                      std::optional<int64_t> max = std::nullopt);
  mlir::Value realKnob(llvm::StringRef name, double fallback);

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
  mlir::ValueRange blockLoop(
      llvm::StringRef name, mlir::Value count, mlir::ValueRange inits,
      std::initializer_list<llvm::StringRef> argNames,
      llvm::function_ref<llvm::SmallVector<mlir::Value>(mlir::Value, mlir::ValueRange)> body);

  // Ends the function (func.return).
  void finish();

private:
  void nameResults(mlir::Operation *op, std::initializer_list<llvm::StringRef> names);

  mlir::ImplicitLocOpBuilder builder_;
};

} // namespace dlm::programs
