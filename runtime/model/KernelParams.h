// Each kernel kind's parameters as a typed struct, declared once in runtime/schema/KernelOps.td:
// dlm-tblgen -gen-kernel-params writes, for every kind, <Kind>Params (rope: RopeParams{theta,
// headDim, rotatedPairs}) with an optional parameter's default already applied (a std::optional
// where the .td gives none), its forEachWeight, and readParams, which parses a record's
// parameters into it; KernelParams is the variant of them in kind order. Header-only, like
// KernelProgram.h, so that the runtime's loader and CUDA codegen (which links no runtime
// library) read a record the same way.
//
// A reader only parses: a missing required parameter or one of another type is an error that
// names it ("parameter 'eps' is missing or not a real"); ranges and shapes are the checks'
// (runtime/program/KernelRecordChecks.cpp).
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/model/KernelProgram.h"
#include "support/SplitText.h"
#include "support/Status.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace dlm::model {
struct HostTensor;
} // namespace dlm::model

namespace dlm::spec::kernels {

// A weight parameter: the canonical name the record gives (empty: an optional weight left out)
// and, once the runtime's loader resolved it, the host tensor (codegen leaves it null).
struct WeightRef {
  std::string name;
  const model::HostTensor *tensor = nullptr;

  explicit operator bool() const { return !name.empty(); }
};

enum class Presence : uint8_t { required, optional };

// "4,5" → {4, 5}; nullopt unless every item is a slot number of at most nine digits.
inline std::optional<std::vector<int64_t>> parseSlots(std::string_view list) {
  std::vector<int64_t> slots;
  for (std::string_view item : splitText(list, ',')) {
    if (item.empty() || item.size() > 9 ||
        !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    slots.push_back(std::stoll(std::string(item)));
  }
  return slots;
}

namespace params_detail {

inline Status missingOrNot(std::string_view key, const char *type) {
  return Status::error("parameter '" + std::string(key) + "' is missing or not " + type);
}

// The stored value of `key` as T; `found` null when the record leaves it out.
template <typename T>
Status storedValue(const artifact::Attributes &parameters, std::string_view key, Presence presence,
                   const char *type, const T *&found) {
  found = nullptr;
  auto it = parameters.find(key);
  if (it == parameters.end())
    return presence == Presence::required ? missingOrNot(key, type) : Status::ok();
  found = std::get_if<T>(&it->second);
  return found ? Status::ok() : missingOrNot(key, type);
}

template <typename T> constexpr const char *typeName() {
  if constexpr (std::is_same_v<T, int64_t>)
    return "an integer";
  else if constexpr (std::is_same_v<T, double>)
    return "a real";
  else if constexpr (std::is_same_v<T, bool>)
    return "a boolean";
  else
    return "text";
}

// The artifact's type of a parameter held as T: T itself, or what a std::optional holds.
template <typename T> struct StoredAs { using type = T; };
template <typename T> struct StoredAs<std::optional<T>> { using type = T; };

} // namespace params_detail

// An integer, real, flag or text parameter, plain or std::optional (an optional one the kind
// tells apart from absent); absent and optional leaves `out` as it is.
template <typename T>
Status readParameter(const artifact::Attributes &parameters, std::string_view key,
                     Presence presence, T &out) {
  using Stored = typename params_detail::StoredAs<T>::type;
  const Stored *found = nullptr;
  DLM_RETURN_IF_ERROR(params_detail::storedValue(parameters, key, presence,
                                                 params_detail::typeName<Stored>(), found));
  if (found)
    out = *found;
  return Status::ok();
}

inline Status readParameter(const artifact::Attributes &parameters, std::string_view key,
                            Presence presence, WeightRef &out) {
  const std::string *found = nullptr;
  DLM_RETURN_IF_ERROR(params_detail::storedValue(parameters, key, presence, "text", found));
  if (found && found->empty())
    return Status::error("parameter '" + std::string(key) + "' names no weight");
  if (found)
    out.name = *found;
  return Status::ok();
}

inline Status readParameter(const artifact::Attributes &parameters, std::string_view key,
                            Presence presence, std::vector<int64_t> &out) {
  const std::string *found = nullptr;
  DLM_RETURN_IF_ERROR(params_detail::storedValue(parameters, key, presence, "text", found));
  if (!found)
    return Status::ok();
  std::optional<std::vector<int64_t>> slots = parseSlots(*found);
  if (!slots)
    return Status::error(std::string(key) + " '" + *found +
                         "' is not a comma-separated list of slot numbers");
  out = std::move(*slots);
  return Status::ok();
}

// A text parameter out of `choices`; the enum's values are the choices' indices.
template <typename Choice, size_t N>
Status readParameter(const artifact::Attributes &parameters, std::string_view key,
                     Presence presence, Choice &out, const std::string_view (&choices)[N]) {
  const std::string *found = nullptr;
  DLM_RETURN_IF_ERROR(params_detail::storedValue(parameters, key, presence, "text", found));
  if (!found)
    return Status::ok();
  for (size_t i = 0; i < N; ++i)
    if (choices[i] == *found) {
      out = static_cast<Choice>(i);
      return Status::ok();
    }
  std::string listed;
  for (size_t i = 0; i < N; ++i)
    listed += (i ? ", " : "") + std::string(choices[i]);
  return Status::error("parameter '" + std::string(key) + "' is '" + *found + "', not one of " +
                       listed);
}

// The reader of kind P into the variant.
template <typename P, typename Variant>
Status readAlternative(const artifact::Attributes &parameters, Variant &out) {
  P params;
  DLM_RETURN_IF_ERROR(readParams(parameters, params));
  out = std::move(params);
  return Status::ok();
}

#include "runtime/schema/KernelParams.inc"

static_assert(std::variant_size_v<KernelParams> == std::size(kKindContracts));

// Alternative i is the parameters of kind i, so that a record's kind is its params' index.
template <size_t... I> constexpr bool alternativesInKindOrder(std::index_sequence<I...>) {
  return ((static_cast<size_t>(std::variant_alternative_t<I, KernelParams>::kind) == I) && ...);
}
static_assert(
    alternativesInKindOrder(std::make_index_sequence<std::variant_size_v<KernelParams>>()));

// The parameters of a record of `kind`.
inline StatusOr<KernelParams> readKernelParams(KernelKind kind,
                                               const artifact::Attributes &parameters) {
  KernelParams params;
  DLM_RETURN_IF_ERROR(kParamsReaders[static_cast<size_t>(kind)](parameters, params));
  return params;
}

} // namespace dlm::spec::kernels
