#include "runtime/cuda/emu/EmuAccessChecks.h"

#include "runtime/cuda/emu/BlockRunner.h"

#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>

// glibc's entry point for a thread's block of a module's thread-local storage (the x86-64 ABI's
// tls_index): offset 0 of module `module` is the block's start.
struct DlmTlsIndex {
  unsigned long module;
  unsigned long offset;
};
extern "C" void *__tls_get_addr(DlmTlsIndex *index);

namespace dlm::emu {

namespace {

AccessChecks parseChecks(const char *text) {
  AccessChecks checks;
  if (!text || !*text)
    return checks;
  std::stringstream names(text);
  std::string name;
  while (std::getline(names, name, ',')) {
    if (name == "all") {
      checks.memcheck = checks.racecheck = checks.initcheck = true;
    } else if (name == "memcheck") {
      checks.memcheck = true;
    } else if (name == "racecheck") {
      checks.racecheck = true;
    } else if (name == "initcheck") {
      checks.initcheck = true;
    } else {
      std::fprintf(stderr,
                   "DLM_EMU_CHECK: unknown check '%s' (all, memcheck, racecheck, initcheck)\n",
                   name.c_str());
      std::abort();
    }
  }
  return checks;
}

AccessChecks &currentChecks() {
  static AccessChecks checks = parseChecks(std::getenv("DLM_EMU_CHECK"));
  return checks;
}

// ---- Device memory (initcheck) ----

struct TrackedAllocation {
  size_t bytes = 0;
  std::unique_ptr<std::atomic<uint8_t>[]> written; // one flag per byte
};

struct DeviceTable {
  std::shared_mutex mutex;
  std::map<uintptr_t, TrackedAllocation> allocations;
};

DeviceTable &deviceTable() {
  static DeviceTable table;
  return table;
}

// Bumped by every untrack: a thread's cached allocation is valid while it has not changed (map
// nodes do not move, and only an untrack frees one).
std::atomic<uint64_t> untracks{0};

// The allocation a thread found last: kernels touch a few buffers many times.
struct CachedAllocation {
  uintptr_t begin = 0, end = 0;
  TrackedAllocation *allocation = nullptr;
  uint64_t untracks = 0;
};
thread_local CachedAllocation cachedAllocation;

// Calls `use(allocation, offset)` with the tracked allocation holding `address`; false when no
// allocation holds it.
template <typename Use> bool withAllocation(const void *address, Use use) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(address);
  CachedAllocation &cached = cachedAllocation;
  if (cached.allocation && at >= cached.begin && at < cached.end &&
      cached.untracks == untracks.load(std::memory_order_acquire)) {
    use(*cached.allocation, static_cast<size_t>(at - cached.begin));
    return true;
  }
  DeviceTable &table = deviceTable();
  std::shared_lock<std::shared_mutex> lock(table.mutex);
  auto found = table.allocations.upper_bound(at);
  if (found == table.allocations.begin())
    return false;
  --found;
  if (at - found->first >= found->second.bytes)
    return false;
  cached = {found->first, found->first + found->second.bytes, &found->second,
            untracks.load(std::memory_order_acquire)};
  use(found->second, static_cast<size_t>(at - found->first));
  return true;
}

// The first byte of [offset, offset + bytes) nothing has written, or SIZE_MAX.
size_t firstUnwritten(const TrackedAllocation &allocation, size_t offset, size_t bytes) {
  const size_t end = std::min(allocation.bytes, offset + bytes);
  for (size_t i = offset; i < end; ++i)
    if (!allocation.written[i].load(std::memory_order_relaxed))
      return i;
  return SIZE_MAX;
}

void markWritten(TrackedAllocation &allocation, size_t offset, size_t bytes) {
  const size_t end = std::min(allocation.bytes, offset + bytes);
  for (size_t i = offset; i < end; ++i)
    allocation.written[i].store(1, std::memory_order_relaxed);
}

// ---- Shared memory layouts ----

// The loaded object whose code holds an address: its file, TLS module id and TLS block size.
struct LoadedObject {
  uintptr_t address = 0;
  std::string path;
  size_t tlsModule = 0;
  size_t tlsBytes = 0;
  bool found = false;
};

int findObject(dl_phdr_info *info, size_t, void *data) {
  LoadedObject &object = *static_cast<LoadedObject *>(data);
  bool holds = false;
  size_t tlsBytes = 0;
  for (unsigned i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &header = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + header.p_vaddr;
    if (header.p_type == PT_LOAD && object.address >= start &&
        object.address < start + header.p_memsz)
      holds = true;
    if (header.p_type == PT_TLS)
      tlsBytes = header.p_memsz;
  }
  if (!holds)
    return 0;
  object.path = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "/proc/self/exe";
  object.tlsModule = info->dlpi_tls_modid;
  object.tlsBytes = tlsBytes;
  object.found = true;
  return 1;
}

std::string demangled(const char *name) {
  int status = 0;
  char *readable = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string result = status == 0 && readable ? readable : name;
  std::free(readable);
  return result;
}

// The thread-local variables an ELF file's symbol table names (offsets in its TLS block).
std::vector<SharedVariable> tlsVariables(const std::string &path) {
  std::vector<SharedVariable> variables;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return variables;
  struct stat info {};
  void *mapped = MAP_FAILED;
  if (fstat(fd, &info) == 0 && static_cast<size_t>(info.st_size) >= sizeof(ElfW(Ehdr)))
    mapped = mmap(nullptr, info.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED)
    return variables;
  const auto *bytes = static_cast<const unsigned char *>(mapped);
  const size_t size = info.st_size;
  const auto &elf = *reinterpret_cast<const ElfW(Ehdr) *>(bytes);
  const bool sectionsFit = elf.e_shoff <= size && elf.e_shentsize == sizeof(ElfW(Shdr)) &&
                           elf.e_shnum <= (size - elf.e_shoff) / sizeof(ElfW(Shdr));
  if (std::memcmp(elf.e_ident, ELFMAG, SELFMAG) == 0 && sectionsFit) {
    const auto *sections = reinterpret_cast<const ElfW(Shdr) *>(bytes + elf.e_shoff);
    for (unsigned s = 0; s < elf.e_shnum; ++s) {
      const ElfW(Shdr) &table = sections[s];
      if (table.sh_type != SHT_SYMTAB || table.sh_link >= elf.e_shnum || table.sh_offset > size ||
          table.sh_size > size - table.sh_offset)
        continue;
      const ElfW(Shdr) &names = sections[table.sh_link];
      if (names.sh_offset > size || names.sh_size > size - names.sh_offset)
        continue;
      const auto *symbols = reinterpret_cast<const ElfW(Sym) *>(bytes + table.sh_offset);
      const char *text = reinterpret_cast<const char *>(bytes + names.sh_offset);
      for (size_t i = 0; i < table.sh_size / sizeof(ElfW(Sym)); ++i) {
        const ElfW(Sym) &symbol = symbols[i];
        if (ELF64_ST_TYPE(symbol.st_info) != STT_TLS || symbol.st_shndx == SHN_UNDEF ||
            symbol.st_size == 0 || symbol.st_name >= names.sh_size)
          continue;
        const char *name = text + symbol.st_name;
        if (!memchr(name, 0, names.sh_size - symbol.st_name))
          continue;
        variables.push_back({symbol.st_value, symbol.st_size, demangled(name)});
      }
    }
  }
  munmap(mapped, size);
  std::sort(variables.begin(), variables.end(),
            [](const SharedVariable &a, const SharedVariable &b) { return a.offset < b.offset; });
  return variables;
}

} // namespace

