#include "tessera/common/units.hpp"

#include <cctype>
#include <cstdio>
#include <string>

namespace tessera {

result<uint64_t> parse_bytes(std::string_view text) {
  auto bad = [&] {
    return status::invalid("'" + std::string(text) + "' is not a byte count; write e.g. 624KiB, 64MiB or 2GiB");
  };
  size_t i = 0;
  uint64_t v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (v > (UINT64_MAX - 9) / 10) return bad();
    v = v * 10 + static_cast<uint64_t>(text[i] - '0');
    ++i;
  }
  if (i == 0) return bad();
  std::string suffix;
  for (; i < text.size(); ++i) suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  uint64_t mult = 1;
  if (suffix.empty() || suffix == "b") mult = 1;
  else if (suffix == "k" || suffix == "kb" || suffix == "kib") mult = 1ull << 10;
  else if (suffix == "m" || suffix == "mb" || suffix == "mib") mult = 1ull << 20;
  else if (suffix == "g" || suffix == "gb" || suffix == "gib") mult = 1ull << 30;
  else return bad();
  if (v > UINT64_MAX / mult) return bad();
  return v * mult;
}

std::string format_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace tessera
