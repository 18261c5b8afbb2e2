// tessera/models/safetensors.hpp: read and write the safetensors format.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the raw little-endian data. Reading memory-maps the file; F32 tensors are used in place
// (no copy), F16/BF16 are converted to fp32 copies.
//
//   auto f = tessera::models::map_safetensors("model/model.safetensors");
//   if (!f) return f.error();
//   const tensor_view& w = f->tensors.at("classifier.weight");
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/weights.hpp"

namespace tessera::models {

struct safetensors_file {
  std::map<std::string, tensor_view> tensors;  ///< fp32 views, names as stored
  std::shared_ptr<const void> storage;         ///< keeps the mapping (and conversions) alive
};

/// Memory-maps and validates a safetensors file: header bounds, JSON, dtypes, shapes against byte
/// ranges, ranges inside the file. Errors name the file and the tensor.
result<safetensors_file> map_safetensors(const std::string& path);

/// Writes fp32 tensors (name -> view) as a safetensors file.
status write_safetensors(const std::string& path, const std::map<std::string, tensor_view>& tensors);

}  // namespace tessera::models
