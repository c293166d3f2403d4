#include "runtime/tokenizer/Normalizer.h"

#include "runtime/tokenizer/SequenceDepth.h"
#include "runtime/tokenizer/Utf8.h"

#include <nlohmann/json.hpp>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

namespace dlm::tokenizer {
namespace {


// ICU owns the instance and keeps it for the life of the process; loading checked it exists.
const icu::Normalizer2 *nfcInstance() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2 *nfc = icu::Normalizer2::getNFCInstance(status);
  return U_SUCCESS(status) ? nfc : nullptr;
}

std::string toNfc(const icu::Normalizer2 &nfc, std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  std::string normalized;
  icu::StringByteSink<std::string> sink(&normalized, static_cast<int32_t>(text.size()));
  nfc.normalizeUTF8(0, piece, sink, nullptr, status);
  // The input is valid UTF-8, so ICU fails only when out of memory; keep the text as it is then.
  return U_SUCCESS(status) ? normalized : std::string(text);
}

// NFC of `text`, and the new length of its start-aligned prefix. Hugging Face aligns a composed
// character with the first character it came from; this follows it at the granularity of NFC
// segments (the aligned prefix is extended to the next segment boundary), which differs only
// when uncomposable combining marks follow a prefix that a normalizer prepended to.
std::string applyNfc(std::string_view text, size_t *startAligned) {
  const icu::Normalizer2 *nfc = nfcInstance();
  if (!nfc)
    return std::string(text);
  UErrorCode status = U_ZERO_ERROR;
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  // Most text is already in NFC; checking is much cheaper than rewriting.
  if (nfc->isNormalizedUTF8(piece, status) && U_SUCCESS(status))
    return std::string(text);
  if (startAligned && *startAligned > 0) {
    size_t boundary = *startAligned;
    while (boundary < text.size()) {
      size_t next = boundary;
      if (nfc->hasBoundaryBefore(static_cast<UChar32>(decodeUtf8(text, next))))
        break;
      boundary = next;
    }
    *startAligned = toNfc(*nfc, text.substr(0, boundary)).size();
  }
  return toNfc(*nfc, text);
}

} // namespace

Status Normalizer::add(const nlohmann::json &config, int depth) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    return Status::error("normalizer has no \"type\"");
  const std::string type = config["type"].get<std::string>();
  if (type == "Sequence") {
    if (!config.contains("normalizers") || !config["normalizers"].is_array())
      return Status::error("normalizer Sequence has no \"normalizers\" list");
    DLM_RETURN_IF_ERROR(checkSequenceDepth("normalizer", depth));
    for (const nlohmann::json &inner : config["normalizers"])
      DLM_RETURN_IF_ERROR(add(inner, depth + 1));
    return Status::ok();
  }
  Step step;
  if (type == "NFC") {
    UErrorCode status = U_ZERO_ERROR;
    if (!icu::Normalizer2::getNFCInstance(status) || U_FAILURE(status))
      return Status::error(std::string("ICU has no NFC data: ") + u_errorName(status));
    // NFC is idempotent, so several in a row are one.
    if (steps_.empty() || steps_.back().kind != Step::Kind::Nfc)
      steps_.push_back(std::move(step));
    return Status::ok();
  }
  if (type == "Replace") {
    StatusOr<Replace> replace = Replace::fromJson(config, "normalizer");
    if (!replace)
      return replace.status();
    step.kind = Step::Kind::Replace;
    step.replace = std::move(*replace);
    steps_.push_back(std::move(step));
    return Status::ok();
  }
  if (type == "Prepend") {
    const auto prepend = config.find("prepend");
    if (prepend == config.end() || !prepend->is_string())
      return Status::error("normalizer Prepend has no \"prepend\" string");
    step.kind = Step::Kind::Prepend;
    step.prepend = prepend->get<std::string>();
    if (!step.prepend.empty())
      steps_.push_back(std::move(step));
    return Status::ok();
  }
  return Status::error("not supported yet: normalizer " + type);
}

StatusOr<Normalizer> Normalizer::fromJson(const nlohmann::json &config) {
  Normalizer normalizer;
  if (!config.is_null())
    DLM_RETURN_IF_ERROR(normalizer.add(config, 0));
  double growth = 1;
  size_t added = 0;
  for (const Step &step : normalizer.steps_) {
    if (step.replace)
      growth *= step.replace->growth();
    added += step.prepend.size();
  }
  DLM_RETURN_IF_ERROR(checkTextGrowth("normalizer", growth, added, normalizer.steps_.size()));
  return normalizer;
}

std::string Normalizer::apply(std::string_view text, size_t *startAligned) const {
  if (startAligned)
    *startAligned = text.empty() ? 0 : utf8CharLength(text, 0);
  std::string current(text);
  for (const Step &step : steps_) {
    switch (step.kind) {
    case Step::Kind::Nfc:
      current = applyNfc(current, startAligned);
      break;
    case Step::Kind::Replace:
      current = step.replace->apply(current, startAligned);
      break;
    case Step::Kind::Prepend:
      // Hugging Face prepends only to non-empty text; the prepended characters take the
      // alignment of the first character.
      if (current.empty())
        break;
      current.insert(0, step.prepend);
      if (startAligned && *startAligned > 0)
        *startAligned += step.prepend.size();
      break;
    }
  }
  return current;
}

} // namespace dlm::tokenizer
