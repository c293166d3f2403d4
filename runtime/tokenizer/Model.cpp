#include "runtime/tokenizer/Model.h"

#include "runtime/tokenizer/BpeModel.h"
#include "runtime/tokenizer/WordLevelModel.h"

#include <nlohmann/json.hpp>

namespace dlm::tokenizer {

StatusOr<std::unique_ptr<Model>> Model::fromJson(const nlohmann::json &config) {
  if (config.is_object()) {
    const auto type = config.find("type");
    if (type != config.end() && type->is_string() && type->get<std::string>() == "WordLevel") {
      StatusOr<WordLevelModel> model = WordLevelModel::fromJson(config);
      if (!model)
        return model.status();
      return std::unique_ptr<Model>(std::make_unique<WordLevelModel>(std::move(*model)));
    }
  }
  // BPE, or the error naming what the model is instead.
  StatusOr<BpeModel> model = BpeModel::fromJson(config);
  if (!model)
    return model.status();
  return std::unique_ptr<Model>(std::make_unique<BpeModel>(std::move(*model)));
}

} // namespace dlm::tokenizer
