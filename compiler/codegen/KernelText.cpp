#include "compiler/codegen/KernelText.h"

#include "compiler/codegen/DeviceCommon.h"
#include "runtime/model/DeclaredLaunch.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace dlm::codegen {

namespace {

constexpr std::string_view kRowVectorConstants = R"cuda(using Element = ${element};
constexpr int kWidth = ${width};
constexpr int kVector = ${vector};
constexpr int kChunks = kWidth / kVector;
)cuda";

// The parameter list of an entry point, one parameter per line.
std::string renderSignature(const std::vector<KernelParameter> &parameters) {
  std::string text;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const KernelParameter &parameter = parameters[i];
    text += "    " + parameter.type;
    if (!parameter.type.empty() && parameter.type.back() != '*')
      text += ' ';
    text += parameter.name;
    text += i + 1 < parameters.size() ? ",\n" : "";
  }
  return text;
}

} // namespace

std::string expandTemplate(std::string_view text, const TemplateValues &values) {
  std::string result;
  result.reserve(text.size() + 256);
  std::set<std::string_view> used;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find("${", at);
    if (open == std::string_view::npos) {
      result.append(text.substr(at));
      break;
    }
    result.append(text.substr(at, open - at));
    const size_t close = text.find('}', open);
    if (close == std::string_view::npos) {
      std::fprintf(stderr, "dlm codegen: unterminated placeholder in kernel template\n");
      std::abort();
    }
    const std::string_view key = text.substr(open + 2, close - open - 2);
    bool found = false;
    for (const auto &[name, value] : values) {
      if (name == key) {
        result.append(value);
        used.insert(name);
        found = true;
        break;
      }
    }
    if (!found) {
      std::fprintf(stderr, "dlm codegen: no value for placeholder ${%.*s}\n",
                   static_cast<int>(key.size()), key.data());
      std::abort();
    }
    at = close + 1;
  }
  for (const auto &[name, value] : values) {
    if (!used.count(name)) {
      std::fprintf(stderr, "dlm codegen: value '%s' matches no placeholder\n", name.c_str());
      std::abort();
    }
  }
  return result;
}

std::string doubleLiteral(double value) {
  char buffer[64];
  // The shortest of %.15g..%.17g that reads back exactly keeps literals readable (1e+06, 0.5).
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  std::string text(buffer);
  if (text.find_first_of(".eEn") == std::string::npos)
    text += ".0";
  return text;
}

std::string floatLiteral(double value) {
  char buffer[64];
  const float rounded = static_cast<float>(value);
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, static_cast<double>(rounded));
    if (std::strtof(buffer, nullptr) == rounded)
      break;
  }
  std::string text(buffer);
  if (text.find_first_of(".eEn") == std::string::npos)
    text += ".0";
  return text + "f";
}

std::string boolLiteral(bool value) { return value ? "true" : "false"; }

std::string identifierFragment(double value) {
  std::string text;
  for (char c : doubleLiteral(value)) {
    if (c == '.')
      text += 'p';
    else if (c == '-')
      text += 'm';
    else if (c != '+')
      text += c;
  }
  // "10000.0" -> "10000p0": drop a zero fraction.
  if (text.size() > 2 && text.compare(text.size() - 2, 2, "p0") == 0)
    text.resize(text.size() - 2);
  return text;
}

std::string_view cudaElementType(ElementType type) {
  return type == ElementType::bf16 ? "__nv_bfloat16" : "float";
}

RowCopyShape rowCopyShape(ElementType element, int64_t width) {
  RowCopyShape shape;
  shape.vector = vectorWidth(element, width);
  shape.chunkBytes = shape.vector * elementBytes(element);
  shape.threads = std::clamp<int64_t>(roundUp(width / shape.vector, 32), 32, 256);
  return shape;
}

void setRowCopyLaunch(KernelSource &kernel, const RowCopyShape &shape) {
  kernel.blockThreads = static_cast<unsigned>(shape.threads);
  kernel.grid = "x = count";
  kernel.sharedMemoryBytes = 0;
}

