// A minimal .npy reader for the reference fixtures the tests compare with (made by numpy's
// np.save): version 1.0/2.0, little-endian <i4, <f4 or |u1, C order.
#pragma once

#include "support/Status.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace dlm::testing {

struct NpyArray {
  std::string descr;
  std::vector<int64_t> shape;
  std::vector<char> bytes;

  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  // Element i; a replay that diverged may ask past the end, which fails the test instead of
  // reading out of bounds.
  template <typename T> T at(int64_t i) const {
    T value{};
    if (i < 0 || (i + 1) * static_cast<int64_t>(sizeof(T)) > static_cast<int64_t>(bytes.size())) {
      ADD_FAILURE() << "element " << i << " is outside a " << bytes.size() << "-byte array";
      return value;
    }
    std::memcpy(&value, bytes.data() + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return value;
  }
};

// The value of `key` in the header's dict literal, up to the next ',' or ')' ('shape': its tuple).
inline std::string headerField(const std::string &header, const std::string &key) {
  const size_t at = header.find("'" + key + "':");
  if (at == std::string::npos)
    return "";
  size_t begin = at + key.size() + 3;
  while (begin < header.size() && header[begin] == ' ')
    ++begin;
  const size_t end = header.find(header[begin] == '(' ? ')' : ',', begin);
  return header.substr(begin, end == std::string::npos ? std::string::npos : end - begin + 1);
}

inline StatusOr<NpyArray> readNpy(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return Status::error("cannot open " + path);
  char magic[8];
  if (!file.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return Status::error(path + ": not a .npy file");
  uint32_t headerLength = 0;
  if (magic[6] == 1) {
    uint16_t length = 0;
    file.read(reinterpret_cast<char *>(&length), 2);
    headerLength = length;
  } else {
    file.read(reinterpret_cast<char *>(&headerLength), 4);
  }
  std::string header(headerLength, '\0');
  file.read(header.data(), headerLength);
  NpyArray array;
  const std::string descr = headerField(header, "descr");
  array.descr = descr.size() >= 5 ? descr.substr(1, 3) : "";
  if (headerField(header, "fortran_order").rfind("False", 0) != 0)
    return Status::error(path + ": not C order");
  const std::string shape = headerField(header, "shape");
  for (size_t i = 1; i < shape.size();) {
    if (!std::isdigit(static_cast<unsigned char>(shape[i]))) {
      ++i;
      continue;
    }
    size_t used = 0;
    array.shape.push_back(std::stoll(shape.substr(i), &used));
    i += used;
  }
  const int64_t width = array.descr == "|u1" ? 1 : 4;
  if (array.descr != "<i4" && array.descr != "<f4" && array.descr != "|u1")
    return Status::error(path + ": unsupported dtype '" + array.descr + "'");
  array.bytes.resize(static_cast<size_t>(array.size() * width));
  if (!file.read(array.bytes.data(), static_cast<std::streamsize>(array.bytes.size())))
    return Status::error(path + ": truncated");
  return array;
}

} // namespace dlm::testing
