// What reading a kernel record (runtime/model/KernelProgram.h) takes, shared by the program's
// builder (KernelProgram.cpp) and the checks of each kind (KernelRecordChecks.cpp): typed
// parameter access whose errors name the record, and overflow-checked products.
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/model/ModelWeights.h"
#include "support/Status.h"

#include <algorithm>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace dlm::program::detail {

inline std::string str(int64_t value) { return std::to_string(value); }

// a * b of record fields, which a damaged artifact makes anything: nullopt past int64 (the
// product would be undefined), which no width equals.
inline std::optional<int64_t> product(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

// One record being read; errors carry its position and name.
class RecordReader {
public:
  RecordReader(const artifact::Kernel &record, size_t index)
      : record_(record),
        where_("kernel record " + std::to_string(index) + " ('" + record.name + "')") {}

  Status error(const std::string &message) const { return Status::error(where_ + ": " + message); }
  const std::string &where() const { return where_; }

  bool has(std::string_view key) const { return record_.parameters.count(key) != 0; }
  const artifact::Attributes &parameters() const { return record_.parameters; }

  template <typename T> StatusOr<T> get(std::string_view key, const char *type) const {
    auto it = record_.parameters.find(key);
    if (it == record_.parameters.end() || !std::holds_alternative<T>(it->second))
      return error("parameter '" + std::string(key) + "' is missing or not " + type);
    return std::get<T>(it->second);
  }
  StatusOr<int64_t> integer(std::string_view key) const { return get<int64_t>(key, "an integer"); }
  StatusOr<double> real(std::string_view key) const { return get<double>(key, "a real"); }
  StatusOr<std::string> text(std::string_view key) const { return get<std::string>(key, "text"); }
  StatusOr<bool> flag(std::string_view key) const { return get<bool>(key, "a boolean"); }

  StatusOr<std::vector<int64_t>> slots(std::string_view key) const {
    StatusOr<std::string> list = text(key);
    if (!list)
      return list.status();
    std::vector<int64_t> slots;
    size_t start = 0;
    while (start <= list->size()) {
      size_t end = list->find(',', start);
      if (end == std::string::npos)
        end = list->size();
      std::string item = list->substr(start, end - start);
      if (item.empty() || item.size() > 9 ||
          !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return error("operands '" + *list + "' is not a comma-separated list of slot numbers");
      slots.push_back(std::stoll(item));
      start = end + 1;
    }
    return slots;
  }

  // The tensor named by parameter `key`, its name kept in `name`.
  StatusOr<const model::HostTensor *> weight(std::string_view key,
                                             const model::ModelWeights &weights, std::string &name,
                                             bool optional = false, bool widen = true) const {
    if (optional && !has(key))
      return static_cast<const model::HostTensor *>(nullptr);
    StatusOr<std::string> given = text(key);
    if (!given)
      return given.status();
    const model::HostTensor *tensor = weights.find(*given);
    if (!tensor)
      return error("missing weight '" + *given + "'");
    if (widen) {
      StatusOr<const model::HostTensor *> widened = weights.widened(*given);
      if (!widened)
        return error(widened.status().message());
    }
    name = *given;
    return tensor;
  }

private:
  const artifact::Kernel &record_;
  std::string where_;
};

// An optional parameter: `fallback` when absent, else it must have the type.
template <typename T>
StatusOr<T> optional(const RecordReader &r, std::string_view key, const char *type, T fallback) {
  if (!r.has(key))
    return fallback;
  return r.get<T>(key, type);
}

} // namespace dlm::program::detail

// target = *expr, or return expr's error.
#define DLM_ASSIGN(target, expr)                                                                   \
  do {                                                                                             \
    auto value_ = (expr);                                                                          \
    if (!value_)                                                                                   \
      return value_.status();                                                                      \
    target = *value_;                                                                              \
  } while (0)
