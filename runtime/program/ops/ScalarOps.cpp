// Scalar records: the ALU, `check`, and the host lists of the fixed-count schedule. Built with
// -ffp-contract=off: a chain such as t_min + (t_max - t_min) * r / S must round like the C++
// expression it stands for, operation by operation (in float32 with precision=f32).
#include "runtime/program/DecodeProgramSpec.h"
#include "runtime/program/InterpreterState.h"
#include "runtime/sampling/SamplingMath.h"

#include <algorithm>

namespace dlm::program::detail {

namespace dspec = spec::decode;

namespace {

// T is int64_t (an overflow fails the request), double, or float for precision=f32 (one float32
// operation on float32 operands). rem is integer only (the loader refuses a real one).
template <typename T> Status arithmetic(State &state, OpKind op, T a, T b, T &out, size_t at) {
  constexpr bool integer = std::is_integral_v<T>;
  bool overflow = false;
  switch (op) {
  case OpKind::add:
    if constexpr (integer)
      overflow = __builtin_add_overflow(a, b, &out);
    else
      out = a + b;
    break;
  case OpKind::sub:
    if constexpr (integer)
      overflow = __builtin_sub_overflow(a, b, &out);
    else
      out = a - b;
    break;
  case OpKind::mul:
    if constexpr (integer)
      overflow = __builtin_mul_overflow(a, b, &out);
    else
      out = a * b;
    break;
  case OpKind::div:
  case OpKind::rem:
    if (b == 0)
      return state.error(at, "division by zero");
    if constexpr (integer) {
      if (a == INT64_MIN && b == -1)
        overflow = true;
      else
        out = op == OpKind::div ? a / b : a % b;
    } else {
      out = a / b;
    }
    break;
  case OpKind::min:
    out = std::min(a, b);
    break;
  default:
    out = std::max(a, b);
    break;
  }
  return overflow ? state.error(at, "integer overflow") : Status::ok();
}

template <typename V> bool compare(OpKind op, const V &a, const V &b) {
  switch (op) {
  case OpKind::lt:
    return a < b;
  case OpKind::le:
    return a <= b;
  case OpKind::gt:
    return a > b;
  case OpKind::ge:
    return a >= b;
  case OpKind::eq:
    return a == b;
  default:
    return a != b;
  }
}

bool compareOperands(const State &state, OpKind op, const Operand &a, const Operand &b) {
  switch (a.type) {
  case ValueType::integer:
    return compare(op, state.integer(a), state.integer(b));
  case ValueType::real:
    return compare(op, state.real(a), state.real(b));
  case ValueType::boolean:
    return compare(op, state.boolean(a), state.boolean(b));
  default:
    return compare(op, state.text(a), state.text(b));
  }
}

std::string valueText(const State &state, const Operand &operand) {
  switch (operand.type) {
  case ValueType::integer:
    return std::to_string(state.integer(operand));
  case ValueType::real:
    return artifact::attributeValueText(state.real(operand));
  case ValueType::boolean:
    return state.boolean(operand) ? "true" : "false";
  default:
    return state.text(operand);
  }
}

} // namespace

Status runScalarOp(State &state, const Instruction &in, size_t at) {
  // Every ALU kind's result is its last parameter.
  Scalar &out = state.reg(in.operands.back()).scalar;
  switch (in.op) {
  case OpKind::set:
    out = state.scalar(in[0]);
    return Status::ok();
  case OpKind::add:
  case OpKind::sub:
  case OpKind::mul:
  case OpKind::div:
  case OpKind::rem:
  case OpKind::min:
  case OpKind::max:
    if (in[0].type == ValueType::integer)
      return arithmetic(state, in.op, state.integer(in[0]), state.integer(in[1]), out.integer, at);
    if (isF32(in[dspec::arithmetic_params::kPrecision])) {
      float result = 0;
      DLM_RETURN_IF_ERROR(arithmetic(state, in.op, static_cast<float>(state.real(in[0])),
                                     static_cast<float>(state.real(in[1])), result, at));
      out.real = result;
      return Status::ok();
    }
    return arithmetic(state, in.op, state.real(in[0]), state.real(in[1]), out.real, at);
  case OpKind::lt:
  case OpKind::le:
  case OpKind::gt:
  case OpKind::ge:
  case OpKind::eq:
  case OpKind::ne:
    out.boolean = compareOperands(state, in.op, in[0], in[1]);
    return Status::ok();
  case OpKind::logicalAnd:
    out.boolean = state.boolean(in[0]) && state.boolean(in[1]);
    return Status::ok();
  case OpKind::logicalOr:
    out.boolean = state.boolean(in[0]) || state.boolean(in[1]);
    return Status::ok();
  case OpKind::logicalNot:
    out.boolean = !state.boolean(in[0]);
    return Status::ok();
  case OpKind::select:
    out = state.scalar(state.boolean(in[0]) ? in[1] : in[2]);
    return Status::ok();
  case OpKind::toReal:
    out.real = in[0].type == ValueType::integer ? static_cast<double>(state.integer(in[0]))
                                                : state.real(in[0]);
    if (isF32(in[dspec::to_real_params::kPrecision]))
      out.real = static_cast<float>(out.real);
    return Status::ok();
  case OpKind::defined:
    out.boolean = state.knobs[static_cast<size_t>(in[0].index)].defined;
    return Status::ok();
  default:
    return state.error(at, "not a scalar record");
  }
}

Status runCheck(State &state, const Instruction &in, size_t) {
  using namespace dspec::check_params;
  if (state.boolean(in[kCond]))
    return Status::ok();
  const std::string &format = state.text(in[kMessage]);
  std::string message;
  size_t arg = kArg0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format.compare(i, 2, "{}") == 0 && arg < in.operands.size() && in[arg].given()) {
      message += valueText(state, in[arg++]);
      ++i;
    } else {
      message += format[i];
    }
  }
  return Status::error(message);
}

Status runTransferSchedule(State &state, const Instruction &in, size_t) {
  using namespace dspec::transfer_schedule_params;
  const int64_t masked = state.integer(in[kMasked]);
  int64_t steps = state.integer(in[kSteps]);
  // Past `masked` steps the schedule is all zeros and no mask is left to take them: a shorter
  // list is the same schedule, and a request's huge step count allocates nothing.
  if (masked > 0 && steps > masked)
    steps = masked;
  state.reg(in[kOut]).list = sampling::numTransferTokens(masked, steps);
  return Status::ok();
}

Status runListAt(State &state, const Instruction &in, size_t) {
  using namespace dspec::list_at_params;
  const std::vector<int64_t> &list = state.reg(in[kList]).list;
  const int64_t index = state.integer(in[kIndex]);
  state.reg(in[kOut]).scalar.integer = index >= 0 && index < static_cast<int64_t>(list.size())
                                           ? list[static_cast<size_t>(index)]
                                           : state.integer(in[kDefault]);
  return Status::ok();
}

} // namespace dlm::program::detail
