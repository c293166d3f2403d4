// The contract of the kernel records (artifact KernelTarget "cpu", a name kept from when only the
// CPU backend read them): the compiled @forward as a flat, ordered list of kernel launches,
// written by dlmc (the pass dlm-lower-to-kernel-program computes it) and executed by every
// backend (runtime/program/KernelProgram.h parses them). Header-only, with no dependency but its
// generated tables, like ModelSpec.h, so that both sides include it.
//
// Each record is an artifact::Kernel: `kind` is one of the kinds, `name` a label for profiles
// ("q_proj", "attn_norm", ...), and `parameters` its parameters. The kinds, their operands and
// parameters (what each means, its type, whether it may be left out and its default then) are
// declared once, in runtime/schema/KernelOps.td; dlm-tblgen writes the enum, the names and the
// tables below from it (runtime/schema/KernelRecordSpec.inc in the build tree).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dlm::spec::kernels {

inline constexpr std::string_view kTarget = "cpu";

// A parameter's type, as the artifact stores it: weight (a canonical weight name) and slots
// (comma-separated value slots) are text.
enum class ParameterType : uint8_t { integer, real, text, flag, weight, slots };

struct ParameterSpec {
  std::string_view name;
  ParameterType type;
  bool required;
  const std::string_view *choices = nullptr; // text out of a closed set; null: any
  size_t choiceCount = 0;
};

inline constexpr int kAnyOperandCount = -1; // one or more

// Where the memory plan may place a kind's result on a slot it reads last (KernelOps.td's
// inPlace): nowhere, on its first operand, or on any operand.
enum class InPlace : uint8_t { none, firstOperand, anyOperand };

struct KindContract {
  std::string_view name;
  uint8_t kind; // its KernelKind
  int operands; // without the residual of an accumulating linear; kAnyOperandCount: one or more
  bool hasResult;
  InPlace inPlace;
  // Whether a record of the kind needs a generated kernel on CUDA (KernelOps.td).
  bool cudaNeedsKernel;
  const ParameterSpec *parameters = nullptr; // beyond kCommonParameters
  size_t parameterCount = 0;
};

// Whether a record needs a generated kernel on CUDA: its kind does (those that do not run as
// cuBLASLt GEMMs or device copies), or it fuses a norm (its norm_weight), which always runs as one.
constexpr bool needsCudaKernel(const KindContract &contract, bool fusesNorm) {
  return contract.cudaNeedsKernel || fusesNorm;
}

template <typename Kind, size_t N>
constexpr KindContract kindContract(std::string_view name, Kind kind, int operands, bool hasResult,
                                    InPlace inPlace, bool cudaNeedsKernel,
                                    const ParameterSpec (&parameters)[N]) {
  return {
      name, static_cast<uint8_t>(kind), operands, hasResult, inPlace, cudaNeedsKernel, parameters,
      N};
}
template <typename Kind>
constexpr KindContract kindContract(std::string_view name, Kind kind, int operands, bool hasResult,
                                    InPlace inPlace, bool cudaNeedsKernel) {
  return {name, static_cast<uint8_t>(kind), operands, hasResult, inPlace, cudaNeedsKernel};
}

#include "runtime/schema/KernelRecordSpec.inc"

// The contract of the kind named `name`; null when there is none.
inline const KindContract *findKindContract(std::string_view name) {
  for (const KindContract &contract : kKindContracts)
    if (contract.name == name)
      return &contract;
  return nullptr;
}

// The declaration of parameter `name` in `contract` or in the common part; null when neither
// declares it.
inline const ParameterSpec *findParameter(const KindContract &contract, std::string_view name) {
  for (size_t i = 0; i < contract.parameterCount; ++i)
    if (contract.parameters[i].name == name)
      return &contract.parameters[i];
  for (const ParameterSpec &common : kCommonParameters)
    if (common.name == name)
      return &common;
  return nullptr;
}

// The function of records without a `function` parameter.
inline constexpr std::string_view kDefaultFunction = "forward";

inline constexpr int64_t kTokensSlot = 0;
inline constexpr int64_t kPositionsSlot = 1;
inline constexpr int64_t kFirstResultSlot = 2;

// Result offsets are multiples of this many elements (64 bytes of f32), so every slot of every
// token count starts 64-byte aligned.
inline constexpr int64_t kRowAlignmentElements = 16;

// The role of a canonical weight name, its last component: "layers.0.attn_norm" -> "attn_norm".
// Names records and profile labels on both sides.
inline std::string_view weightRole(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

} // namespace dlm::spec::kernels
