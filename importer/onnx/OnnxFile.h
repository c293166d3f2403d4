// A model.onnx read and checked: the parsed ModelProto (with ONNX shape inference applied), its
// initializers by name, and the bytes of any tensor, whether they sit in the protobuf (raw_data or
// typed fields) or in external data files beside the model (mapped, never copied). No MLIR here:
// the importer's two phases read the graph through this class.
#pragma once

#include "support/MappedFile.h"
#include "support/Status.h"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace onnx {
class GraphProto;
class ModelProto;
class TensorProto;
} // namespace onnx

namespace dlm::importer::onnx {

// The bytes of one tensor in ONNX's little-endian layout, valid while the OnnxFile lives.
struct TensorBytes {
  int32_t dataType = 0; // onnx::TensorProto::DataType
  std::vector<int64_t> shape;
  const uint8_t *data = nullptr;
  size_t size = 0;
  // Cannot overflow: OnnxFile::bytes refuses shapes whose element count does not fit in int64.
  int64_t numElements() const;
};

// The product of `dims` (any range of int64), or nullopt when a dimension is negative or a
// partial product, taken in dimension order, overflows int64. Dims come from the file, so a
// plain product could wrap to a small number that passes every size check after it.
template <typename Dims> std::optional<int64_t> checkedElementCount(const Dims &dims) {
  int64_t count = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(count, d, &count))
      return std::nullopt;
  return count;
}

// Refuses a tensor with a negative dimension, or whose element count (int64) or byte size
// (uint64) overflows, naming the tensor and its shape.
Status checkTensorShape(const ::onnx::TensorProto &tensor);

// "FLOAT", "INT64", ... as ONNX spells its element types.
std::string dataTypeName(int32_t dataType);
// Bytes per element; 0 for types the importer cannot hold (strings, complex, ...).
size_t dataTypeSize(int32_t dataType);

class OnnxFile {
public:
  // Named errors: unreadable file, not a protobuf ModelProto (or one without a graph).
  static StatusOr<std::unique_ptr<OnnxFile>> open(const std::string &path);
  ~OnnxFile();

  const std::string &path() const { return path_; }
  // The directory holding model.onnx: config.json, tokenizer.json and external data live there.
  const std::string &directory() const { return directory_; }
  const ::onnx::ModelProto &model() const { return *model_; }
  const ::onnx::GraphProto &graph() const;

  // The opset the model imports for `domain` ("" and "ai.onnx" are the default domain), or -1.
  int64_t opsetVersion(const std::string &domain) const;
  // Null when the graph has no initializer of this name.
  const ::onnx::TensorProto *initializer(const std::string &name) const;

  // The bytes of `tensor`: raw_data, typed fields (repacked once into an owned buffer) or
  // external data (mapped once per file). Errors name the tensor and the problem: unsupported
  // element type, size that does not match the shape, external file missing or too short.
  StatusOr<TensorBytes> bytes(const ::onnx::TensorProto &tensor);
  // Frees the bytes initializer `name` holds inside the protobuf, once the import holds a copy
  // of its own (a weight it transposed): a later read of it fails by name instead of using them.
  // Bytes in external data are mapped, not held, and stay.
  void releaseBytes(const std::string &name);

  // The elements of a numeric tensor, converted (for the small constants patterns read).
  StatusOr<std::vector<double>> floats(const ::onnx::TensorProto &tensor);
  // Elements [first, first + count) only (rows of a table too large to read whole).
  StatusOr<std::vector<double>> floats(const ::onnx::TensorProto &tensor, int64_t first,
                                       int64_t count);
  StatusOr<std::vector<int64_t>> ints(const ::onnx::TensorProto &tensor);

private:
  OnnxFile() = default;
  // Every node input is a graph input, an initializer or an output of an earlier node.
  bool definesValuesInOrder() const;
  bool everyNodeHasAnOutput() const;
  StatusOr<TensorBytes> externalBytes(const ::onnx::TensorProto &tensor, TensorBytes result);

  std::string path_;
  std::string directory_;
  std::unique_ptr<::onnx::ModelProto> model_;
  std::map<std::string, const ::onnx::TensorProto *> initializers_;
  std::map<std::string, MappedFile> externalFiles_;
  // Tensors stored in typed fields (float_data, int64_data, ...), repacked as raw bytes.
  std::map<const ::onnx::TensorProto *, std::vector<uint8_t>> repacked_;
};

} // namespace dlm::importer::onnx
