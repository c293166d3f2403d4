// dlm-run: generates text with a compiled artifact, streaming committed blocks to stdout.
//
//   dlm-run MODEL.dlm (--prompt TEXT | --prompt-ids 1,2,3 | --chat TEXT [--system TEXT])
//           [--policy low-confidence|entropy-bound] [--gen-length N] [--block-length N]
//           [--steps N] [--threshold X|none] [--step-cap N|none] [--temperature X] [--seed N]
//           [--request N]
//           [--cache none|prefix|dual] [--device cpu|cuda|cuda-emu] [--threads N]
//           entropy-bound: [--max-steps N] [--t-min X] [--t-max X] [--entropy-bound X]
//                          [--stability-threshold N] [--confidence-threshold X] [--noise
//                          mask|uniform]
//           diffusion-gemma: the entropy-bound flags but --noise, [--max-new-tokens N]
//                            [--canvas-length N]
//           [--json] [--dump-logits PATH.npy] [--decoder-input-ids 1,2,3] [--score] [--verify]
//
// --verify checks the artifact's integrity hashes (every byte) before generating.
// --chat renders the artifact's chat template (from the checkpoint) over one user message, after
// a system message when --system is given, with add_generation_prompt, and generates from it;
// control tokens in the messages are encoded as text (ChatPrompt.h).
// Knobs not given come from the artifact's decoding program. --json prints one object instead of
// streaming: prompt_ids, output_ids (prompt excluded, up to and including the first EOS, at most
// --max-new-tokens), text, finish_reason (stop: an EOS; length), generated_tokens (what the
// program generated: whole blocks for a block program), forwards, seconds and more. --dump-logits writes the first decoded forward's logits as float32
// .npy [tokens fed, vocab_size]. --decoder-input-ids starts the first canvas from these tokens
// instead of noise (to replay a reference run, e.g. transformers' DiffusionGemma). --score also reports the output's mean negative log-likelihood
// under the model, read left to right (Session::score; one forward per output token, not
// counted in the generation's figures). Generated weights (dlmc compile --random-parameters) are
// said so on stderr and in --json (random_weights, random_seed). Bad arguments: a message and exit
// status 2; a failed generation: exit status 1.
#include "runtime/model/ModelSpec.h"
#include "runtime/session/Session.h"
#include "tools/dlm-run/GenerationFlags.h"
#include "tools/dlm-run/OpenModel.h"
#include "tools/dlm-run/OutputText.h"
#include "tools/dlm-run/RandomWeights.h"
#include "tools/dlm-run/RequestLength.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <optional>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

using Json = nlohmann::json;

using dlm::tools::kBadArguments;
using dlm::tools::kFailed;

