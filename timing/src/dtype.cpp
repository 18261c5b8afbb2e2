#include "tessera/timing/dtype.hpp"

#include <string>

namespace tessera::timing {

std::string_view dtype_name(dtype t) { return t == dtype::fp16 ? "fp16" : "fp32"; }

result<dtype> parse_dtype(std::string_view s) {
  if (s == "fp16" || s == "half" || s == "float16") return dtype::fp16;
  if (s == "fp32" || s == "float" || s == "float32") return dtype::fp32;
  return status::invalid("unknown dtype '" + std::string(s) + "'; use fp16 or fp32");
}

}  // namespace tessera::timing
