// A generated kernel's launch as its generator declares it, so that the CUDA backend launches it
// without knowing its kind: what each argument is bound to, in signature order, and the grid.
// CUDA codegen writes both into the kernel's specialisation (compiler/codegen/KernelText.h,
// declareLaunch); the CUDA backend's declared launcher (the default `cudaLaunch` of
// runtime/schema/KernelOps.td) reads them back. Header-only: codegen links no runtime library.
//
// Arguments, comma-separated (launch_arguments):
//   operandN, result          the record's value slot (operand N, the result): device rows
//   operandN_stride, result_stride   that slot's width, `long long`
//   rows                      the forward's token count, `int`
//   tokens, positions         the forward's token ids and positions (int32 device arrays)
//   weight:NAME               the device tensor of the record's weight parameter NAME
//   weight_rows:NAME          its rows, `long long`
//   real:NAME, integer:NAME   the record's scalar parameter NAME, as `float` / `int`
// Grid (launch_grid): "X,Y", each a positive integer or `rows`.
#pragma once

#include "support/SplitText.h"
#include "support/Status.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlm::spec::kernels {

inline constexpr std::string_view kLaunchArguments = "launch_arguments";
inline constexpr std::string_view kLaunchGrid = "launch_grid";

enum class ArgumentSource : uint8_t {
  operand,
  operandStride,
  result,
  resultStride,
  rows,
  tokens,
  positions,
  weight,
  weightRows,
  real,
  integer,
};

struct LaunchArgument {
  ArgumentSource source = ArgumentSource::rows;
  int64_t operand = 0;   // operand, operandStride
  std::string parameter; // weight, weightRows, real, integer: the record's parameter
};

// One grid dimension: a fixed count, or the forward's token count.
struct GridDimension {
  bool rows = false;
  int64_t count = 1;
};

struct DeclaredLaunch {
  std::vector<LaunchArgument> arguments;
  GridDimension x, y;
};

// The C type an argument of `source` has in the kernel's signature: a pointer ("*"), or
// "long long", "int", "float".
inline std::string_view argumentType(ArgumentSource source) {
  switch (source) {
  case ArgumentSource::operandStride:
  case ArgumentSource::resultStride:
  case ArgumentSource::weightRows:
    return "long long";
  case ArgumentSource::rows:
  case ArgumentSource::integer:
    return "int";
  case ArgumentSource::real:
    return "float";
  case ArgumentSource::operand:
  case ArgumentSource::result:
  case ArgumentSource::tokens:
  case ArgumentSource::positions:
  case ArgumentSource::weight:
    break;
  }
  return "*";
}

namespace detail {

inline bool parseCount(std::string_view text, int64_t &value) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != text.npos)
    return false;
  value = std::stoll(std::string(text));
  return true;
}

inline StatusOr<LaunchArgument> parseLaunchArgument(std::string_view text) {
  const std::string_view named[] = {"weight:", "weight_rows:", "real:", "integer:"};
  const ArgumentSource namedSources[] = {ArgumentSource::weight, ArgumentSource::weightRows,
                                         ArgumentSource::real, ArgumentSource::integer};
  LaunchArgument argument;
  for (size_t i = 0; i < std::size(named); ++i)
    if (text.substr(0, named[i].size()) == named[i] && text.size() > named[i].size()) {
      argument.source = namedSources[i];
      argument.parameter = std::string(text.substr(named[i].size()));
      return argument;
    }
  const std::pair<std::string_view, ArgumentSource> plain[] = {
      {"result", ArgumentSource::result},
      {"result_stride", ArgumentSource::resultStride},
      {"rows", ArgumentSource::rows},
      {"tokens", ArgumentSource::tokens},
      {"positions", ArgumentSource::positions}};
  for (const auto &[name, source] : plain)
    if (text == name) {
      argument.source = source;
      return argument;
    }
  std::string_view operand = text.substr(0, 7) == "operand" ? text.substr(7) : std::string_view();
  const bool stride = operand.size() > 7 && operand.substr(operand.size() - 7) == "_stride";
  if (stride)
    operand.remove_suffix(7);
  if (parseCount(operand, argument.operand)) {
    argument.source = stride ? ArgumentSource::operandStride : ArgumentSource::operand;
    return argument;
  }
  return Status::error("launch argument '" + std::string(text) + "' is not one of operandN, " +
                       "operandN_stride, result, result_stride, rows, tokens, positions, " +
                       "weight:NAME, weight_rows:NAME, real:NAME, integer:NAME");
}

inline StatusOr<GridDimension> parseGridDimension(std::string_view text) {
  GridDimension dimension;
  if (text == "rows") {
    dimension.rows = true;
    return dimension;
  }
  if (parseCount(text, dimension.count) && dimension.count > 0)
    return dimension;
  return Status::error("grid dimension '" + std::string(text) +
                       "' is not 'rows' or a positive count");
}

} // namespace detail

// The launch `arguments` and `grid` declare, or an error naming what is wrong.
inline StatusOr<DeclaredLaunch> parseDeclaredLaunch(std::string_view arguments,
                                                    std::string_view grid) {
  DeclaredLaunch launch;
  // "a,,b" and "a," hold an empty argument, which is refused; "" declares none.
  for (std::string_view text : splitList(arguments, ',')) {
    DLM_ASSIGN_OR_RETURN(LaunchArgument argument, detail::parseLaunchArgument(text));
    launch.arguments.push_back(std::move(argument));
  }
  const size_t comma = grid.find(',');
  if (comma == grid.npos)
    return Status::error("launch grid '" + std::string(grid) + "' is not 'X,Y'");
  DLM_ASSIGN_OR_RETURN(launch.x, detail::parseGridDimension(grid.substr(0, comma)));
  DLM_ASSIGN_OR_RETURN(launch.y, detail::parseGridDimension(grid.substr(comma + 1)));
  return launch;
}

} // namespace dlm::spec::kernels