std::string_view rawChunkType(int bytes) {
  switch (bytes) {
  case 16:
    return "uint4";
  case 8:
    return "uint2";
  case 4:
    return "unsigned int";
  case 2:
    return "unsigned short";
  default:
    std::fprintf(stderr, "dlm codegen: no raw chunk type of %d bytes\n", bytes);
    std::abort();
  }
}

Status checkWidth(std::string_view what, int64_t width, int log2Limit) {
  if (width >= 1 && width <= (int64_t(1) << log2Limit))
    return Status::ok();
  return Status::error(std::string(what) + " must be in [1, 2^" + std::to_string(log2Limit) +
                       "], got " + std::to_string(width));
}

KernelSource rowKernelSource(std::string kind, std::string_view namePrefix, int64_t width,
                             ElementType element, bool hot, unsigned blockThreads) {
  KernelSource kernel;
  kernel.kind = std::move(kind);
  kernel.hot = hot;
  kernel.blockThreads = blockThreads;
  kernel.name = std::string(namePrefix) + "_w" + std::to_string(width) + "_" +
                std::string(elementTypeName(element));
  kernel.specialisation = {{"width", width}, {"element", std::string(elementTypeName(element))}};
  return kernel;
}

std::string rowVectorConstants(ElementType element, int64_t width) {
  return expandTemplate(kRowVectorConstants,
                        {{"element", std::string(cudaElementType(element))},
                         {"width", std::to_string(width)},
                         {"vector", std::to_string(vectorWidth(element, width))}});
}

std::string expandKernelBody(const KernelSource &kernel, std::string_view text,
                             TemplateValues values) {
  values.push_back({"entryPoint", "extern \"C\" __global__ void __launch_bounds__(kThreads) " +
                                      kernel.name + "(\n" + renderSignature(kernel.parameters) +
                                      ")"});
  return "constexpr int kThreads = " + std::to_string(kernel.blockThreads) + ";\n" +
         expandTemplate(text, values);
}

std::string assembleTranslationUnit(const KernelSource &kernel, std::string_view summary,
                                    std::string_view body) {
  std::string text;
  text += "// Generated by dlm codegen: kernel " + kernel.name + " (" + kernel.kind + ").\n";
  text += "// " + std::string(summary) + "\n";
  text += "// Launch: " + std::to_string(kernel.blockThreads) + " threads per block; grid " +
          kernel.grid + ".\n";
  text += "#include <cuda_bf16.h>\n\n";
  text += deviceCommonSource();
  text += "\nnamespace " + kernel.name + "_detail {\n\n";
  text += body;
  text += "\n} // namespace " + kernel.name + "_detail\n";
  return text;
}

Status declareLaunch(KernelSource &kernel, const std::vector<std::string> &arguments,
                     const std::string &grid) {
  std::string text;
  for (const std::string &argument : arguments)
    text += (text.empty() ? "" : ",") + argument;
  auto fail = [&](const std::string &what) {
    return Status::error(kernel.kind + " kernel " + kernel.name + ": " + what);
  };
  StatusOr<spec::kernels::DeclaredLaunch> launch = spec::kernels::parseDeclaredLaunch(text, grid);
  if (!launch)
    return fail(launch.status().message());
  if (launch->arguments.size() != kernel.parameters.size())
    return fail(std::to_string(launch->arguments.size()) + " launch arguments for " +
                std::to_string(kernel.parameters.size()) + " parameters");
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string_view type = spec::kernels::argumentType(launch->arguments[i].source);
    const std::string &declared = kernel.parameters[i].type;
    const bool pointer = declared.find('*') != std::string::npos;
    if (type == "*" ? !pointer : pointer || declared != type)
      return fail("launch argument '" + arguments[i] + "' does not fit parameter '" +
                  kernel.parameters[i].name + "' of type " + declared);
  }
  kernel.specialisation[std::string(spec::kernels::kLaunchArguments)] = text;
  kernel.specialisation[std::string(spec::kernels::kLaunchGrid)] = grid;
  return Status::ok();
}

} // namespace dlm::codegen
