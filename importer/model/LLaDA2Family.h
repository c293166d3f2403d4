// LLaDA2.x checkpoints (LLaDA2MoeModelLM, model_type llada2_moe) as published: config.json's
// fields as SGLang 0.5.23's llada2 model reads them, the fused query_key_value, the dense first
// layers then routed experts with a shared expert (tests/reference/llada2/README.md).
#pragma once

#include "importer/model/ModelFamily.h"

namespace dlm::importer {

StatusOr<ModelDescription> describeLLaDA2(const nlohmann::json &config,
                                          const std::string &architecture);

} // namespace dlm::importer
