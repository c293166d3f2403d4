// Safetensors as the importer reads a checkpoint's: the bytes as one .safetensors file (the header
// parser, then the mapped checkpoint and its tensor views) and as a sharded checkpoint's
// model.safetensors.index.json, beside two small valid shards the index can name.
#include "fuzz/FuzzSupport.h"
#include "importer/safetensors/Safetensors.h"
#include "importer/safetensors/SafetensorsHeader.h"

#include <cstring>

namespace {

using dlm::safetensors::SafetensorsCheckpoint;

// A valid one-tensor file: header length, header, 8 bytes of data (two F32 values).
std::string tinyShard(const std::string &tensor) {
  const std::string header = R"({"__metadata__":{"format":"pt"},")" + tensor +
                             R"(":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string file(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(file.data(), &length, sizeof(length)); // little-endian on every host dlm runs on
  return file + header + std::string(8, '\x01');
}

const std::filesystem::path &directory() { return dlm::fuzz::scratchDirectory("safetensors"); }

// Touches every view the checkpoint hands out, as the importer's binding does.
void useCheckpoint(const SafetensorsCheckpoint &checkpoint) {
  for (const std::string &name : checkpoint.names()) {
    auto tensor = checkpoint.load(name);
    if (!tensor)
      continue;
    const dlm::safetensors::TensorView &view = **tensor;
    (void)view.numElements();
    if (view.byteSize > 0) // the first and last byte: ASan sees a view outside the mapping
      (void)(view.data[0] + view.data[view.byteSize - 1]);
  }
  (void)checkpoint.metadata();
  (void)checkpoint.shardFiles();
}

void openAs(const std::string &fileName, std::string_view bytes) {
  const std::filesystem::path path = directory() / fileName;
  if (!dlm::fuzz::writeFile(path, bytes))
    return;
  auto checkpoint = SafetensorsCheckpoint::open(path.string());
  if (dlm::fuzz::succeeded(fileName, checkpoint))
    useCheckpoint(*checkpoint);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // The names the committed index seeds use.
  dlm::fuzz::writeFile(directory() / "model-00001-of-00002.safetensors", tinyShard("a"));
  dlm::fuzz::writeFile(directory() / "model-00002-of-00002.safetensors", tinyShard("b"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dlm::fuzz::succeeded("parseSafetensorsHeader",
                       dlm::safetensors::parseSafetensorsHeader(data, size));
  openAs("input.safetensors", dlm::fuzz::asText(data, size));
  openAs("model.safetensors.index.json", dlm::fuzz::asText(data, size));
  return 0;
}
