// A read-only memory mapping of a weights file (safetensors, GGUF), and IEEE half to float.
// Internal to tessera_models.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::models::detail {

/// The mapping lives as long as the tensors that point into it (a shared_ptr held by the file).
struct mapped_file {
  void* addr = MAP_FAILED;
  size_t size = 0;
  std::vector<std::vector<float>> converted;  ///< fp32 copies of tensors stored in other types
  mapped_file() = default;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file();
};

/// Maps `path` read-only. A file shorter than `min_size` bytes is invalid: "<path>: <too_small>".
result<std::shared_ptr<mapped_file>> map_file(const std::string& path, size_t min_size, const std::string& too_small);

/// IEEE 754 binary16 to float, exactly (subnormals, infinities and NaN kept).
float half_to_float(uint16_t h);
/// float to IEEE binary16, rounded to nearest even (overflow to infinity, NaN kept a NaN).
uint16_t float_to_half(float f);

}  // namespace tessera::models::detail
