#include "importer/model/ChatTemplateConfig.h"

#include "support/JsonText.h"
#include "support/TextFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

namespace dlm::importer {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

StatusOr<Json> readJsonFile(const fs::path &path, const std::string &name) {
  auto text = readTextFile(path);
  if (!text)
    return text.status();
  return parseJsonText<Json>(*text, name);
}

// A special token as transformers stores it: a string, or an AddedToken's fields.
StatusOr<std::optional<std::string>> tokenText(const Json &value, const std::string &where) {
  if (value.is_null())
    return std::optional<std::string>();
  if (value.is_string())
    return std::optional<std::string>(value.get<std::string>());
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return std::optional<std::string>(value["content"].get<std::string>());
  return Status::error(where + " is neither a string nor an object with a \"content\" string");
}

const char *const kNamedSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token"};

// The named special tokens of a tokenizer_config.json / special_tokens_map.json object.
Status readSpecialTokens(const Json &config, const std::string &file,
                         artifact::Attributes &tokens) {
  auto take = [&](const std::string &name, const Json &value) -> Status {
    DLM_ASSIGN_OR_RETURN(std::optional<std::string> text,
                         tokenText(value, file + ": \"" + name + "\""));
    if (text)
      tokens[name] = *text;
    else
      tokens.erase(name);
    return Status::ok();
  };
  for (const char *name : kNamedSpecialTokens)
    if (config.contains(name))
      DLM_RETURN_IF_ERROR(take(name, config[name]));
  // A dict of extra special tokens (model_specific_special_tokens, e.g. image_token) joins the
  // named ones; a list does not.
  if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object())
    for (auto it = config["extra_special_tokens"].begin();
         it != config["extra_special_tokens"].end(); ++it)
      DLM_RETURN_IF_ERROR(take(it.key(), it.value()));
  return Status::ok();
}

} // namespace

StatusOr<CheckpointChat> readCheckpointChat(const std::string &directory) {
  const fs::path dir(directory);
  std::error_code ec;
  CheckpointChat chat;

  Json config = Json::object();
  if (fs::exists(dir / "tokenizer_config.json", ec)) {
    DLM_ASSIGN_OR_RETURN(config, readJsonFile(dir / "tokenizer_config.json",
                                              "tokenizer_config.json"));
    if (!config.is_object())
      return Status::error("tokenizer_config.json is not a JSON object");
  }
  DLM_RETURN_IF_ERROR(readSpecialTokens(config, "tokenizer_config.json", chat.specialTokens));
  if (!config.contains("added_tokens_decoder") && fs::exists(dir / "special_tokens_map.json", ec)) {
    DLM_ASSIGN_OR_RETURN(Json map, readJsonFile(dir / "special_tokens_map.json",
                                                "special_tokens_map.json"));
    if (map.is_object())
      DLM_RETURN_IF_ERROR(readSpecialTokens(map, "special_tokens_map.json", chat.specialTokens));
  }

  // Template files win over the config's entry.
  std::map<std::string, std::string> named;
  bool fromFiles = false;
  if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    DLM_ASSIGN_OR_RETURN(named["default"], readTextFile(dir / "chat_template.jinja"));
    fromFiles = true;
  }
  if (fs::is_directory(dir / "chat_templates", ec)) {
    for (const fs::directory_entry &entry : fs::directory_iterator(dir / "chat_templates", ec)) {
      const fs::path &path = entry.path();
      if (path.extension() != ".jinja" || !entry.is_regular_file(ec))
        continue;
      // transformers reads chat_template.jinja after these, so it is the default.
      std::string name = path.stem().string();
      if (named.count(name))
        continue;
      DLM_ASSIGN_OR_RETURN(named[name], readTextFile(path));
      fromFiles = true;
    }
  }
  if (fromFiles) {
    if (named.count("default")) {
      chat.chatTemplate = named["default"];
      chat.templateFile = "chat_template.jinja";
    }
    return chat;
  }
  if (!config.contains("chat_template") || config["chat_template"].is_null())
    return chat;
  const Json &entry = config["chat_template"];
  if (entry.is_string()) {
    chat.chatTemplate = entry.get<std::string>();
  } else if (entry.is_array()) {
    for (size_t i = 0; i < entry.size(); ++i) {
      const Json &item = entry[i];
      if (!item.is_object() || !item.contains("name") || !item["name"].is_string() ||
          !item.contains("template") || !item["template"].is_string())
        return Status::error("tokenizer_config.json: chat_template[" + std::to_string(i) +
                             "] is not an object with \"name\" and \"template\" strings");
      // A later entry of the same name replaces an earlier one, as building the dict does.
      if (item["name"].get<std::string>() == "default")
        chat.chatTemplate = item["template"].get<std::string>();
    }
  } else {
    return Status::error("tokenizer_config.json: chat_template is neither a string nor a list "
                         "of {name, template}");
  }
  if (chat.chatTemplate)
    chat.templateFile = "tokenizer_config.json";
  return chat;
}

} // namespace dlm::importer
