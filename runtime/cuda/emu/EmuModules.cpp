// Emulated modules: cuModuleLoadData takes the CUDA C++ source of generated kernels, compiles it
// with the host compiler and EmuPrelude.h into a shared object (cached on disk by a hash of what
// determines it), dlopens it and looks its kernels up by name. With clang the prelude is a
// precompiled header, built once per cache directory: a kernel then compiles about 4x faster.
//
// Each extern "C" __global__ entry point gets an exported wrapper appended to the source,
// dlm_emu_entry_<name>(void **parameters), and dlm_emu_parameters_<name>, its parameter sizes;
// the module resolves those with dlsym on its own handle, so modules never share a kernel table
// and loading the same source twice (one shared object, dlopen'ed twice) just works.
#include "runtime/cuda/emu/EmuAccessChecks.h"
#include "runtime/cuda/emu/EmuApi.h"
#include "runtime/cuda/emu/EmuModule.h"
#include "support/AddressSanitizer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>

extern char **environ;

namespace dlm::emu {

namespace {

// Baked in by CMake: the compiler that built the emulation, and the include directories the
// prelude needs (the project's sources, the CUDA toolkit's headers, Boost's).
constexpr const char *kHostCompiler = DLM_EMU_HOST_COMPILER;
constexpr const char *kBuiltSourceDir = DLM_EMU_SOURCE_DIR;
constexpr const char *kCudaIncludeDir = DLM_EMU_CUDA_INCLUDE_DIR;
constexpr const char *kBoostIncludeDir = DLM_EMU_BOOST_INCLUDE_DIR;
// In the checked build (this library under AddressSanitizer) kernels are compiled with it too:
// every global memory access an emulated kernel makes is checked against the allocations
// (EmuMemory.cpp gives each exactly its size), which is what compute-sanitizer's memcheck does on
// a device. The kernel's symbols resolve against the executable's sanitizer runtime.
const char *const kCompileFlags[] = {"-O2", "-shared", "-fPIC", "-std=c++17", "-w",
#ifdef DLM_ADDRESS_SANITIZER
                                     "-fsanitize=address", "-fno-omit-frame-pointer",
                                     "-fsanitize-address-use-after-return=never",
                                     "-gline-tables-only",
#endif
};
// A checked run (DLM_EMU_CHECK, EmuAccessChecks.h) compiles kernels with this LLVM pass plugin,
// which reports their every access (AccessReportingPass.cpp); "" where the build has none.
constexpr const char *kAccessPlugin = DLM_EMU_ACCESS_PLUGIN;
// The headers the compiled kernels are built against: a change to any of them changes the
// shared object, so they are part of the cache key.
const char *const kPreludeHeaders[] = {"runtime/cuda/emu/EmuPrelude.h",
                                       "runtime/cuda/emu/EmuDevice.h",
                                       "runtime/cuda/emu/EmuThread.h", "support/Status.h"};

// Where the prelude's headers are: $DLM_EMU_SOURCE_DIR, else the source tree of this build. A
// kernel cache carried to another machine (the GPU kit, docs/gpu-check.md) carries the headers
// too: the cache key hashes their contents, so its kernels are found there without a compiler.
const std::string &sourceDir() {
  static const std::string dir = [] {
    const char *override = std::getenv("DLM_EMU_SOURCE_DIR");
    return std::string(override && *override ? override : kBuiltSourceDir);
  }();
  return dir;
}

// The flags of this process's kernel compiles: the common ones, and the checked run's.
std::vector<std::string> compileFlags() {
  std::vector<std::string> flags(std::begin(kCompileFlags), std::end(kCompileFlags));
  if (accessChecks().any())
    flags.push_back(std::string("-fpass-plugin=") + kAccessPlugin);
  return flags;
}

struct LiveHandles {
  std::mutex mutex;
  std::set<EmuModule *> modules;
  std::set<EmuFunction *> functions;
};

LiveHandles &liveHandles() {
  static LiveHandles instance;
  return instance;
}

// 64-bit FNV-1a: a stable hash (std::hash may differ between builds) for cache file names.
struct Fnv1a {
  uint64_t state = 1469598103934665603ull;
  void add(std::string_view bytes) {
    for (unsigned char byte : bytes) {
      state ^= byte;
      state *= 1099511628211ull;
    }
    add0();
  }
  void add0() { state = (state ^ 0xff) * 1099511628211ull; } // separates the fields
};

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string cacheDirectory() {
  if (const char *dir = std::getenv("DLM_EMU_CACHE_DIR"); dir && *dir)
    return dir;
  if (const char *dir = std::getenv("XDG_CACHE_HOME"); dir && *dir)
    return std::string(dir) + "/dlm/emu";
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/dlm/emu";
  return "/tmp/dlm-emu-cache";
}

// mkdir -p.
bool makeDirectories(const std::string &path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      return false;
    if (slash == std::string::npos)
      return true;
  }
}

// A file name no other process or thread uses at the same time.
std::string uniqueSuffix() {
  static std::atomic<unsigned> counter{0};
  return ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1));
}

