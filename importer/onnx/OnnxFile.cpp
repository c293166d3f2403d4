#include "importer/onnx/OnnxFile.h"

#include "onnx/onnx_pb.h" // ONNX_API, then onnx-ml.pb.h under ONNX_ML
#include "onnx/shape_inference/implementation.h"
#include "support/ShapeText.h"

#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

namespace dlm::importer::onnx {
namespace proto = ::onnx;
namespace {

std::string tensorLabel(const proto::TensorProto &tensor) {
  return tensor.name().empty() ? std::string("a constant tensor")
                               : "tensor '" + tensor.name() + "'";
}

// Appends `value` as `size` little-endian bytes (the host is little-endian, as ONNX's raw_data).
template <typename T> void appendAs(std::vector<uint8_t> &out, T value) {
  const auto *bytes = reinterpret_cast<const uint8_t *>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

// Typed fields → raw bytes. Which field holds which type is fixed by onnx.proto: int32_data
// carries every type of 16 bits or less (f16/bf16 as their bit patterns), uint64_data the
// unsigned 32/64-bit types.
StatusOr<std::vector<uint8_t>> repack(const proto::TensorProto &t) {
  std::vector<uint8_t> out;
  using T = proto::TensorProto;
  switch (t.data_type()) {
  case T::FLOAT:
    for (float v : t.float_data())
      appendAs(out, v);
    return out;
  case T::DOUBLE:
    for (double v : t.double_data())
      appendAs(out, v);
    return out;
  case T::INT64:
    for (int64_t v : t.int64_data())
      appendAs(out, v);
    return out;
  case T::INT32:
    for (int32_t v : t.int32_data())
      appendAs(out, v);
    return out;
  case T::INT16:
  case T::UINT16:
  case T::FLOAT16:
  case T::BFLOAT16:
    for (int32_t v : t.int32_data())
      appendAs(out, static_cast<uint16_t>(v));
    return out;
  case T::INT8:
  case T::UINT8:
  case T::BOOL:
    for (int32_t v : t.int32_data())
      appendAs(out, static_cast<uint8_t>(v));
    return out;
  case T::UINT32:
    for (uint64_t v : t.uint64_data())
      appendAs(out, static_cast<uint32_t>(v));
    return out;
  case T::UINT64:
    for (uint64_t v : t.uint64_data())
      appendAs(out, v);
    return out;
  default:
    return Status::error(tensorLabel(t) + " has element type " + dataTypeName(t.data_type()) +
                         ", which dlm cannot read");
  }
}

// One element of `bytes` at `index` as a double (f16/bf16 widened exactly).
double elementAsDouble(const TensorBytes &bytes, int64_t index) {
  const uint8_t *p = bytes.data + index * dataTypeSize(bytes.dataType);
  auto load = [p](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  using T = proto::TensorProto;
  switch (bytes.dataType) {
  case T::FLOAT:
    return load(float{});
  case T::DOUBLE:
    return load(double{});
  case T::BFLOAT16: {
    uint32_t bits = uint32_t(load(uint16_t{})) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
  case T::FLOAT16: {
    uint16_t h = load(uint16_t{});
    int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exponent == 0)
      return sign * std::ldexp(mantissa, -24);
    if (exponent == 31)
      return mantissa ? NAN : sign * INFINITY;
    return sign * std::ldexp(mantissa + 1024, exponent - 25);
  }
  case T::INT64:
    return double(load(int64_t{}));
  case T::INT32:
    return load(int32_t{});
  case T::INT16:
    return load(int16_t{});
  case T::INT8:
    return load(int8_t{});
  case T::UINT8:
  case T::BOOL:
    return load(uint8_t{});
  case T::UINT16:
    return load(uint16_t{});
  case T::UINT32:
    return load(uint32_t{});
  case T::UINT64:
    return double(load(uint64_t{}));
  default:
    return NAN;
  }
}

} // namespace

int64_t TensorBytes::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string dataTypeName(int32_t dataType) {
  if (proto::TensorProto::DataType_IsValid(dataType))
    return proto::TensorProto::DataType_Name(static_cast<proto::TensorProto::DataType>(dataType));
  return "type " + std::to_string(dataType);
}

size_t dataTypeSize(int32_t dataType) {
  using T = proto::TensorProto;
  switch (dataType) {
  case T::DOUBLE:
  case T::INT64:
  case T::UINT64:
    return 8;
  case T::FLOAT:
  case T::INT32:
  case T::UINT32:
    return 4;
  case T::FLOAT16:
  case T::BFLOAT16:
  case T::INT16:
  case T::UINT16:
    return 2;
  case T::INT8:
  case T::UINT8:
  case T::BOOL:
    return 1;
  default:
    return 0;
  }
}

OnnxFile::~OnnxFile() = default;

StatusOr<std::unique_ptr<OnnxFile>> OnnxFile::open(const std::string &path) {
  std::unique_ptr<OnnxFile> file(new OnnxFile());
  file->path_ = path;
  std::filesystem::path directory = std::filesystem::path(path).parent_path();
  file->directory_ = directory.empty() ? std::string(".") : directory.string();

  std::error_code error;
  uintmax_t size = std::filesystem::file_size(path, error);
  if (error)
    return Status::error("onnx: '" + path + "': cannot open: " + error.message());
  if (size > uintmax_t(INT_MAX))
    return Status::error("onnx: '" + path +
                         "' is larger than 2 GiB; store the weights as external data");
  // Parsed from a stream, not a mapping: the file's bytes and the parsed initializers would
  // otherwise both be resident at once (twice the weights at the peak).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error("onnx: '" + path + "': cannot open: " + std::strerror(errno));
  file->model_ = std::make_unique<proto::ModelProto>();
  bool parsed;
  {
    google::protobuf::io::FileInputStream stream(fd);
    stream.SetCloseOnDelete(true);
    parsed = file->model_->ParseFromZeroCopyStream(&stream);
  }
  if (!parsed || file->model_->ir_version() <= 0 || !file->model_->has_graph())
    return Status::error("onnx: '" + path +
                         "' is not an ONNX model (it does not parse as a ModelProto with a "
                         "graph)");

  for (const proto::TensorProto &tensor : file->model_->graph().initializer())
    file->initializers_[tensor.name()] = &tensor;

  // Types of intermediate values: torch.onnx writes few, and the mechanical form wants one per
  // value. Inference is best effort (unknown ops are skipped), so nothing here is an error; it
  // only runs on a graph whose values are all defined in order and whose nodes all have an
  // output, as libonnx does not check either (it crashes on a Split of no outputs; phase 1 and
  // ShapeFolding name the problems instead). Data propagation stays off: it crashes libonnx 1.12 on
  // malformed graphs and adds little for torch.onnx exports.
  if (file->definesValuesInOrder() && file->everyNodeHasAnOutput()) {
    try {
      proto::shape_inference::InferShapes(*file->model_, proto::OpSchemaRegistry::Instance(),
                                          proto::ShapeInferenceOptions(false, 0, false));
    } catch (const std::exception &) {
    }
  }
  return std::move(file);
}

const proto::GraphProto &OnnxFile::graph() const { return model_->graph(); }

bool OnnxFile::everyNodeHasAnOutput() const {
  for (const proto::NodeProto &node : graph().node())
    if (node.output_size() == 0)
      return false;
  return true;
}

bool OnnxFile::definesValuesInOrder() const {
  std::set<std::string> defined;
  for (const proto::ValueInfoProto &input : graph().input())
    defined.insert(input.name());
  for (const proto::NodeProto &node : graph().node()) {
    for (const std::string &input : node.input())
      if (!input.empty() && !defined.count(input) && !initializers_.count(input))
        return false;
    defined.insert(node.output().begin(), node.output().end());
  }
  return true;
}

int64_t OnnxFile::opsetVersion(const std::string &domain) const {
  auto isDefault = [](const std::string &d) { return d.empty() || d == "ai.onnx"; };
  for (const proto::OperatorSetIdProto &opset : model_->opset_import())
    if (opset.domain() == domain || (isDefault(opset.domain()) && isDefault(domain)))
      return opset.version();
  return -1;
}

const proto::TensorProto *OnnxFile::initializer(const std::string &name) const {
  auto it = initializers_.find(name);
  return it == initializers_.end() ? nullptr : it->second;
}

Status checkTensorShape(const proto::TensorProto &tensor) {
  std::vector<int64_t> shape(tensor.dims().begin(), tensor.dims().end());
  for (int64_t d : shape)
    if (d < 0)
      return Status::error("onnx: " + tensorLabel(tensor) + " has a negative dimension " +
                           shapeText(shape));
  std::optional<int64_t> count = checkedElementCount(shape);
  if (!count)
    return Status::error("onnx: " + tensorLabel(tensor) + " has shape " + shapeText(shape) +
                         ", whose element count overflows int64");
  uint64_t byteSize;
  if (__builtin_mul_overflow(uint64_t(*count), dataTypeSize(tensor.data_type()), &byteSize))
    return Status::error("onnx: " + tensorLabel(tensor) + " has shape " + shapeText(shape) +
                         ", whose byte size overflows 64 bits");
  return Status::ok();
}

StatusOr<TensorBytes> OnnxFile::bytes(const proto::TensorProto &tensor) {
  TensorBytes result;
  result.dataType = tensor.data_type();
  result.shape.assign(tensor.dims().begin(), tensor.dims().end());
  size_t elementSize = dataTypeSize(result.dataType);
  if (elementSize == 0)
    return Status::error("onnx: " + tensorLabel(tensor) + " has element type " +
                         dataTypeName(result.dataType) + ", which dlm cannot read");
  DLM_RETURN_IF_ERROR(checkTensorShape(tensor));

  if (tensor.data_location() == proto::TensorProto::EXTERNAL) {
    auto external = externalBytes(tensor, result);
    if (!external)
      return external;
    result = *external;
  } else if (tensor.has_raw_data()) {
    result.data = reinterpret_cast<const uint8_t *>(tensor.raw_data().data());
    result.size = tensor.raw_data().size();
  } else {
    auto it = repacked_.find(&tensor);
    if (it == repacked_.end()) {
      auto packed = repack(tensor);
      if (!packed)
        return packed.status().withContext("onnx");
      it = repacked_.emplace(&tensor, std::move(*packed)).first;
    }
    result.data = it->second.data();
    result.size = it->second.size();
  }
  uint64_t expected = uint64_t(result.numElements()) * elementSize; // checkTensorShape: no wrap
  if (result.size != expected)
    return Status::error("onnx: " + tensorLabel(tensor) + " holds " +
                         std::to_string(result.size) + " bytes, but shape " +
                         shapeText(result.shape) + " of " + dataTypeName(result.dataType) +
                         " needs " + std::to_string(expected));
  return result;
}

StatusOr<TensorBytes> OnnxFile::externalBytes(const proto::TensorProto &tensor,
                                              TensorBytes result) {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const proto::StringStringEntryProto &entry : tensor.external_data()) {
    auto number = [&](uint64_t &out) -> bool {
      char *end = nullptr;
      out = std::strtoull(entry.value().c_str(), &end, 10);
      return !entry.value().empty() && *end == '\0';
    };
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset" || entry.key() == "length") {
      uint64_t value;
      if (!number(value))
        return Status::error("onnx: " + tensorLabel(tensor) + ": external data " + entry.key() +
                             " '" + entry.value() + "' is not a number");
      if (entry.key() == "offset")
        offset = value;
      else
        length = value;
    }
  }
  std::filesystem::path relative(location);
  bool escapes = location.empty() || relative.is_absolute();
  for (const auto &part : relative)
    escapes = escapes || part == "..";
  if (escapes)
    return Status::error("onnx: " + tensorLabel(tensor) + ": external data location '" +
                         location + "' must be a relative path inside '" + directory_ + "'");
  std::string file = (std::filesystem::path(directory_) / relative).string();
  auto it = externalFiles_.find(file);
  if (it == externalFiles_.end()) {
    auto mapped = MappedFile::open(file);
    if (!mapped)
      return mapped.status().withContext("onnx: external data of " + tensorLabel(tensor) + " ('" +
                                         file + "')");
    it = externalFiles_.emplace(file, std::move(*mapped)).first;
  }
  uint64_t size = length ? *length : (it->second.size() > offset ? it->second.size() - offset : 0);
  if (offset > it->second.size() || size > it->second.size() - offset)
    return Status::error("onnx: " + tensorLabel(tensor) + ": external data [" +
                         std::to_string(offset) + ", " + std::to_string(offset + size) +
                         ") ends past the end of '" + file + "' (" +
                         std::to_string(it->second.size()) + " bytes)");
  result.data = it->second.data() + offset;
  result.size = size;
  return result;
}

void OnnxFile::releaseBytes(const std::string &name) {
  for (proto::TensorProto &tensor : *model_->mutable_graph()->mutable_initializer()) {
    if (tensor.name() != name || tensor.data_location() == proto::TensorProto::EXTERNAL)
      continue;
    std::string().swap(*tensor.mutable_raw_data()); // clear() would keep the capacity
    repacked_.erase(&tensor);
  }
}

StatusOr<std::vector<double>> OnnxFile::floats(const proto::TensorProto &tensor) {
  auto b = bytes(tensor);
  if (!b)
    return b.status();
  std::vector<double> values(b->numElements());
  for (int64_t i = 0; i < int64_t(values.size()); ++i)
    values[i] = elementAsDouble(*b, i);
  return values;
}

StatusOr<std::vector<double>> OnnxFile::floats(const proto::TensorProto &tensor, int64_t first,
                                               int64_t count) {
  auto b = bytes(tensor);
  if (!b)
    return b.status();
  if (first < 0 || count < 0 || first > b->numElements() || count > b->numElements() - first)
    return Status::error("onnx: tensor '" + tensor.name() + "': elements [" +
                         std::to_string(first) + ", +" + std::to_string(count) +
                         ") are outside its " + std::to_string(b->numElements()));
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i)
    values[i] = elementAsDouble(*b, first + i);
  return values;
}

StatusOr<std::vector<int64_t>> OnnxFile::ints(const proto::TensorProto &tensor) {
  auto b = bytes(tensor);
  if (!b)
    return b.status();
  std::vector<int64_t> values(b->numElements());
  for (int64_t i = 0; i < int64_t(values.size()); ++i) {
    if (b->dataType == proto::TensorProto::INT64 || b->dataType == proto::TensorProto::UINT64)
      std::memcpy(&values[i], b->data + 8 * i, 8); // exact beyond 2^53
    else
      values[i] = int64_t(elementAsDouble(*b, i));
  }
  return values;
}

} // namespace dlm::importer::onnx
