// Typed reads of config.json fields with errors that name the field, shared by the families'
// readers (ModelFamily.cpp, DiffusionGemmaFamily.cpp).
#pragma once

#include "support/JsonText.h"
#include "support/Status.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dlm::importer {

// Reads typed fields of config.json with errors that name the field.
class ConfigFields {
public:
  explicit ConfigFields(const nlohmann::json &config, std::string file = "config.json")
      : config_(config), file_(std::move(file)) {}

  // Sizes are bounded before anything is allocated for them: far above any real model's
  // (Gemma's 262144-token vocabulary, 126 layers, 256 experts), and small enough that the product
  // of two sizes stays far inside int64 and a loop over layers or experts stays short.
  static constexpr int64_t kMaxDimension = int64_t(1) << 24;
  static constexpr int64_t kMaxLayers = 1024;
  static constexpr int64_t kMaxExperts = 4096;

  // A positive integer of at most `most` (kMaxDimension: any size; kMaxLayers, kMaxExperts).
  StatusOr<int64_t> positiveInt(const char *field, int64_t most = kMaxDimension) const {
    auto it = config_.find(field);
    if (it == config_.end())
      return Status::error(file_ + ": missing field '" + field + "'");
    if (!it->is_number_integer() || it->get<int64_t>() <= 0)
      return Status::error(file_ + ": field '" + field +
                           "' must be a positive integer, got " + jsonExcerpt(*it));
    if (it->get<int64_t>() > most)
      return Status::error(file_ + ": field '" + field + "' is " +
                           std::to_string(it->get<int64_t>()) + ", more than dlm's limit of " +
                           std::to_string(most));
    return it->get<int64_t>();
  }
  StatusOr<int64_t> positiveIntOr(const char *field, int64_t fallback,
                                  int64_t most = kMaxDimension) const {
    auto it = config_.find(field);
    if (it == config_.end() || it->is_null())
      return fallback;
    return positiveInt(field, most);
  }
  StatusOr<double> positiveNumberOr(const char *field, double fallback) const {
    auto it = config_.find(field);
    if (it == config_.end() || it->is_null())
      return fallback;
    if (!it->is_number() || !(it->get<double>() > 0.0) || !std::isfinite(it->get<double>()))
      return Status::error(file_ + ": field '" + field +
                           "' must be a positive number, got " + jsonExcerpt(*it));
    return it->get<double>();
  }
  // An integer >= 0 (a count that may be zero).
  StatusOr<int64_t> nonNegativeIntOr(const char *field, int64_t fallback,
                                     int64_t most = kMaxDimension) const {
    auto it = config_.find(field);
    if (it == config_.end() || it->is_null())
      return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > most)
      return Status::error(file_ + ": field '" + field + "' must be an integer in [0, " +
                           std::to_string(most) + "], got " + jsonExcerpt(*it));
    return it->get<int64_t>();
  }
  StatusOr<std::string> textOr(const char *field, std::string fallback) const {
    auto it = config_.find(field);
    if (it == config_.end() || it->is_null())
      return fallback;
    if (!it->is_string())
      return Status::error(file_ + ": field '" + field + "' must be a string, got " +
                           jsonExcerpt(*it));
    return it->get<std::string>();
  }
  StatusOr<bool> boolOr(const char *field, bool fallback) const {
    auto it = config_.find(field);
    if (it == config_.end() || it->is_null())
      return fallback;
    if (!it->is_boolean())
      return Status::error(file_ + ": field '" + field +
                           "' must be true or false, got " + jsonExcerpt(*it));
    return it->get<bool>();
  }
  // A token id (-1 when absent); eos may also be a list.
  StatusOr<std::vector<int64_t>> tokenIds(const char *field) const {
    return nonNegativeInts(field, "token ids", true);
  }
  // A list of non-negative integers, `what` they are in the message (empty when absent); one
  // integer alone too with `allowScalar`.
  StatusOr<std::vector<int64_t>> nonNegativeInts(const char *field, const char *what,
                                                 bool allowScalar) const {
    auto it = config_.find(field);
    if (it == config_.end() || it->is_null())
      return std::vector<int64_t>{};
    std::vector<int64_t> values;
    auto add = [&](const nlohmann::json &value) -> Status {
      if (!value.is_number_integer() || value.get<int64_t>() < 0)
        return Status::error(file_ + ": field '" + field + "' must hold non-negative " + what +
                             ", got " + jsonExcerpt(*it));
      values.push_back(value.get<int64_t>());
      return Status::ok();
    };
    if (it->is_array()) {
      for (const nlohmann::json &value : *it)
        DLM_RETURN_IF_ERROR(add(value));
    } else if (allowScalar) {
      DLM_RETURN_IF_ERROR(add(*it));
    } else {
      return Status::error(file_ + ": field '" + field + "' must be a list of " + what + ", got " +
                           jsonExcerpt(*it));
    }
    return values;
  }
  StatusOr<int64_t> tokenId(const char *field) const {
    auto ids = tokenIds(field);
    if (!ids)
      return ids.status();
    if (ids->size() > 1)
      return Status::error(file_ + ": field '" + field +
                           "' must be a single token id");
    return ids->empty() ? int64_t{-1} : ids->front();
  }

private:
  const nlohmann::json &config_;
  std::string file_;
};

} // namespace dlm::importer
