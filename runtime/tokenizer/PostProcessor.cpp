#include "runtime/tokenizer/PostProcessor.h"
#include "support/JsonText.h"

#include "runtime/tokenizer/SequenceDepth.h"

#include <nlohmann/json.hpp>

#include <cstdint>

namespace dlm::tokenizer {
namespace {

using Json = nlohmann::json;


// A template piece names either the sequence ("A") or a special token listed in
// "special_tokens", whose ids it stands for.
Status templateIds(const Json &config, std::vector<int32_t> &prefix, std::vector<int32_t> &suffix) {
  const auto single = config.find("single");
  if (single == config.end() || !single->is_array())
    return Status::error("post_processor TemplateProcessing has no \"single\" template");
  const Json specials = config.contains("special_tokens") ? config["special_tokens"] : Json();
  bool sequenceSeen = false;
  for (const Json &piece : *single) {
    if (piece.contains("Sequence")) {
      if (sequenceSeen)
        return Status::error("post_processor TemplateProcessing: \"single\" names the sequence "
                             "twice");
      sequenceSeen = true;
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id") ||
        !piece["SpecialToken"]["id"].is_string())
      return Status::error("post_processor TemplateProcessing: bad template piece " +
                           jsonExcerpt(piece));
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (!specials.is_object() || !specials.contains(name) || !specials[name].contains("ids") ||
        !specials[name]["ids"].is_array())
      return Status::error("post_processor TemplateProcessing: special token '" + name +
                           "' is not in \"special_tokens\"");
    for (const Json &id : specials[name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        return Status::error("post_processor TemplateProcessing: special token '" + name +
                             "' has invalid id " + jsonExcerpt(id));
      (sequenceSeen ? suffix : prefix).push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (!sequenceSeen)
    return Status::error("post_processor TemplateProcessing: \"single\" does not contain the "
                         "sequence");
  return Status::ok();
}

// RobertaProcessing and BertProcessing store "cls" and "sep" as [token, id].
StatusOr<int32_t> pairId(const Json &config, const char *key, const std::string &type) {
  const auto it = config.find(key);
  if (it == config.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer())
    return Status::error("post_processor " + type + " has no [token, id] \"" + key + "\"");
  return static_cast<int32_t>((*it)[1].get<int64_t>());
}

} // namespace

Status PostProcessor::append(const Json &config, int depth) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    return Status::error("post_processor has no \"type\"");
  const std::string type = config["type"].get<std::string>();
  if (type == "ByteLevel")
    return Status::ok(); // only trims offsets, which we do not report
  if (type == "Sequence") {
    if (!config.contains("processors") || !config["processors"].is_array())
      return Status::error("post_processor Sequence has no \"processors\" list");
    DLM_RETURN_IF_ERROR(checkSequenceDepth("post_processor", depth));
    for (const Json &inner : config["processors"])
      DLM_RETURN_IF_ERROR(append(inner, depth + 1));
    return Status::ok();
  }
  std::vector<int32_t> prefix, suffix;
  if (type == "TemplateProcessing") {
    DLM_RETURN_IF_ERROR(templateIds(config, prefix, suffix));
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    StatusOr<int32_t> cls = pairId(config, "cls", type);
    if (!cls)
      return cls.status();
    StatusOr<int32_t> sep = pairId(config, "sep", type);
    if (!sep)
      return sep.status();
    prefix.push_back(*cls);
    suffix.push_back(*sep);
  } else {
    return Status::error("not supported yet: post_processor " + type);
  }
  // Processors in a Sequence wrap what the previous ones produced.
  prefix_.insert(prefix_.begin(), prefix.begin(), prefix.end());
  suffix_.insert(suffix_.end(), suffix.begin(), suffix.end());
  return Status::ok();
}

StatusOr<PostProcessor> PostProcessor::fromJson(const Json &config) {
  PostProcessor processor;
  if (!config.is_null())
    DLM_RETURN_IF_ERROR(processor.append(config, 0));
  return processor;
}

std::vector<int32_t> PostProcessor::apply(std::vector<int32_t> ids) const {
  if (prefix_.empty() && suffix_.empty())
    return ids;
  std::vector<int32_t> out;
  out.reserve(prefix_.size() + ids.size() + suffix_.size());
  out.insert(out.end(), prefix_.begin(), prefix_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

} // namespace dlm::tokenizer