std::string hexOf(uint64_t value) {
  static const char digits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4)
    text[i] = digits[value & 15];
  return text;
}

std::string unqualified(const std::string &qualified) {
  const size_t colon = qualified.rfind(':');
  return colon == std::string::npos ? qualified : qualified.substr(colon + 1);
}

// The translation unit the host compiler builds: prelude, the kernels' source, the wrappers.
std::string emulationSource(const std::string &source, const std::vector<std::string> &entries) {
  std::string text = "#include \"runtime/cuda/emu/EmuPrelude.h\"\n#line 1 \"kernel.cu\"\n";
  text += source;
  text += "\n\n// Appended by the emulated driver: one exported wrapper per entry point.\n";
  for (const std::string &qualified : entries) {
    const std::string name = unqualified(qualified);
    text += "extern \"C\" __attribute__((visibility(\"default\"))) void dlm_emu_entry_" + name +
            "(void **parameters) { ::dlm::emu::invokeKernel(&::" + qualified + ", parameters); }\n";
    text += "extern \"C\" __attribute__((visibility(\"default\"))) unsigned "
            "dlm_emu_parameters_" +
            name +
            "(unsigned long long *sizes, unsigned capacity) { return "
            "::dlm::emu::kernelParameterSizes(&::" +
            qualified + ", sizes, capacity); }\n";
  }
  return text;
}

