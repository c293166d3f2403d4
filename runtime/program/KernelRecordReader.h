// What reading a kernel record (runtime/model/KernelProgram.h) takes, shared by the program's
// builder (KernelProgram.cpp) and the checks of each kind (KernelRecordChecks.cpp): access to
// the parameters every record has, errors that name the record, and overflow-checked products.
// A kind's own parameters are read by its generated reader (runtime/model/KernelParams.h).
#pragma once

#include "runtime/artifact/ArtifactFormat.h"
#include "runtime/model/KernelParams.h"
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
  StatusOr<std::string> text(std::string_view key) const { return get<std::string>(key, "text"); }

  StatusOr<std::vector<int64_t>> slots(std::string_view key) const {
    StatusOr<std::string> list = text(key);
    if (!list)
      return list.status();
    std::optional<std::vector<int64_t>> slots = spec::kernels::parseSlots(*list);
    if (!slots)
      return error("operands '" + *list + "' is not a comma-separated list of slot numbers");
    return std::move(*slots);
  }

private:
  const artifact::Kernel &record_;
  std::string where_;
};

} // namespace dlm::program::detail

// target = *expr, or return expr's error.
#define DLM_ASSIGN(target, expr)                                                                   \
  do {                                                                                             \
    auto value_ = (expr);                                                                          \
    if (!value_)                                                                                   \
      return value_.status();                                                                      \
    target = *value_;                                                                              \
  } while (0)
