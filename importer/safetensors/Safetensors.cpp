#include "importer/safetensors/Safetensors.h"

#include "importer/safetensors/SafetensorsHeader.h"
#include "support/JsonText.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace dlm::safetensors {
namespace {

using Json = nlohmann::json;

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},           {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},   {DType::I16, "I16", 2},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::U32, "U32", 4},         {DType::I32, "I32", 4},
    {DType::F32, "F32", 4},   {DType::U64, "U64", 8},         {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};

const DTypeInfo &infoOf(DType dtype) {
  for (const DTypeInfo &info : kDTypes)
    if (info.dtype == dtype)
      return info;
  return kDTypes[0]; // unreachable: every enumerator is in the table
}

enum class PathKind { Missing, Directory, File };

PathKind kindOf(const std::string &path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0)
    return PathKind::Missing;
  return S_ISDIR(info.st_mode) ? PathKind::Directory : PathKind::File;
}

bool endsWith(const std::string &text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string directoryOf(const std::string &path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

// Shard names come from the index file; keep them inside the checkpoint directory.
bool isSafeRelativePath(const std::string &name) {
  if (name.empty() || name.front() == '/')
    return false;
  std::istringstream parts(name);
  std::string part;
  while (std::getline(parts, part, '/'))
    if (part == "..")
      return false;
  return true;
}

} // namespace

std::string_view dtypeName(DType dtype) { return infoOf(dtype).name; }
size_t dtypeSize(DType dtype) { return infoOf(dtype).size; }

std::optional<DType> parseDType(std::string_view name) {
  for (const DTypeInfo &info : kDTypes)
    if (info.name == name)
      return info.dtype;
  return std::nullopt;
}

int64_t TensorView::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

SafetensorsCheckpoint::SafetensorsCheckpoint(SafetensorsCheckpoint &&) noexcept = default;
SafetensorsCheckpoint &
SafetensorsCheckpoint::operator=(SafetensorsCheckpoint &&) noexcept = default;
SafetensorsCheckpoint::~SafetensorsCheckpoint() = default;

Status SafetensorsCheckpoint::addFile(const std::string &path,
                                      const std::vector<std::string> *onlyTheseTensors) {
  StatusOr<MappedFile> file = MappedFile::open(path);
  if (!file)
    return file.status().withContext("'" + path + "'");
  StatusOr<ParsedHeader> header = parseSafetensorsHeader(file->data(), file->size());
  if (!header)
    return header.status().withContext(path);

  std::unordered_map<std::string, const HeaderEntry *> entryByName;
  for (const HeaderEntry &entry : header->tensors)
    entryByName.emplace(entry.name, &entry);
  std::vector<const HeaderEntry *> selected;
  if (onlyTheseTensors) {
    for (const std::string &name : *onlyTheseTensors) {
      const auto it = entryByName.find(name);
      if (it == entryByName.end())
        return Status::error("tensor '" + name + "' is listed in the index under shard '" + path +
                             "', but that shard does not contain it");
      selected.push_back(it->second);
    }
  } else {
    for (const HeaderEntry &entry : header->tensors)
      selected.push_back(&entry);
  }

  const uint8_t *dataSection = file->data() + header->dataOffset;
  for (const HeaderEntry *entry : selected) {
    indexByName_.emplace(entry->name, tensors_.size());
    tensors_.push_back(TensorView{entry->name, entry->dtype, entry->shape,
                                  dataSection + entry->begin,
                                  static_cast<size_t>(entry->end - entry->begin), path});
  }
  for (auto &[key, value] : header->metadata)
    metadata_.emplace(key, value);
  files_.push_back(std::move(*file));
  return Status::ok();
}

StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::openIndex(const std::string &indexPath) {
  std::ifstream stream(indexPath, std::ios::binary);
  if (!stream)
    return Status::error("cannot open '" + indexPath + "'");
  std::ostringstream contents;
  contents << stream.rdbuf();
  StatusOr<Json> parsedIndex = parseJsonText<Json>(contents.str(), "index");
  if (!parsedIndex)
    return parsedIndex.status().withContext(indexPath);
  const Json &index = *parsedIndex;
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    return Status::error(indexPath + ": index has no \"weight_map\" object");

  // Group tensor names by shard, keeping shards in first-mention order for stable results.
  std::vector<std::string> shardOrder;
  std::map<std::string, std::vector<std::string>> tensorsByShard;
  for (const auto &[tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      return Status::error(indexPath + ": weight_map entry for tensor '" + tensor +
                           "' is not a file name");
    const std::string shardName = shard.get<std::string>();
    if (!isSafeRelativePath(shardName))
      return Status::error(indexPath + ": shard '" + shardName + "' (tensor '" + tensor +
                           "') is not a path inside the checkpoint directory");
    auto &names = tensorsByShard[shardName];
    if (names.empty())
      shardOrder.push_back(shardName);
    names.push_back(tensor);
  }

  SafetensorsCheckpoint checkpoint;
  const std::string directory = directoryOf(indexPath);
  for (const std::string &shardName : shardOrder) {
    const std::string shardPath = directory + "/" + shardName;
    if (kindOf(shardPath) != PathKind::File)
      return Status::error(indexPath + ": names shard '" + shardName + "' (for tensor '" +
                           tensorsByShard[shardName].front() + "'), which does not exist");
    DLM_RETURN_IF_ERROR(checkpoint.addFile(shardPath, &tensorsByShard[shardName]));
  }
  return checkpoint;
}

StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string &dirOrFile) {
  switch (kindOf(dirOrFile)) {
  case PathKind::Missing:
    return Status::error("checkpoint '" + dirOrFile + "' does not exist");
  case PathKind::Directory: {
    const std::string index = dirOrFile + "/model.safetensors.index.json";
    if (kindOf(index) == PathKind::File)
      return openIndex(index);
    const std::string single = dirOrFile + "/model.safetensors";
    if (kindOf(single) == PathKind::File)
      return open(single);
    return Status::error("checkpoint directory '" + dirOrFile +
                         "' has neither model.safetensors nor model.safetensors.index.json");
  }
  case PathKind::File:
    break;
  }
  if (endsWith(dirOrFile, ".index.json"))
    return openIndex(dirOrFile);
  SafetensorsCheckpoint checkpoint;
  DLM_RETURN_IF_ERROR(checkpoint.addFile(dirOrFile, nullptr));
  return checkpoint;
}

const TensorView *SafetensorsCheckpoint::find(std::string_view name) const {
  const auto it = indexByName_.find(std::string(name));
  return it == indexByName_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<const TensorView *> SafetensorsCheckpoint::load(std::string_view name) const {
  const TensorView *tensor = find(name);
  if (!tensor)
    return Status::error("tensor '" + std::string(name) + "' is not in the checkpoint");
  // FP8 E4M3 weights come with scales (the importer reads compressed-tensors' weight_scale).
  if (tensor->dtype == DType::F8_E5M2)
    return Status::error("not supported yet: FP8 E5M2 tensor '" + tensor->name + "'");
  return tensor;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> sorted;
  sorted.reserve(tensors_.size());
  for (const TensorView &tensor : tensors_)
    sorted.push_back(tensor.name);
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

std::vector<std::string> SafetensorsCheckpoint::shardFiles() const {
  std::vector<std::string> paths;
  for (const MappedFile &file : files_)
    paths.push_back(file.path());
  return paths;
}

} // namespace dlm::safetensors
