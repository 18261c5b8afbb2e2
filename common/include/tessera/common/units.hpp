// tessera/common/units.hpp: human-friendly byte sizes: parsed from command lines ("624KiB",
// "64MiB", "1G") and written in messages ("1.50 MiB").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/common/status.hpp"

namespace tessera {

/// Parses a byte count: a number with an optional suffix B, K/KB/KiB, M/MB/MiB, G/GB/GiB
/// (all binary: K = 1024). "0" is allowed; negatives, junk and overflow are errors.
result<uint64_t> parse_bytes(std::string_view text);

/// "512 B", "624.0 KiB", "3.00 MiB", "1.50 GiB".
std::string format_bytes(uint64_t bytes);

}  // namespace tessera