const char *kUsage =
    "usage: dlm-run MODEL.dlm (--prompt TEXT | --prompt-ids 1,2,3 | --chat TEXT [--system TEXT])\n"
    "               [--policy P]\n"
    "               [--gen-length N] [--block-length N] [--steps N] [--threshold X|none]\n"
    "               [--step-cap N|none] [--low-threshold X|none] [--depth N]\n"
    "               [--credit on|off] [--credit-alpha X] [--credit-beta X] [--credit-gamma X]\n"
    "               [--temperature X] [--seed N] [--request N] [--cache none|prefix|dual]\n"
    "               [--max-steps N] [--t-min X] [--t-max X] [--entropy-bound X]\n"
    "               [--stability-threshold N] [--confidence-threshold X] [--noise mask|uniform]\n"
    "               [--max-new-tokens N] [--canvas-length N] [--top-k N] [--top-p X]\n"
    "               [--stride N] [--verify-alpha X] [--knob NAME=VALUE]...\n"
    "               [--device cpu|cuda|cuda-emu] [--threads N] [--verify] [--json]\n"
    "               [--dump-logits PATH.npy]\n"
    "               [--decoder-input-ids 1,2,3] [--score]\n"
    "--max-new-tokens N: N new tokens, for every policy (low-confidence's and entropy-bound's\n"
    "--gen-length is rounded up to whole blocks, their --steps scaled unless given), as\n"
    "max_tokens in dlm-serve.\n"
    "--threshold X: every masked position of the block whose confidence is >= X is unmasked,\n"
    "at least one per step, until the block has no mask (Fast-dLLM, dInfer, SGLang); --steps\n"
    "does not cap it. --step-cap N (off by default) makes a block's N-th step unmask all left.\n"
    "--low-threshold X: dInfer's hierarchical decoding: each run of masks also unmasks its most\n"
    "confident position when above X (strictly; --threshold then too); --depth N > 1 also\n"
    "splits each run at its choices within the step, N levels deep (dlm's extension).\n"
    "--credit on: dInfer's credit decoding: tokens a block's steps kept predicting gain\n"
    "confidence (logits + alpha * log(1 + credit); decay beta, boost gamma; 0.7, 0.8, 0.2).\n"
    "--cache prefix: a block's later steps reuse the K/V of everything before the block;\n"
    "--cache dual (low-confidence): also of everything after it, feeding only the block.\n"
    "--knob NAME=VALUE: any knob the program declares (dlmc compile --emit=decode shows\n"
    "them), e.g. dInfer's\n"
    "vicinity refresh with --cache dual: prefix_look=16, after_look=16 (the window reaches that\n"
    "far around the block), warmup_steps=4 (the first steps are full forwards); its iteration\n"
    "smoothing (cache none or prefix): smoothing=0.3 (an artifact compiled with dlmc\n"
    "--smoothing).\n"
    "--decoder-input-ids: the first canvas's initial tokens instead of noise.\n"
    "--chat TEXT: one user message (after --system TEXT, if given) in the artifact's chat\n"
    "template, with the generation prompt; special tokens in the messages stay text.\n";

// Denoising steps per committed block (canvas): how fast the blocks converge.
double stepsPerBlock(const dlm::GenerationStats &stats) {
  return stats.blocks > 0
             ? static_cast<double>(stats.decodeSteps) / static_cast<double>(stats.blocks)
             : 0.0;
}

// The program's cache mode as the request resolved it; empty for a program without one.
std::string cacheOf(const dlm::GenerateResult &result) {
  return dlm::tools::textKnob(result.knobs, dlm::spec::kKnobCache);
}

// What --json prints of a generation (the caller adds the backend and the weights' origin).
Json jsonReport(const dlm::GenerateResult &result, const dlm::tools::OutputText &output,
                const std::vector<int64_t> &blockLengths,
                const std::optional<dlm::ScoreResult> &score) {
  const dlm::GenerationStats &stats = result.stats;
  Json out;
  out["prompt_ids"] = result.promptIds;
  out["output_ids"] = output.ids();
  out["text"] = output.text();
  out["finish_reason"] = dlm::tools::finishReasonName(output.reason());
  out["generated_tokens"] = stats.generatedTokens;
  out["forwards"] = stats.forwards;
  out["seconds"] = stats.seconds;
  out["decode_steps"] = stats.decodeSteps;
  out["blocks"] = stats.blocks;
  out["block_lengths"] = blockLengths;
  out["tokens_per_second"] = stats.tokensPerSecond();
  out["tokens_per_forward"] = stats.tokensPerForward();
  out["steps_per_block"] = stepsPerBlock(stats);
  // Per decoding step, not counting the forwards that only fill the cache (prefill, commits):
  // what transformers' DiffusionGemma reports as tokens per forward.
  out["tokens_per_step"] = stats.decodeSteps > 0 ? static_cast<double>(stats.generatedTokens) /
                                                       static_cast<double>(stats.decodeSteps)
                                                 : 0.0;
  out["policy"] = result.policy;
  const std::string cache = cacheOf(result);
  out["cache"] = cache.empty() ? Json() : Json(cache);
  if (score)
    out["output_nll"] = score->meanNll;
  return out;
}

