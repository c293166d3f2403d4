#include "compiler/codegen/NvrtcCompiler.h"

#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <regex>

namespace dlm::codegen {

namespace {

struct ProgramDeleter {
  void operator()(nvrtcProgram program) const { nvrtcDestroyProgram(&program); }
};
using Program = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::string programLog(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size == 0)
    return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS)
    return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
    log.pop_back();
  return log;
}

bool isArchitecture(std::string_view target) {
  if (target.size() < 5 || target.substr(0, 3) != "sm_")
    return false;
  for (char c : target.substr(3))
    if (c < '0' || c > '9')
      if (c != 'a' && c != 'f')
        return false;
  return true;
}

uint32_t toUnsigned(const std::string &text) {
  return static_cast<uint32_t>(std::strtoul(text.c_str(), nullptr, 10));
}

} // namespace

NvrtcCompiler::NvrtcCompiler(NvrtcOptions options) : options_(std::move(options)) {
  if (options_.includeDirectories.empty()) {
    options_.includeDirectories.push_back(DLM_CUDA_INCLUDE_DIR);
    options_.includeDirectories.push_back(DLM_CUDA_INCLUDE_DIR "/cccl");
  }
}

StatusOr<CompiledKernel> NvrtcCompiler::compile(std::string_view source, std::string_view entry,
                                                std::string_view target) const {
  const std::string where = "NVRTC " + std::string(entry) + " for " + std::string(target);
  if (!isArchitecture(target))
    return Status::error(where + ": target must look like sm_90, got '" + std::string(target) +
                         "'");
  nvrtcProgram raw = nullptr;
  const std::string text(source);
  const std::string file = std::string(entry) + ".cu";
  nvrtcResult result = nvrtcCreateProgram(&raw, text.c_str(), file.c_str(), 0, nullptr, nullptr);
  if (result != NVRTC_SUCCESS)
    return Status::error(where + ": " + nvrtcGetErrorString(result));
  Program program(raw);

  std::vector<std::string> options = {"--gpu-architecture=" + std::string(target), "--std=c++17",
                                      "--ptxas-options=-v"};
  for (const std::string &directory : options_.includeDirectories)
    options.push_back("-I" + directory);
  if (options_.lineInfo)
    options.push_back("--generate-line-info");
  std::vector<const char *> arguments;
  for (const std::string &option : options)
    arguments.push_back(option.c_str());

  result = nvrtcCompileProgram(program.get(), static_cast<int>(arguments.size()), arguments.data());
  CompiledKernel kernel;
  kernel.target = std::string(target);
  kernel.log = programLog(program.get());
  if (result != NVRTC_SUCCESS)
    return Status::error(where + ": " + nvrtcGetErrorString(result) + "\n" + kernel.log);

  // Compiling for a real architecture gives both the cubin and the PTX it came from.
  size_t size = 0;
  if (nvrtcGetCUBINSize(program.get(), &size) != NVRTC_SUCCESS || size == 0)
    return Status::error(where + ": NVRTC produced no cubin");
  kernel.cubin.resize(size);
  if (nvrtcGetCUBIN(program.get(), reinterpret_cast<char *>(kernel.cubin.data())) != NVRTC_SUCCESS)
    return Status::error(where + ": cannot read the cubin");
  if (nvrtcGetPTXSize(program.get(), &size) != NVRTC_SUCCESS || size == 0)
    return Status::error(where + ": NVRTC produced no PTX");
  kernel.ptx.resize(size);
  if (nvrtcGetPTX(program.get(), kernel.ptx.data()) != NVRTC_SUCCESS)
    return Status::error(where + ": cannot read the PTX");
  while (!kernel.ptx.empty() && kernel.ptx.back() == '\0')
    kernel.ptx.pop_back();

  StatusOr<artifact::KernelResources> resources = parsePtxasReport(kernel.log, entry);
  if (!resources)
    return resources.status().withContext(where);
  kernel.resources = *resources;
  return kernel;
}

std::vector<std::string> NvrtcCompiler::supportedTargets() {
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0)
    return {};
  std::vector<int> architectures(static_cast<size_t>(count));
  if (nvrtcGetSupportedArchs(architectures.data()) != NVRTC_SUCCESS)
    return {};
  std::vector<std::string> targets;
  for (int architecture : architectures)
    targets.push_back("sm_" + std::to_string(architecture));
  return targets;
}

std::string NvrtcCompiler::version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

StatusOr<artifact::KernelResources> parsePtxasReport(std::string_view log, std::string_view entry) {
  const std::string text(log);
  const std::string header = "Function properties for " + std::string(entry) + "\n";
  const size_t at = text.find(header);
  if (at == std::string::npos)
    return Status::error("the ptxas report has no function properties for " + std::string(entry));
  // The properties block runs until the next function's block.
  const size_t end = text.find("Function properties for ", at + header.size());
  const std::string block =
      text.substr(at, end == std::string::npos ? std::string::npos : end - at);

  artifact::KernelResources resources;
  std::smatch match;
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  if (!std::regex_search(block, match, frame))
    return Status::error("the ptxas report for " + std::string(entry) +
                         " has no stack frame / spill line");
  resources.stackBytes = toUnsigned(match[1]);
  resources.spillStoreBytes = toUnsigned(match[2]);
  resources.spillLoadBytes = toUnsigned(match[3]);
  static const std::regex registers(R"(Used (\d+) registers)");
  if (!std::regex_search(block, match, registers))
    return Status::error("the ptxas report for " + std::string(entry) + " has no register count");
  resources.registers = toUnsigned(match[1]);
  static const std::regex shared(R"((\d+) bytes smem)");
  if (std::regex_search(block, match, shared))
    resources.sharedMemoryBytes = toUnsigned(match[1]);
  return resources;
}

} // namespace dlm::codegen