const AccessChecks &accessChecks() { return currentChecks(); }

void setAccessChecks(const AccessChecks &checks) { currentChecks() = checks; }

void checkAccess(const void *address, size_t bytes, AccessKind kind) {
  BlockRunner *runner = currentRunner;
  if (runner && currentChecks().any())
    runner->checkAccess(static_cast<const unsigned char *>(address), bytes, kind);
}

void trackDeviceAllocation(const void *base, size_t bytes) {
  if (!currentChecks().initcheck)
    return;
  TrackedAllocation allocation;
  allocation.bytes = bytes;
  allocation.written = std::make_unique<std::atomic<uint8_t>[]>(bytes); // zero: unwritten
  DeviceTable &table = deviceTable();
  std::unique_lock<std::shared_mutex> lock(table.mutex);
  table.allocations[reinterpret_cast<uintptr_t>(base)] = std::move(allocation);
}

void untrackDeviceAllocation(const void *base) {
  DeviceTable &table = deviceTable();
  std::unique_lock<std::shared_mutex> lock(table.mutex);
  if (table.allocations.erase(reinterpret_cast<uintptr_t>(base)))
    untracks.fetch_add(1, std::memory_order_acq_rel);
}

void markDeviceWritten(const void *address, size_t bytes) {
  if (!currentChecks().initcheck || bytes == 0)
    return;
  withAllocation(address, [&](TrackedAllocation &allocation, size_t offset) {
    markWritten(allocation, offset, bytes);
  });
}

