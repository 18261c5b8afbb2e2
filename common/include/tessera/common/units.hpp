// tessera/common/units.hpp: human-friendly sizes on command lines ("624KiB", "64MiB", "1G").
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/common/status.hpp"

namespace tessera {

/// Parses a byte count: a number with an optional suffix B, K/KB/KiB, M/MB/MiB, G/GB/GiB
/// (all binary: K = 1024). "0" is allowed; negatives, junk and overflow are errors.
result<uint64_t> parse_bytes(std::string_view text);

}  // namespace tessera
