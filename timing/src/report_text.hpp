// How timing's reports (llm_compare, llm_experiment, llm_search, llm_system) print numbers.
#pragma once

#include <cstdio>
#include <string>

namespace tessera::timing::detail {

/// `v` printed with the printf format `f` (4 significant digits unless told).
inline std::string num(double v, const char* f = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// Dollars: "$1234", "$12.3", "$0.0456"; "-" for a negative (unknown) amount.
inline std::string money(double v) { return v < 0 ? "-" : "$" + num(v, v >= 100 ? "%.0f" : "%.3g"); }

}  // namespace tessera::timing::detail
