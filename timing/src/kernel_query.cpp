#include "tessera/timing/kernel_query.hpp"

namespace tessera::timing {

result<int64_t> kernel_query::get(std::string_view key) const {
  auto it = params.find(key);
  if (it == params.end())
    return status::invalid("kernel '" + kernel + "' needs parameter '" + std::string(key) + "' (query: " +
                           to_string() + ")");
  if (it->second <= 0)
    return status::invalid("kernel '" + kernel + "' parameter '" + std::string(key) + "' must be > 0, got " +
                           std::to_string(it->second));
  return it->second;
}

result<int64_t> kernel_query::get_or(std::string_view key, int64_t fallback) const {
  if (params.find(key) == params.end()) return fallback;
  return get(key);
}

std::string kernel_query::to_string() const {
  std::string s = kernel + "{";
  bool first = true;
  for (const auto& [k, v] : params) {
    s += (first ? "" : ",") + k + "=" + std::to_string(v);
    first = false;
  }
  if (!seq_lens.empty()) {
    s += std::string(first ? "" : ",") + "seq_lens=[";
    for (size_t i = 0; i < seq_lens.size(); ++i) {
      if (i > 0) s += ',';
      s += std::to_string(seq_lens[i]);
    }
    s += "]";
  }
  return s + "} " + std::string(dtype_name(type));
}

}  // namespace tessera::timing