// Runs the host compiler: `arguments` after the compiler, the common flags and include dirs;
// its output goes to `logPath`. Returns the exit status (-1 when it could not be started).
int runCompiler(const std::vector<std::string> &extra, const std::string &logPath) {
  std::vector<std::string> arguments = {kHostCompiler};
  for (const std::string &flag : compileFlags())
    arguments.push_back(flag);
  for (const std::string &dir : {sourceDir(), std::string(kCudaIncludeDir),
                                 std::string(kBoostIncludeDir)})
    if (!dir.empty())
      arguments.push_back("-I" + dir);
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  std::vector<char *> argv;
  for (std::string &argument : arguments)
    argv.push_back(argument.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t child = 0;
  const int spawned = posix_spawn(&child, kHostCompiler, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    return -1;
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The hash of everything a compiled kernel depends on besides its own source.
Fnv1a toolchainHash() {
  Fnv1a hash;
  hash.add(kHostCompiler);
  for (const std::string &flag : compileFlags())
    hash.add(flag);
  for (const char *header : kPreludeHeaders)
    hash.add(readFile(sourceDir() + "/" + header));
  if (accessChecks().any())
    hash.add(readFile(kAccessPlugin));
  return hash;
}

// Parsing the prelude (the CUDA headers in host mode) is most of a kernel's compile time, so with
// clang it is precompiled once per cache directory and toolchain: "" when there is none (another
// compiler, or building it failed; kernels then compile without it).
std::string preludePch(const std::string &dir, bool rebuild) {
  if (std::string_view(kHostCompiler).find("clang") == std::string_view::npos)
    return "";
  static std::mutex mutex; // one build at a time in this process
  std::lock_guard<std::mutex> lock(mutex);
  // A PCH holds its headers by path: a kernel of another checkout includes the prelude by that
  // checkout's path, and a PCH of this one would give it a second copy of every header
  // (redefinitions). One PCH per source tree; the compiled kernels do not depend on it.
  Fnv1a hash = toolchainHash();
  hash.add(sourceDir());
  const std::string path = dir + "/prelude-" + hexOf(hash.state) + ".pch";
  if (!rebuild && access(path.c_str(), R_OK) == 0)
    return path;
  const std::string temporary = path + uniqueSuffix();
  const std::string logPath = temporary + ".log";
  const int exitStatus = runCompiler(
      {"-x", "c++-header", "-o", temporary, sourceDir() + "/" + kPreludeHeaders[0]},
      logPath);
  unlink(logPath.c_str());
  if (exitStatus != 0 || rename(temporary.c_str(), path.c_str()) != 0) {
    unlink(temporary.c_str());
    return "";
  }
  return path;
}

// The cached shared object for `text` (compiled now if it is not cached yet), or an error
// result with the log set.
CUresult compiledObject(const std::string &text, std::string &objectPath) {
  Fnv1a hash = toolchainHash();
  hash.add(text);
  const std::string dir = cacheDirectory();
  const std::string stem = dir + "/" + hexOf(hash.state);
  objectPath = stem + ".so";
  if (access(objectPath.c_str(), R_OK) == 0)
    return CUDA_SUCCESS;

  if (!makeDirectories(dir)) {
    setLastModuleLog("cannot create the emulated kernel cache directory " + dir + ": " +
                     std::strerror(errno));
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  // Concurrent processes may compile the same source: each writes its own temporary files and
  // renames the result into place (atomic), so a reader never sees a partial shared object.
  const std::string suffix = uniqueSuffix();
  const std::string sourcePath = stem + suffix + ".cpp";
  const std::string temporaryObject = stem + suffix + ".so";
  const std::string logPath = stem + suffix + ".log";
  {
    std::ofstream out(sourcePath, std::ios::binary);
    out << text;
    if (!out) {
      setLastModuleLog("cannot write " + sourcePath);
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
  }
  auto compile = [&](const std::string &pch) {
    std::vector<std::string> arguments;
    if (!pch.empty())
      arguments = {"-include-pch", pch};
    arguments.insert(arguments.end(), {"-o", temporaryObject, sourcePath});
    return runCompiler(arguments, logPath);
  };
  std::string pch = preludePch(dir, /*rebuild=*/false);
  int exitStatus = compile(pch);
  std::string log = readFile(logPath);
  // A precompiled header goes stale when a header it read changes (a toolkit update): rebuild it
  // once, then do without.
  if (exitStatus != 0 && !pch.empty() && log.find("precompiled header") != std::string::npos) {
    pch = preludePch(dir, /*rebuild=*/true);
    exitStatus = compile(pch);
    if (exitStatus != 0 && !pch.empty())
      exitStatus = compile("");
    log = readFile(logPath);
  }
  unlink(logPath.c_str());
  if (exitStatus != 0) {
    // The source stays next to the log's line numbers for whoever reads them.
    const std::string keptSource = stem + ".failed.cpp";
    rename(sourcePath.c_str(), keptSource.c_str());
    unlink(temporaryObject.c_str());
    setLastModuleLog(exitStatus < 0
                         ? std::string("cannot run the host compiler ") + kHostCompiler
                         : std::string("the host compiler ") + kHostCompiler + " failed (exit " +
                               std::to_string(exitStatus) + ") on " + keptSource + ":\n" + log);
    return CUDA_ERROR_INVALID_SOURCE;
  }
  rename(sourcePath.c_str(), (stem + ".cpp").c_str());
  if (rename(temporaryObject.c_str(), objectPath.c_str()) != 0) {
    setLastModuleLog("cannot move " + temporaryObject + " into the cache: " + std::strerror(errno));
    unlink(temporaryObject.c_str());
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  return CUDA_SUCCESS;
}

// PTX or a cubin/fatbin (what a real driver loads) cannot run here: say so.
bool looksLikeDeviceCode(const char *image) {
  // A cubin is an ELF file; a fatbin starts with its magic 0xba55ed50 (little-endian). strncmp
  // stops at a NUL, so a short source is never read past its end.
  if (std::strncmp(image,
                   "\x7f"
                   "ELF",
                   4) == 0 ||
      std::strncmp(image, "\x50\xed\x55\xba", 4) == 0)
    return true;
  const std::string_view text(image);
  return text.find(".version ") != std::string_view::npos &&
         text.find(".target ") != std::string_view::npos && text.find("__global__") == text.npos;
}

} // namespace

EmuFunction *liveFunction(CUfunction handle) {
  EmuFunction *function = reinterpret_cast<EmuFunction *>(handle);
  LiveHandles &live = liveHandles();
  std::lock_guard<std::mutex> lock(live.mutex);
  return live.functions.count(function) ? function : nullptr;
}

namespace api {

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  if (!module || !image)
    return CUDA_ERROR_INVALID_VALUE;
  setLastModuleLog(""); // a log always belongs to the latest load
  const char *text = static_cast<const char *>(image);
  if (looksLikeDeviceCode(text)) {
    setLastModuleLog("the emulated driver loads CUDA C++ source (a kernel's Kernel.source), not "
                     "PTX or a cubin");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  if (accessChecks().any() && !*kAccessPlugin) {
    setLastModuleLog("DLM_EMU_CHECK needs the access-reporting pass plugin, which this build does "
                     "not have: its host compiler must be the clang of the LLVM it builds "
                     "against (runtime/cuda/CMakeLists.txt)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const std::string source(text);
  const std::vector<std::string> entries = findEntryPoints(source);

  std::string objectPath;
  if (CUresult result = compiledObject(emulationSource(source, entries), objectPath);
      result != CUDA_SUCCESS)
    return result;
  dlerror();
  void *library = dlopen(objectPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *message = dlerror();
    setLastModuleLog("cannot load the compiled kernels " + objectPath + ": " +
                     (message ? message : "unknown error"));
    return CUDA_ERROR_INVALID_IMAGE;
  }

  auto loaded = std::make_unique<EmuModule>();
  loaded->library = library;
  loaded->path = objectPath;
  for (const std::string &qualified : entries) {
    const std::string name = unqualified(qualified);
    auto entry = reinterpret_cast<KernelEntry>(dlsym(library, ("dlm_emu_entry_" + name).c_str()));
    auto sizesOf = reinterpret_cast<unsigned (*)(unsigned long long *, unsigned)>(
        dlsym(library, ("dlm_emu_parameters_" + name).c_str()));
    if (!entry || !sizesOf) {
      setLastModuleLog("the compiled kernels " + objectPath + " lack the wrapper of " + name);
      dlclose(library);
      return CUDA_ERROR_INVALID_IMAGE;
    }
    auto function = std::make_unique<EmuFunction>();
    function->name = name;
    function->entry = entry;
    std::vector<unsigned long long> sizes(sizesOf(nullptr, 0));
    sizesOf(sizes.data(), static_cast<unsigned>(sizes.size()));
    function->parameterSizes.assign(sizes.begin(), sizes.end());
    loaded->functions.emplace(name, std::move(function));
  }

  LiveHandles &live = liveHandles();
  std::lock_guard<std::mutex> lock(live.mutex);
  for (auto &[name, function] : loaded->functions)
    live.functions.insert(function.get());
  EmuModule *raw = loaded.release();
  live.modules.insert(raw);
  *module = reinterpret_cast<CUmodule>(raw);
  return CUDA_SUCCESS;
}

// JIT options tune PTX compilation; the emulation has none to tune.
CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int, CUjit_option *,
                            void **) {
  return api::cuModuleLoadData(module, image);
}

CUresult cuModuleUnload(CUmodule module) {
  EmuModule *loaded = reinterpret_cast<EmuModule *>(module);
  {
    LiveHandles &live = liveHandles();
    std::lock_guard<std::mutex> lock(live.mutex);
    if (!live.modules.erase(loaded))
      return CUDA_ERROR_INVALID_HANDLE;
    for (auto &[name, function] : loaded->functions)
      live.functions.erase(function.get());
  }
  dlclose(loaded->library);
  delete loaded;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name) {
  if (!function || !name)
    return CUDA_ERROR_INVALID_VALUE;
  EmuModule *loaded = reinterpret_cast<EmuModule *>(module);
  LiveHandles &live = liveHandles();
  std::lock_guard<std::mutex> lock(live.mutex);
  if (!live.modules.count(loaded))
    return CUDA_ERROR_INVALID_HANDLE;
  auto found = loaded->functions.find(std::string_view(name));
  if (found == loaded->functions.end())
    return CUDA_ERROR_NOT_FOUND;
  *function = reinterpret_cast<CUfunction>(found->second.get());
  return CUDA_SUCCESS;
}

} // namespace api

} // namespace dlm::emu
