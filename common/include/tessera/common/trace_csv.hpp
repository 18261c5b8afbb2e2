// tessera/common/trace_csv.hpp: the request-trace CSV that tessera-loadgen replays and
// tessera-experiment reads and writes. One request per line, `arrival_seconds,text_or_length`:
// arrival in seconds from the start of the run (finite, >= 0), then either a length in tokens
// ([CLS]/[SEP] included, 1..100000) or a text (the rest of the line; in double quotes when it
// holds a comma or a quote, "" for a quote). An optional header line (the first line, when its
// first field is not a number), blank lines and `#` comments are skipped. Errors name the line.
//
//   auto rows = tessera::read_trace_csv("trace.csv");
//   auto st = tessera::write_trace_csv({{.arrival_seconds = 0.5, .length = 32}}, "out.csv");
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera {

struct trace_row {
  double arrival_seconds = 0;
  int32_t length = 0;  ///< tokens; 0 when the row gives a text
  std::string text;    ///< empty when the row gives a length
  int line = 0;        ///< the line it was read from (1-based), for the caller's errors
};

/// The rows in file order.
result<std::vector<trace_row>> parse_trace_csv(std::string_view csv);
/// parse_trace_csv of a file; a file that cannot be read is not_found, errors carry the path.
result<std::vector<trace_row>> read_trace_csv(const std::string& path);
/// A header line, then one line per row (arrivals with 17 significant digits: they read back
/// bit-identical; texts quoted).
std::string format_trace_csv(const std::vector<trace_row>& rows);
status write_trace_csv(const std::vector<trace_row>& rows, const std::string& path);

}  // namespace tessera