void copyDeviceWrittenState(const void *destination, const void *source, size_t bytes) {
  if (!currentChecks().initcheck || bytes == 0)
    return;
  std::vector<uint8_t> state(bytes, 1);
  withAllocation(source, [&](TrackedAllocation &allocation, size_t offset) {
    for (size_t i = 0; i < bytes && offset + i < allocation.bytes; ++i)
      state[i] = allocation.written[offset + i].load(std::memory_order_relaxed);
  });
  withAllocation(destination, [&](TrackedAllocation &allocation, size_t offset) {
    for (size_t i = 0; i < bytes && offset + i < allocation.bytes; ++i)
      allocation.written[offset + i].store(state[i], std::memory_order_relaxed);
  });
}

std::string checkDeviceAccess(const unsigned char *address, size_t bytes, AccessKind kind,
                              unsigned thread) {
  std::string failure;
  withAllocation(address, [&](TrackedAllocation &allocation, size_t offset) {
    if (reads(kind)) {
      const size_t unwritten = firstUnwritten(allocation, offset, bytes);
      if (unwritten != SIZE_MAX) {
        failure = "initcheck: thread " + std::to_string(thread) + " reads " +
                  std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                  " of a device allocation of " + std::to_string(allocation.bytes) +
                  " bytes, and nothing has written byte " + std::to_string(unwritten);
      }
    }
    if (writes(kind))
      markWritten(allocation, offset, bytes);
  });
  return failure;
}

std::shared_ptr<const SharedMemoryLayout> sharedMemoryLayoutOf(KernelEntry kernel) {
  LoadedObject object;
  object.address = reinterpret_cast<uintptr_t>(kernel);
  dl_iterate_phdr(findObject, &object);
  if (!object.found || object.tlsModule == 0 || object.tlsBytes == 0)
    return std::make_shared<SharedMemoryLayout>();
  // Parsed once per file: the emulated driver's modules are named by a hash of their contents.
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const SharedMemoryLayout>> layouts;
  std::lock_guard<std::mutex> lock(mutex);
  auto &layout = layouts[object.path];
  if (!layout || layout->tlsModule != object.tlsModule) {
    auto made = std::make_shared<SharedMemoryLayout>();
    made->tlsModule = object.tlsModule;
    made->blockBytes = object.tlsBytes;
    made->variables = tlsVariables(object.path);
    // Without a symbol table (a stripped or vanished file) the block is one variable: bounds
    // within it go unchecked rather than every access failing.
    if (made->variables.empty())
      made->variables.push_back({0, object.tlsBytes, "(the block's shared memory)"});
    layout = std::move(made);
  }
  return layout;
}