// The summary on stderr; `kept`: the tokens --max-new-tokens kept of whole blocks, if it cut.
void printSummary(const dlm::GenerateResult &result, std::optional<size_t> kept,
                  const std::optional<dlm::ScoreResult> &score) {
  const dlm::GenerationStats &stats = result.stats;
  const std::string cache = cacheOf(result);
  std::fprintf(stderr,
               "[dlm-run] %lld tokens in %.3f s (%.1f tokens/s), %lld forwards "
               "(%.2f tokens/forward, %.1f steps/block), %s, cache %s\n",
               static_cast<long long>(stats.generatedTokens), stats.seconds,
               stats.tokensPerSecond(), static_cast<long long>(stats.forwards),
               stats.tokensPerForward(), stepsPerBlock(stats), result.policy.c_str(),
               cache.empty() ? "-" : cache.c_str());
  if (kept)
    std::fprintf(stderr, "[dlm-run] the output keeps the first %zu (--max-new-tokens)\n", *kept);
  if (score)
    std::fprintf(stderr,
                 "[dlm-run] output NLL %.3f nats/token (perplexity %.2f) over %lld tokens, "
                 "each predicted left to right with the later ones masked\n",
                 score->meanNll, std::exp(score->meanNll), static_cast<long long>(score->tokens));
}

int badArguments(const std::string &message) {
  return dlm::tools::badArguments("dlm-run", kUsage, message);
}

// float32 .npy, version 1.0, C order.
bool writeNpy(const std::string &path, const std::vector<float> &data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to a multiple of 64 and
  // ended by a newline.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const char magic[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(magic, sizeof magic);
  const uint16_t length = static_cast<uint16_t>(header.size());
  const char lengthBytes[] = {static_cast<char>(length & 0xff), static_cast<char>(length >> 8)};
  out.write(lengthBytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char *>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(float)));
  return out.good();
}

struct Options {
  // The artifact, --json and --verify.
  dlm::tools::CommonArguments common;
  dlm::GenerateRequest request;
  dlm::SessionOptions session;
  bool havePrompt = false;
  std::optional<std::string> chat;
  std::optional<std::string> system;
  bool score = false;
  std::string dumpLogits;
};

