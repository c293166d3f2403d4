#include "runtime/tokenizer/Normalizer.h"

#include <nlohmann/json.hpp>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

namespace dlm::tokenizer {

Status Normalizer::add(const nlohmann::json &config) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    return Status::error("normalizer has no \"type\"");
  const std::string type = config["type"].get<std::string>();
  if (type == "Sequence") {
    if (!config.contains("normalizers") || !config["normalizers"].is_array())
      return Status::error("normalizer Sequence has no \"normalizers\" list");
    for (const nlohmann::json &inner : config["normalizers"])
      DLM_RETURN_IF_ERROR(add(inner));
    return Status::ok();
  }
  if (type != "NFC")
    return Status::error("not supported yet: normalizer " + type);
  UErrorCode status = U_ZERO_ERROR;
  if (!icu::Normalizer2::getNFCInstance(status) || U_FAILURE(status))
    return Status::error(std::string("ICU has no NFC data: ") + u_errorName(status));
  nfc_ = true; // NFC is idempotent, so several in a row are one
  return Status::ok();
}

StatusOr<Normalizer> Normalizer::fromJson(const nlohmann::json &config) {
  Normalizer normalizer;
  if (!config.is_null())
    DLM_RETURN_IF_ERROR(normalizer.add(config));
  return normalizer;
}

std::string Normalizer::apply(std::string_view text) const {
  if (!nfc_)
    return std::string(text);
  UErrorCode status = U_ZERO_ERROR;
  // ICU owns the instance and keeps it for the life of the process; loading checked it exists.
  const icu::Normalizer2 *nfc = icu::Normalizer2::getNFCInstance(status);
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  // Most text is already in NFC; checking is much cheaper than rewriting.
  if (U_FAILURE(status) || (nfc->isNormalizedUTF8(piece, status) && U_SUCCESS(status)))
    return std::string(text);
  status = U_ZERO_ERROR;
  std::string normalized;
  icu::StringByteSink<std::string> sink(&normalized, static_cast<int32_t>(text.size()));
  nfc->normalizeUTF8(0, piece, sink, nullptr, status);
  // The input is valid UTF-8, so ICU fails only when out of memory; keep the text as it is then.
  return U_SUCCESS(status) ? normalized : std::string(text);
}

} // namespace dlm::tokenizer
