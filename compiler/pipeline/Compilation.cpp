#include "compiler/pipeline/Compilation.h"

#include "compiler/dialects/dlm/DlmDialect.h"
#include "compiler/pipeline/CompilePipeline.h"
#include "compiler/pipeline/KernelRecords.h"
#include "compiler/pipeline/WeightPrecision.h"
#include "compiler/programs/DecodePrograms.h"
#include "compiler/programs/DecodingProgram.h"
#include "importer/ir/ForwardBuilder.h"
#include "runtime/chat/ChatTemplate.h"
#include "runtime/model/ModelSpec.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/program/DecodeProgramSet.h"
#include "runtime/program/ModelFactChecks.h"
#include "runtime/program/ProgramKnobs.h"

#ifdef DLM_HAVE_NVRTC
#include "compiler/codegen/KernelCompilation.h"
#include "compiler/codegen/ModelKernels.h"
#endif

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace dlm::pipeline {
namespace {

mlir::Type elementType(mlir::MLIRContext &context, artifact::DType dtype) {
  mlir::Builder b(&context);
  switch (dtype) {
  case artifact::DType::bf16:
    return b.getBF16Type();
  case artifact::DType::f16:
    return b.getF16Type();
  default: // f32, and FP8 E4M3 (with row scales), which every backend widens where it reads it
    return b.getF32Type();
  }
}

// Every --knob must name a knob one of the artifact's programs declares.
Status checkKnobsDeclared(const CompileOptions &options,
                          const std::vector<artifact::DecodingProgram> &programs) {
  for (const auto &knob : options.knobs) {
    const std::string &name = knob.first;
    const bool declared = std::any_of(programs.begin(), programs.end(), [&](const auto &p) {
      return p.knobs.count(name) != 0;
    });
    if (!declared)
      return Status::error("--knob " + name + ": no decode program of the artifact declares a "
                           "knob '" + name + "'");
  }
  return Status::ok();
}

// A program whose checks of the model's own facts fail would refuse every request on it
// (block-refinement on a model that is not block-causal, low-confidence on one that is): the
// policy is refused now, in the program's words.
Status checkProgramFitsModel(const artifact::DecodingProgram &built,
                             const sampling::TokenFacts &facts,
                             const artifact::ModelConfig &config) {
  StatusOr<program::DecodeProgram> loaded = program::DecodeProgram::load(built.ops, built.knobs);
  if (!loaded)
    return loaded.status();
  Status fits = program::checkModelFacts(*loaded, facts, config.vocabSize);
  if (!fits.isOk())
    return Status::error("--policy " + built.policy + " for " + config.architecture + ": " +
                         fits.message());
  return Status::ok();
}

// The decode programs of `policies`, each storing the knobs dlmc's flags set that it declares,
// over the defaults the checkpoint states (`modelKnobs`, generation_config.json).
Status addDecodePrograms(const CompileOptions &options, const std::vector<std::string> &policies,
                         const artifact::Attributes &modelKnobs,
                         artifact::ArtifactContents &contents) {
  artifact::Attributes knobs = modelKnobs;
  knobs[std::string(spec::kKnobGenLength)] = options.genLength;
  knobs[std::string(spec::kKnobBlockLength)] = options.blockLength;
  knobs[std::string(spec::kKnobSteps)] = options.steps;
  knobs[std::string(spec::kKnobTemperature)] = options.temperature;
  if (options.threshold > 0.0)
    knobs[std::string(spec::kKnobThreshold)] = options.threshold;
  if (options.stepCap > 0)
    knobs[std::string(spec::kKnobStepCap)] = options.stepCap;
  for (const auto &[name, value] : options.knobs)
    knobs[name] = program::knobValueFromText(value);
  DLM_ASSIGN_OR_RETURN(sampling::TokenFacts facts, program::modelTokenFacts(contents.config));
  for (const std::string &name : policies) {
    DLM_ASSIGN_OR_RETURN(artifact::DecodingProgram program,
                         programs::buildDecodeProgram(name, knobs, options.unroll));
    DLM_RETURN_IF_ERROR(checkProgramFitsModel(program, facts, contents.config));
    contents.decodePrograms.push_back(std::move(program));
  }
  return checkKnobsDeclared(options, contents.decodePrograms);
}

} // namespace

std::string defaultPolicies(const importer::ModelDescription &model) {
  if (model.blockDiffusion)
    return "diffusion-gemma";
  if (!model.defaultPolicies.empty())
    return model.defaultPolicies;
  // A causal model without a mask token (a plain Qwen3 or Llama checkpoint) has no diffusion
  // policy to run: it decodes left to right.
  if (model.config.attentionMask == artifact::AttentionMaskKind::causal &&
      model.config.maskTokenId < 0)
    return "autoregressive";
  return "low-confidence,entropy-bound";
}

std::vector<std::string> policyList(const CompileOptions &options) {
  std::vector<std::string> policies;
  if (options.policy.empty())
    return policies;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(options.policy).split(parts, ',');
  for (llvm::StringRef part : parts)
    policies.push_back(part.trim().str());
  return policies;
}

Status validateOptions(const CompileOptions &options) {
  auto fail = [](const std::string &message) { return Status::error(message); };
  if (options.target != "cpu" && options.target != "cuda" && options.target != "all")
    return fail("unknown --target " + options.target + " (expected cpu, cuda or all)");
#ifndef DLM_HAVE_NVRTC
  if (options.target != "cpu")
    return fail("not supported yet: --target " + options.target +
                " (dlmc was built without the CUDA toolkit's NVRTC)");
#endif
  const std::vector<std::string> known = programs::decodeProgramPolicies();
  const std::vector<std::string> policies = policyList(options);
  for (size_t i = 0; i < policies.size(); ++i) {
    if (std::find(known.begin(), known.end(), policies[i]) == known.end())
      return fail("unknown policy '" + policies[i] + "' (expected " + program::oneOf(known) +
                  ")");
    if (std::find(policies.begin(), policies.begin() + i, policies[i]) != policies.begin() + i)
      return fail("--policy names " + policies[i] + " twice");
  }
  if (options.genLength <= 0 || options.blockLength <= 0 || options.steps <= 0)
    return fail("--gen-length, --block-length and --steps must be positive");
  if (options.unroll < 1)
    return fail("--unroll must be at least 1");
  if (options.threshold < 0.0 || options.threshold > 1.0)
    return fail("--threshold must be in [0, 1]");
  if (options.stepCap < 0)
    return fail("--step-cap must be at least 1 (0: none)");
  if (options.stepCap > 0 && options.threshold <= 0.0)
    return fail("--step-cap caps a threshold block: give it with --threshold");
  if (options.temperature < 0.0)
    return fail("--temperature must be >= 0");
  for (const auto &[name, value] : options.knobs)
    if (name.empty())
      return fail("--knob " + value + ": expected name=value");
  if (!options.activations.empty() && options.activations != "f32" && options.activations != "bf16")
    return fail("unknown --activations " + options.activations + " (expected f32 or bf16)");
  if (!options.weights.empty() && options.weights != "f32" && options.weights != "bf16" &&
      options.weights != "int8" && options.weights != "fp8" && options.weights != "int4")
    return fail("unknown --weights " + options.weights +
                " (expected f32, bf16, int8, fp8 or int4)");
  if (options.quantizeEmbeddings && options.weights.empty())
    return fail("--quantize-embeddings stores the embeddings at --weights' precision: give it");
  if (options.weightGroupSize < 2 || options.weightGroupSize % 2 != 0)
    return fail("--weight-group-size " + std::to_string(options.weightGroupSize) +
                ": expected an even number of inputs, at least 2");
  return Status::ok();
}

// The programs that spread --steps over the blocks of --gen-length (low-confidence,
// entropy-bound) need whole blocks and as many steps in each; the others ignore the three.
static Status checkBlockGeometry(const CompileOptions &options,
                                 const std::vector<std::string> &policies) {
  if (std::none_of(policies.begin(), policies.end(),
                   [](const std::string &policy) { return programs::hasGenerateFunction(policy); }))
    return Status::ok();
  if (options.genLength % options.blockLength != 0)
    return Status::error("--gen-length " + std::to_string(options.genLength) +
                         " is not a multiple of --block-length " +
                         std::to_string(options.blockLength));
  const int64_t blocks = options.genLength / options.blockLength;
  if (options.steps % blocks != 0)
    return Status::error("--steps " + std::to_string(options.steps) + " is not divisible by the " +
                         std::to_string(blocks) + " blocks");
  return Status::ok();
}

mlir::OwningOpRef<mlir::ModuleOp> importForward(mlir::MLIRContext &context,
                                                const importer::ImportedCheckpoint &checkpoint,
                                                bool smoothing) {
  std::vector<mlir::Type> types;
  for (const safetensors::TensorView *view : checkpoint.views)
    types.push_back(elementType(context, *importer::weightDType(*view)));
  mlir::OwningOpRef<mlir::ModuleOp> module =
      importer::buildForwardModule(context, checkpoint.model, types, smoothing);
  mlir::PassManager pm(&context);
  pm.addPass(mlir::createCanonicalizerPass());
  if (failed(mlir::verify(*module)) || failed(pm.run(*module)))
    return nullptr;
  return module;
}

Status Compilation::checkSmoothing(const CompileOptions &options) const {
  if (!options.smoothing)
    return Status::ok();
  if (module_)
    return Status::error("not supported yet: --smoothing with an ONNX model");
  if (!options.draft.empty())
    return Status::error("--smoothing does not combine with --draft (iteration smoothing is a "
                         "low-confidence technique)");
  if (checkpoint_->model.blockDiffusion)
    return Status::error("--smoothing: " + checkpoint_->model.config.architecture +
                         " has forward functions of its own; iteration smoothing is for "
                         "low-confidence models");
  if (checkpoint_->model.config.maskTokenId < 0)
    return Status::error("--smoothing needs a mask token; the model has none");
  return Status::ok();
}

// A block-causal model (LLaDA2, SDAR) attends by the blocks it decodes: --block-length. A block
// size config.json states is the one the model was trained with: without --block-length it is
// taken, another is refused.
static Status setAttentionBlock(CompileOptions &options, importer::ModelDescription &model) {
  if (model.config.attentionMask != artifact::AttentionMaskKind::block_causal)
    return Status::ok();
  const int64_t stated = model.traits.statedBlockSize;
  if (stated > 0 && options.blockLengthFromCheckpoint)
    options.blockLength = stated;
  if (stated > 0 && stated != options.blockLength)
    return Status::error("--block-length " + std::to_string(options.blockLength) +
                         ": config.json says block_size " + std::to_string(stated) +
                         ", the block " + model.config.architecture +
                         " attends by; compile with --block-length " + std::to_string(stated));
  model.traits.attentionBlock = options.blockLength;
  return Status::ok();
}

Compilation::Compilation() = default;
Compilation::~Compilation() = default;

StatusOr<std::unique_ptr<Compilation>> Compilation::run(const CompileOptions &options) {
  DLM_RETURN_IF_ERROR(validateOptions(options));
  std::unique_ptr<Compilation> compilation(new Compilation());
  DLM_RETURN_IF_ERROR(compilation->compile(options));
  return compilation;
}

Status Compilation::compile(const CompileOptions &given) {
  StatusOr<importer::ImportedCheckpoint> imported =
      importer::onnx::isOnnxModelPath(given.checkpoint)
          ? onnx_.import(context_, given.checkpoint)
          : importer::importCheckpoint(given.checkpoint);
  if (!imported)
    return imported.status();
  checkpoint_ = std::make_unique<importer::ImportedCheckpoint>(std::move(*imported));
  // The chat template is parsed here so that a construct the runtime cannot render fails the
  // compile, named with the file it came from, instead of the first chat request.
  if (const std::optional<std::string> &chatTemplate = checkpoint_->chat.chatTemplate) {
    StatusOr<ChatTemplate> parsed = ChatTemplate::parse(*chatTemplate);
    if (!parsed)
      return parsed.status()
          .withContext(checkpoint_->chat.templateFile)
          .withContext("checkpoint '" + checkpoint_->directory + "'");
  }
  module_ = onnx_.takeModule();
  CompileOptions options = given;
  DLM_RETURN_IF_ERROR(setAttentionBlock(options, checkpoint_->model));
  DLM_RETURN_IF_ERROR(checkSmoothing(options));
  if (!options.draft.empty())
    DLM_RETURN_IF_ERROR(importDraft(options));
  if (!module_)
    module_ = importForward(context_, *checkpoint_, options.smoothing);
  if (!module_)
    return Status::error("internal error: the imported IR of '" + checkpoint_->directory +
                         "' does not verify");
  DLM_RETURN_IF_ERROR(resolvePolicies(options));
  DLM_RETURN_IF_ERROR(checkBlockGeometry(options, policies_));
  const std::vector<std::string> &policies = policies_;
  programs::DecodingPolicy policy;
  policy.name = policies.front();
  policy.genLength = options.genLength;
  policy.blockLength = options.blockLength;
  policy.steps = options.steps;
  policy.threshold = options.threshold;
  policy.stepCap = options.stepCap;
  // @generate documents the default diffusion program over @forward; a model of several forward
  // functions (DiffusionGemma), decoded left to right or by its attention blocks has only its
  // decode program (compiler/programs/policies/).
  if (!checkpoint_->model.blockDiffusion && programs::hasGenerateFunction(policy.name) &&
      (failed(programs::buildGenerateFunction(*module_, policy)) || failed(mlir::verify(*module_))))
    return Status::error("could not build the decoding program");
  // The program names weights as the artifact stores them.
  std::map<std::string, std::string> canonicalNames;
  for (const importer::WeightBinding &binding : checkpoint_->model.weights)
    canonicalNames.emplace(binding.checkpointName, binding.canonicalName);
  renameWeightsToCanonical(*module_, canonicalNames);
  mlir::PassManager pm(&context_);
  buildCompilePipeline(pm, PipelineOptions{options.unroll});
  if (failed(pm.run(*module_)))
    return Status::error("the compile pipeline failed (errors above)");

  llvm::raw_string_ostream programStream(programText_);
  module_->print(programStream);
  const importer::ModelDescription &model = checkpoint_->model;
  artifact::ArtifactContents &contents = contents_;
  contents.producer = "dlmc 0.1";
  contents.config = model.config;
  contents.config.extra["family"] = model.family;
  contents.config.extra["qkv_bias"] = model.traits.qkvBias;
  contents.config.extra["qk_norm"] = model.traits.qkNorm;
  contents.config.extra[std::string(spec::kExtraLogitShift)] = model.traits.logitShift;
  if (model.traits.attentionBlock > 0)
    contents.config.extra[std::string(spec::kExtraAttentionBlock)] = model.traits.attentionBlock;
  contents.config.extra[std::string(spec::kExtraRopeStyle)] = std::string(spec::kRopeStyleNeox);
  contents.tokenizerJson = checkpoint_->tokenizerJson;
  if (checkpoint_->chat.chatTemplate)
    contents.chatTemplate = std::string_view(*checkpoint_->chat.chatTemplate);
  contents.chatSpecialTokens = checkpoint_->chat.specialTokens;
  contents.program.policy = policies.front();
  contents.program.mlir = programText_;
  setProgramKnobs(options, policy);
  DLM_RETURN_IF_ERROR(addDecodePrograms(options, policies, model.knobDefaults, contents));
  for (size_t i = 0; i < model.weights.size(); ++i) {
    const safetensors::TensorView &view = *checkpoint_->views[i];
    contents.weights.push_back({model.weights[i].canonicalName, *importer::weightDType(view),
                                view.shape, view.data, view.byteSize});
  }
  // An FP8 weight's row scales beside it, as the runtime reads them (ModelWeights.h).
  for (const auto &[name, scales] : checkpoint_->rowScales)
    contents.weights.push_back({name + std::string(model::kRowScaleSuffix),
                                artifact::DType::f32,
                                {static_cast<int64_t>(scales.size())},
                                scales.data(),
                                scales.size() * sizeof(float)});
  // Every backend executes these records; with --target cuda|all each names the CUDA kernel it
  // launches.
  DLM_ASSIGN_OR_RETURN(artifact::KernelTarget program, kernelProgramTarget(*module_));
  DLM_ASSIGN_OR_RETURN(
      WeightPrecisionReport weights,
      convertWeightPrecision(program,
                             {options.weights, options.weightGroupSize, options.quantizeEmbeddings},
                             contents.weights, convertedWeights_));
  weightReport_ = describe(weights);
  if (options.activations == "bf16") {
    contents.config.extra[std::string(spec::kExtraCpuActivations)] = std::string("bf16");
    weightReport_ += "; cpu activations: bf16 where the CPU has bf16 arithmetic";
  }
  if (options.target != "cpu")
    DLM_RETURN_IF_ERROR(generateCudaKernels(options, program));
  contents.kernelTargets.insert(contents.kernelTargets.begin(), std::move(program));
  return Status::ok();
}

// --draft: the drafter is read for the target, its weights join the target's (their IR names
// prefixed so that no checkpoint name of the target can meet them) and the module gets both
// forward functions (docs/design/speculative-decoding.md §2).
Status Compilation::importDraft(const CompileOptions &options) {
  importer::ModelDescription &target = checkpoint_->model;
  if (module_)
    return Status::error("not supported yet: --draft beside an ONNX target");
  if (target.blockDiffusion ||
      target.config.attentionMask != artifact::AttentionMaskKind::causal)
    return Status::error("not supported yet: --draft for " + target.config.architecture +
                         ", whose attention is not causal");
  StatusOr<importer::ImportedDraft> imported = importer::importDFlashDraft(options.draft, target);
  if (!imported)
    return imported.status();
  draft_ = std::make_unique<importer::ImportedDraft>(std::move(*imported));
  const importer::DraftDescription &draft = draft_->draft;
  if (draft.outputMultiplier != 1.0)
    return Status::error("not supported yet: a DFlash drafter with output_multiplier " +
                         std::to_string(draft.outputMultiplier));
  for (const importer::DraftLayer &layer : draft.layers)
    if (!layer.causal && layer.window > 0)
      return Status::error("not supported yet: a DFlash drafter layer with a window that is "
                           "not causal (is_causal false with a sliding window)");
  for (size_t i = 0; i < draft.weights.size(); ++i) {
    importer::WeightBinding binding = draft.weights[i];
    binding.checkpointName = "draft:" + binding.checkpointName;
    target.weights.push_back(std::move(binding));
    checkpoint_->views.push_back(draft_->views[i]);
  }
  // The drafter's mask token fills its block; its block size is the dflash program's default.
  target.config.maskTokenId = draft.maskTokenId;
  target.knobDefaults["block_size"] = draft.blockSize;
  std::vector<mlir::Type> types;
  for (const safetensors::TensorView *view : checkpoint_->views)
    types.push_back(elementType(context_, *importer::weightDType(*view)));
  module_ = importer::buildSpeculativeModule(context_, target, types, draft);
  mlir::PassManager pm(&context_);
  pm.addPass(mlir::createCanonicalizerPass());
  if (failed(mlir::verify(*module_)) || failed(pm.run(*module_)))
    return Status::error("internal error: the IR of the target and its drafter does not verify");
  return Status::ok();
}

// --policy as given, or the model's default set; DiffusionGemma's forwards (encode, decode) serve
// only its own sampler, and the other programs' forwards only the other models.
Status Compilation::resolvePolicies(const CompileOptions &options) {
  policies_ = policyList(options);
  if (policies_.empty()) {
    CompileOptions defaults = options;
    defaults.policy = draft_ ? "dflash,autoregressive" : defaultPolicies(checkpoint_->model);
    policies_ = policyList(defaults);
  }
  const bool dflash = std::find(policies_.begin(), policies_.end(), "dflash") != policies_.end();
  if (dflash && !draft_)
    return Status::error("--policy dflash needs a drafter: dlmc compile TARGET --draft DRAFT");
  const bool blockDiffusion = checkpoint_->model.blockDiffusion.has_value();
  if (blockDiffusion) {
    if (policies_ != std::vector<std::string>{"diffusion-gemma"})
      return Status::error("not supported yet: --policy " + options.policy + " for " +
                           checkpoint_->model.config.architecture +
                           ", which runs only its own sampler (--policy diffusion-gemma)");
    return Status::ok();
  }
  // Left to right needs a causal model: a bidirectional one's prompt K/V would depend on the
  // tokens after them.
  for (const std::string &policy : policies_)
    if (programs::decodesLeftToRight(policy) &&
        checkpoint_->model.config.attentionMask != artifact::AttentionMaskKind::causal)
      return Status::error("not supported yet: --policy " + policy + " for " +
                           checkpoint_->model.config.architecture +
                           ", whose attention is not causal");
  // The first policy also builds @generate and picks the policy's CUDA kernels, which exist only
  // for the default diffusion programs; a policy deciding on the host needs neither.
  const std::vector<std::string> defaults = programs::defaultDecodeProgramPolicies();
  if (!programs::decidesOnTheHost(policies_.front()) &&
      std::find(defaults.begin(), defaults.end(), policies_.front()) == defaults.end())
    return Status::error("not supported yet: --policy " + policies_.front() +
                         " as the artifact's default program; name it after " +
                         program::oneOf(defaults) + " (e.g. --policy " + defaults.front() + "," +
                         policies_.front() + ")");
  return Status::ok();
}

// The legacy program section's knobs: the defaults of the program the artifact was built for.
void Compilation::setProgramKnobs(const CompileOptions &options,
                                  const programs::DecodingPolicy &policy) {
  artifact::Attributes &knobs = contents_.program.knobs;
  if (checkpoint_->model.blockDiffusion) {
    // Its sampler's knobs are the checkpoint's generation_config.json, not the block flags.
    knobs = checkpoint_->model.knobDefaults;
    return;
  }
  knobs[std::string(spec::kKnobGenLength)] = options.genLength;
  knobs[std::string(spec::kKnobBlockLength)] = options.blockLength;
  knobs[std::string(spec::kKnobSteps)] = options.steps;
  knobs[std::string(spec::kKnobTemperature)] = options.temperature;
  knobs[std::string(spec::kKnobUnrollSteps)] = options.unroll;
  if (options.threshold > 0.0)
    knobs[std::string(spec::kKnobThreshold)] = options.threshold;
  if (options.stepCap > 0)
    knobs[std::string(spec::kKnobStepCap)] = options.stepCap;
  if (policy.name == "entropy-bound") {
    // The same defaults the @generate program was built with (DiffusionGemma's shipped
    // generation_config, SPECS §1.1).
    knobs[std::string(spec::kKnobTMin)] = policy.tMin;
    knobs[std::string(spec::kKnobTMax)] = policy.tMax;
    knobs[std::string(spec::kKnobMaxSteps)] = policy.maxSteps;
    knobs[std::string(spec::kKnobEntropyBound)] = policy.entropyBound;
    knobs[std::string(spec::kKnobStabilityThreshold)] = policy.stability;
    knobs[std::string(spec::kKnobConfidenceThreshold)] = policy.confidenceBound;
  }
}

Status Compilation::generateCudaKernels(const CompileOptions &options,
                                        artifact::KernelTarget &program) {
#ifdef DLM_HAVE_NVRTC
  // Every kernel the records name and the policy needs, compiled for sm_80 and sm_90 (cubin +
  // PTX + ptxas's resource report). A kernel that does not compile, or a hot one that spills,
  // fails the compile with NVRTC's log. The device precision: --weights' when it is a float
  // type, else f32 when every weight stored as a float is f32 (the kernels then compute what the
  // float32 CPU backend does), else bf16. 8-bit and 4-bit projection weights (--weights int8 or
  // int4, an FP8 checkpoint) stay narrow on the device and are widened to that precision per GEMM.
  artifact::ArtifactContents &contents = contents_;
  const bool narrow =
      options.weights == "int8" || options.weights == "fp8" || options.weights == "int4";
  std::string precision = narrow ? "" : options.weights;
  codegen::ModelKernelOptions kernelOptions;
  for (const artifact::WeightSource &weight : contents.weights) {
    if (weight.dtype == artifact::DType::i8)
      kernelOptions.narrowWeights[weight.name] = {codegen::StoredWeight::i8};
    else if (weight.dtype == artifact::DType::fp8_e4m3)
      kernelOptions.narrowWeights[weight.name] = {codegen::StoredWeight::fp8E4m3};
    else if (weight.dtype == artifact::DType::i4)
      kernelOptions.narrowWeights[weight.name] = {codegen::StoredWeight::i4,
                                                  options.weightGroupSize};
  }
  if (precision.empty()) {
    precision = "f32";
    // A narrow weight's scales (f16 for i4) are part of it, not a float weight.
    auto narrowPart = [&](const std::string &name) {
      const std::string_view suffix = model::kRowScaleSuffix;
      return kernelOptions.narrowWeights.count(name) ||
             (name.size() > suffix.size() &&
              name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
              kernelOptions.narrowWeights.count(name.substr(0, name.size() - suffix.size())));
    };
    for (const artifact::WeightSource &weight : contents.weights)
      if (weight.dtype != artifact::DType::f32 && !narrowPart(weight.name))
        precision = "bf16";
  }
  contents.config.extra[std::string(spec::kExtraDevicePrecision)] = precision;
  kernelOptions.element =
      precision == "f32" ? codegen::ElementType::f32 : codegen::ElementType::bf16;
  kernelOptions.policy = policies_.front();
  kernelOptions.hostDecoding = checkpoint_->model.blockDiffusion.has_value() ||
                               programs::decidesOnTheHost(policies_.front());
  kernelOptions.confidenceThreshold = options.threshold > 0.0;
  kernelOptions.canvas = options.blockLength;
  kernelOptions.pageSize = programs::DecodingPolicy{}.pageSize;
  codegen::WeightShapes shapes;
  for (const artifact::WeightSource &weight : contents.weights)
    shapes[weight.name] = weight.shape;
  DLM_ASSIGN_OR_RETURN(cudaKernels_,
                       codegen::kernelsForProgram(program.kernels, shapes, kernelOptions));
  StatusOr<std::vector<codegen::KernelSource>> decoding =
      codegen::decodingKernels(contents.config, kernelOptions);
  if (!decoding)
    return decoding.status().withContext("--target " + options.target);
  cudaKernels_.insert(cudaKernels_.end(), decoding->begin(), decoding->end());
  codegen::NvrtcCompiler compiler;
  StatusOr<codegen::KernelTable> table = codegen::compileKernels(cudaKernels_, compiler);
  if (!table)
    return table.status().withContext("--target " + options.target);
  auto owned = std::make_shared<codegen::KernelTable>(std::move(*table));
  contents.kernelTargets.insert(contents.kernelTargets.end(), owned->targets.begin(),
                                owned->targets.end());
  kernelTable_ = owned;
  return Status::ok();
#else
  (void)program;
  return Status::error("not supported yet: --target " + options.target +
                       " (dlmc was built without the CUDA toolkit's NVRTC)");
#endif
}

} // namespace dlm::pipeline