// Returns 0 when the arguments are good, else the exit status (after printing why).
int parseArguments(int argc, char **argv, Options &options) {
  auto toolFlag = [&](const std::string &flag, const std::string &value) -> std::string {
    if (flag == "--prompt" || flag == "--prompt-ids" || flag == "--chat") {
      if (options.havePrompt)
        return "give one of --prompt, --prompt-ids and --chat";
      options.havePrompt = true;
      if (flag == "--prompt")
        options.request.promptText = value;
      else if (flag == "--chat")
        options.chat = value;
      else if (!dlm::tools::parseIdList(value, options.request.promptIds))
        return "--prompt-ids must be comma-separated integers, got '" + value + "'";
    } else if (flag == "--system") {
      options.system = value;
    } else if (flag == "--decoder-input-ids") {
      if (!dlm::tools::parseIdList(value, options.request.initialCanvas))
        return "--decoder-input-ids must be comma-separated integers, got '" + value + "'";
    } else if (flag == "--dump-logits") {
      options.dumpLogits = value;
      options.request.captureFirstLogits = true;
    } else {
      return "unknown option " + flag;
    }
    return "";
  };
  dlm::tools::CommonArguments &common = options.common;
  common.toolSwitches = {"--score"};
  if (int status = dlm::tools::readCommandLine("dlm-run", kUsage, argc, argv, common,
                                               options.request, options.session, toolFlag))
    return status;
  options.score = common.switches.count("--score") > 0;
  if (!options.havePrompt)
    return badArguments("give --prompt TEXT, --prompt-ids 1,2,3 or --chat TEXT");
  if (options.system && !options.chat)
    return badArguments("--system goes with --chat");
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  if (int status = parseArguments(argc, argv, options))
    return status < 0 ? 0 : status;

  std::shared_ptr<dlm::LoadedModel> model = dlm::tools::openModel("dlm-run", options.common);
  if (!model)
    return kFailed;
  if (options.chat) {
    dlm::ChatRequest chat;
    if (options.system)
      chat.messages.push_back({{"role", "system"}, {"content", *options.system}});
    chat.messages.push_back({{"role", "user"}, {"content", *options.chat}});
    chat.addGenerationPrompt = true;
    dlm::StatusOr<std::vector<int32_t>> ids = model->encodeChat(chat);
    if (!ids) {
      std::cerr << "dlm-run: --chat: " << ids.status().message() << "\n";
      return kBadArguments;
    }
    options.request.promptIds = std::move(*ids);
  }
  // A block program generates whole blocks; the output keeps the first --max-new-tokens of them.
  const int64_t maxNewTokens =
      dlm::tools::integerKnob(options.request.knobs, dlm::spec::kKnobMaxNewTokens).value_or(-1);
  int failed = 0;
  std::unique_ptr<dlm::Session> session =
      dlm::tools::openSession("dlm-run", model, options.request, options.session, failed);
  if (!session)
    return failed;

  const dlm::LoadedModel &loaded = *model;
  dlm::tools::OutputText output(
      loaded.tokenizer(), [&loaded](int32_t id) { return loaded.tokenFacts().isEos(id); },
      maxNewTokens, {});
  // The tokens of each committed block, in order: a speculative decoder's tokens per verify.
  std::vector<int64_t> blockLengths;
  dlm::StreamCallback stream = [&](const dlm::StreamedBlock &block) {
    blockLengths.push_back(block.count);
    const int64_t before = output.completionTokens();
    const std::string text = output.push(block.ids, block.count);
    if (options.common.json)
      return;
    if (loaded.tokenizer()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      // Without a tokenizer there is no text: stream the ids instead.
      for (int64_t i = before; i < output.completionTokens(); ++i)
        std::printf("%s%d", i == 0 ? "" : " ", output.ids()[static_cast<size_t>(i)]);
    }
    std::fflush(stdout);
  };
  dlm::StatusOr<dlm::GenerateResult> result = session->generate(options.request, stream);
  if (!result) {
    if (!options.common.json)
      std::fputc('\n', stdout);
    std::cerr << "dlm-run: " << result.status().message() << "\n";
    // Request errors (bad knobs, prompt too long) are argument errors to the user.
    return kBadArguments;
  }

  // The rest of the text (a character cut short or a tail held back), and the output as kept.
  const std::string tail = output.finish();
  if (!options.common.json)
    std::fwrite(tail.data(), 1, tail.size(), stdout);
  const std::vector<int32_t> &outputIds = output.ids();
  // A block program generates whole blocks: what --max-new-tokens left out of the output.
  const bool cut = static_cast<int64_t>(outputIds.size()) < result->stats.generatedTokens;

  if (!options.dumpLogits.empty() && !writeNpy(options.dumpLogits, result->firstLogits,
                                               result->firstLogitRows, result->vocabSize)) {
    std::cerr << "dlm-run: cannot write " << options.dumpLogits << "\n";
    return kFailed;
  }

  // The output's likelihood under the model, after the generation so its forwards are not counted.
  std::optional<dlm::ScoreResult> score;
  if (options.score && !outputIds.empty()) {
    dlm::StatusOr<dlm::ScoreResult> scored = session->score(result->promptIds, outputIds);
    if (!scored) {
      std::cerr << "dlm-run: --score: " << scored.status().message() << "\n";
      return kFailed;
    }
    score = *scored;
  }

  if (options.common.json) {
    Json out = jsonReport(*result, output, blockLengths, score);
    out["backend"] = std::string(session->backend().name());
    dlm::tools::addRandomWeights(out, *model);
    // Invalid UTF-8 in generated text must not abort the dump.
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  } else {
    std::fputc('\n', stdout);
    printSummary(*result, cut ? std::optional<size_t>(outputIds.size()) : std::nullopt, score);
  }
  return 0;
}