void SharedMemoryChecker::beginBlock(KernelEntry kernel) {
  // Once per launch, not per block: a runner lives for one launch, during which the kernel's
  // module cannot be unloaded.
  if (!layout_ || kernel != kernel_) {
    layout_ = sharedMemoryLayoutOf(kernel);
    kernel_ = kernel;
  }
  begin_ = nullptr;
  if (layout_->tlsModule == 0 || layout_->blockBytes == 0)
    return;
  DlmTlsIndex index{layout_->tlsModule, 0};
  begin_ = static_cast<const unsigned char *>(__tls_get_addr(&index));
  if (shadow_.size() < layout_->blockBytes)
    shadow_.resize(layout_->blockBytes);
  if (++block_ == 0) { // the serials wrapped: no state may look current
    std::fill(shadow_.begin(), shadow_.end(), ByteState{});
    block_ = 1;
  }
}

const SharedVariable *SharedMemoryChecker::variableFrom(size_t offset) const {
  const auto &variables = layout_->variables;
  auto after = std::upper_bound(
      variables.begin(), variables.end(), offset,
      [](size_t at, const SharedVariable &variable) { return at < variable.offset; });
  return after == variables.begin() ? nullptr : &*std::prev(after);
}

std::string SharedMemoryChecker::describe(size_t offset, size_t bytes) const {
  const std::string text = std::to_string(bytes) + " bytes at offset " + std::to_string(offset);
  const SharedVariable *variable = variableFrom(offset);
  if (variable && offset < variable->offset + variable->bytes)
    return text + " of __shared__ " + variable->name + " (" + std::to_string(variable->bytes) +
           " bytes at offset " + std::to_string(variable->offset) + ")";
  return text + " of the block's shared memory";
}

std::string SharedMemoryChecker::checkBounds(size_t offset, size_t bytes, unsigned thread) const {
  const SharedVariable *variable = variableFrom(offset);
  if (variable && offset + bytes <= variable->offset + variable->bytes)
    return "";
  const std::string access = "memcheck: thread " + std::to_string(thread) + " accesses ";
  if (variable && offset < variable->offset + variable->bytes)
    return access + describe(offset, bytes) + ", past the variable's end";
  std::string nearest;
  if (variable)
    nearest = "; the variable before it is " + variable->name + " (" +
              std::to_string(variable->bytes) + " bytes at offset " +
              std::to_string(variable->offset) + ")";
  return access + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
         " of the block's shared memory, outside every __shared__ variable" + nearest;
}

namespace {

// Whether an access of `other` (at its barrier generations) and one of the thread at `now` are
// unordered: different threads, no __syncthreads between them, and for threads of one warp no
// __syncwarp either.
bool unordered(uint32_t other, uint32_t blockGeneration, uint32_t warpGeneration,
               const SyncPoint &now) {
  return other != now.thread && blockGeneration == now.blockGeneration &&
         (other / 32 != now.thread / 32 || warpGeneration == now.warpGeneration);
}

int32_t warpOf(uint32_t thread) { return static_cast<int32_t>(thread / 32); }

} // namespace

// Keeps the reads a later write could race with: the reads since the last __syncthreads, less
// those a __syncwarp has since ordered before everything their warp does next.
void SharedMemoryChecker::recordRead(ByteState &state, AccessKind kind, const SyncPoint &now) {
  const bool stale = state.readers == 0 || state.readBlockGeneration != now.blockGeneration;
  const bool warpSynced =
      state.readers > 0 &&
      (state.readers == 1 ? warpOf(state.reader) : state.readersWarp) == warpOf(now.thread) &&
      state.readWarpGeneration != now.warpGeneration;
  if (stale || warpSynced || (state.readers == 1 && state.reader == now.thread)) {
    state.atomicReads = (stale || warpSynced || state.atomicReads) && isAtomic(kind);
    state.readers = 1;
    state.reader = now.thread;
  } else {
    state.readersWarp =
        (state.readers == 1 ? warpOf(state.reader) : state.readersWarp) == warpOf(now.thread)
            ? warpOf(now.thread)
            : -1;
    state.readers = 2;
    state.atomicReads = state.atomicReads && isAtomic(kind);
  }
  state.readBlockGeneration = now.blockGeneration;
  state.readWarpGeneration = now.warpGeneration;
}

