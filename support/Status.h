// Error values for code that must not depend on LLVM (the runtime, the artifact reader, the
// tokenizer). A Status carries a message that names the problem; StatusOr<T> is a value or that
// message. No exceptions cross library boundaries.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace dlm {

// What kind of failure, where a caller acts on it (the server's HTTP status): most errors are
// `failed`, their message says the rest.
enum class StatusCode {
  failed,
  // The request asks for more positions than the model or the KV pool can ever hold.
  contextLengthExceeded,
  // A bounded queue is full: retry later.
  queueFull,
  // The caller cancelled the work.
  cancelled,
  // The service is shutting down.
  unavailable,
};

class [[nodiscard]] Status {
public:
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }
  static Status error(StatusCode code, std::string message) {
    Status status(std::move(message));
    status.code_ = code;
    return status;
  }

  bool isOk() const { return !message_.has_value(); }
  explicit operator bool() const { return isOk(); }
  // The message; empty for an ok status.
  const std::string &message() const {
    static const std::string empty;
    return message_ ? *message_ : empty;
  }
  // `failed` for an ok status too.
  StatusCode code() const { return code_; }
  // Prepends context, e.g. the file name: "model.dlm: weight 'w' ends past the file".
  Status withContext(const std::string &context) const {
    return isOk() ? *this : error(code_, context + ": " + *message_);
  }

private:
  Status() = default;
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
  StatusCode code_ = StatusCode::failed;
};

template <typename T> class [[nodiscard]] StatusOr {
public:
  StatusOr(T value) : value_(std::move(value)), status_(Status::ok()) {}
  StatusOr(Status status) : status_(std::move(status)) {}

  bool isOk() const { return value_.has_value(); }
  explicit operator bool() const { return isOk(); }
  const Status &status() const { return status_; }
  T &value() & { return *value_; }
  const T &value() const & { return *value_; }
  T &&value() && { return std::move(*value_); }
  T *operator->() { return &*value_; }
  const T *operator->() const { return &*value_; }
  T &operator*() { return *value_; }
  const T &operator*() const { return *value_; }

private:
  std::optional<T> value_;
  Status status_;
};

} // namespace dlm

// Returns early from the enclosing function when `expr` is an error Status.
#define DLM_RETURN_IF_ERROR(expr)                                                              \
  do {                                                                                         \
    ::dlm::Status dlm_status_ = (expr);                                                        \
    if (!dlm_status_.isOk())                                                                   \
      return dlm_status_;                                                                      \
  } while (0)

// `lhs = value of expr`, or returns its error Status from the enclosing function.
// Usage: DLM_ASSIGN_OR_RETURN(config.hiddenSize, fields.positiveInt("d_model"));
#define DLM_ASSIGN_OR_RETURN(lhs, expr)                                                        \
  DLM_ASSIGN_OR_RETURN_IMPL_(DLM_STATUS_CONCAT_(dlm_status_or_, __LINE__), lhs, expr)
#define DLM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)                                             \
  auto tmp = (expr);                                                                           \
  if (!tmp.isOk())                                                                             \
    return tmp.status();                                                                       \
  lhs = std::move(*tmp)
#define DLM_STATUS_CONCAT_(a, b) DLM_STATUS_CONCAT_INNER_(a, b)
#define DLM_STATUS_CONCAT_INNER_(a, b) a##b
