// tessera/timing/dtype.hpp: the element types the timing model distinguishes.
//
// Usage:
//   auto t = tessera::timing::parse_dtype("fp16");   // result<dtype>
//   size_t b = tessera::timing::dtype_bytes(*t);      // 2
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tessera/common/status.hpp"

namespace tessera::timing {

/// Arithmetic type of a kernel: selects the peak (AMP / tensor core) and the bytes per element.
enum class dtype : uint8_t { fp16, fp32 };

/// "fp16" or "fp32".
std::string_view dtype_name(dtype t);
/// Parses "fp16" / "fp32" (also "half" / "float"); anything else is invalid_argument.
result<dtype> parse_dtype(std::string_view s);
/// 2 for fp16, 4 for fp32.
inline size_t dtype_bytes(dtype t) { return t == dtype::fp16 ? 2 : 4; }

}  // namespace tessera::timing