// Whether a write at `now` races with the recorded reads.
bool SharedMemoryChecker::readUnordered(const ByteState &state, AccessKind kind,
                                        const SyncPoint &now) {
  if (state.readers == 0 || state.readBlockGeneration != now.blockGeneration ||
      (isAtomic(kind) && state.atomicReads))
    return false;
  if (state.readers == 1)
    return unordered(state.reader, state.readBlockGeneration, state.readWarpGeneration, now);
  // Several readers, so one is another thread: ordered only by a __syncwarp of their one warp.
  return state.readersWarp != warpOf(now.thread) || state.readWarpGeneration == now.warpGeneration;
}

std::string SharedMemoryChecker::check(const unsigned char *address, size_t bytes, AccessKind kind,
                                       const SyncPoint &now) {
  const AccessChecks &checks = currentChecks();
  const size_t offset = static_cast<size_t>(address - begin_);
  if (checks.memcheck)
    if (std::string failure = checkBounds(offset, bytes, now.thread); !failure.empty())
      return failure;
  if (!checks.racecheck && !checks.initcheck)
    return "";
  // Messages are made only on failure: this runs on every shared memory access.
  auto who = [](uint32_t thread) { return "thread " + std::to_string(thread); };
  const size_t end = std::min(layout_->blockBytes, offset + bytes);
  for (size_t at = offset; at < end; ++at) {
    ByteState &state = shadow_[at];
    if (state.block != block_) {
      state = ByteState{};
      state.block = block_;
    }
    const bool writtenUnordered =
        state.written &&
        unordered(state.writer, state.writeBlockGeneration, state.writeWarpGeneration, now) &&
        !(isAtomic(kind) && state.atomicWrite);
    if (reads(kind)) {
      if (checks.initcheck && !state.written)
        return "initcheck: " + who(now.thread) + " reads " + describe(offset, bytes) +
               " before any thread of the block has written it";
      if (checks.racecheck && writtenUnordered)
        return "racecheck: read-after-write hazard: " + who(now.thread) + " reads " +
               describe(offset, bytes) + ", which " + who(state.writer) +
               " wrote with no barrier in between";
      if (!writes(kind)) {
        recordRead(state, kind, now);
        continue;
      }
    }
    if (checks.racecheck && writtenUnordered)
      return "racecheck: write-after-write hazard: " + who(now.thread) + " writes " +
             describe(offset, bytes) + ", which " + who(state.writer) +
             " wrote with no barrier in between";
    if (checks.racecheck && readUnordered(state, kind, now))
      return "racecheck: write-after-read hazard: " + who(now.thread) + " writes " +
             describe(offset, bytes) + ", which " +
             (state.readers > 1 ? std::string("other threads") : who(state.reader)) +
             " read with no barrier in between";
    state.written = true;
    state.atomicWrite = isAtomic(kind);
    state.writer = now.thread;
    state.writeBlockGeneration = now.blockGeneration;
    state.writeWarpGeneration = now.warpGeneration;
    state.readers = 0;
  }
  return "";
}

} // namespace dlm::emu

extern "C" void dlm_emu_report_access(const void *address, uint64_t bytes, uint32_t kind) {
  if (kind <= static_cast<uint32_t>(dlm::emu::AccessKind::atomicWrite))
    dlm::emu::checkAccess(address, bytes, static_cast<dlm::emu::AccessKind>(kind));
}
