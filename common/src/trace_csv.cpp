// The request-trace CSV. See trace_csv.hpp.
#include "tessera/common/trace_csv.hpp"
#include "tessera/common/text.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tessera {

namespace {

status bad_line(int line, const std::string& what) {
  return status::invalid("trace line " + std::to_string(line) + ": " + what);
}

}  // namespace

result<std::vector<trace_row>> parse_trace_csv(std::string_view csv) {
  std::vector<trace_row> out;
  line_reader lines(csv);
  for (std::string_view line; lines.next(line);) {
    const int line_no = lines.number();
    if (line.empty() || line.front() == '#') continue;
    const size_t comma = line.find(',');
    if (comma == std::string_view::npos) return bad_line(line_no, "expected arrival_seconds,text_or_length");
    const std::string first(line.substr(0, comma));
    std::string_view rest = line.substr(comma + 1);
    char* stop = nullptr;
    const double arrival = std::strtod(first.c_str(), &stop);
    if (stop == first.c_str() || *stop != '\0') {
      if (out.empty() && line_no == 1) continue;  // a header line
      return bad_line(line_no, "arrival '" + first + "' is not a number of seconds");
    }
    if (!std::isfinite(arrival) || arrival < 0) return bad_line(line_no, "arrival must be a finite number >= 0");
    trace_row r;
    r.arrival_seconds = arrival;
    r.line = line_no;
    if (!rest.empty() && rest.front() == '"') {
      bool closed = false;
      for (size_t i = 1; i < rest.size(); ++i) {
        if (rest[i] != '"') {
          r.text += rest[i];
        } else if (i + 1 < rest.size() && rest[i + 1] == '"') {
          r.text += '"';
          ++i;
        } else {
          closed = true;
          break;
        }
      }
      if (!closed) return bad_line(line_no, "unterminated quote");
    } else {
      int32_t len = 0;
      auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), len);
      if (ec == std::errc() && p == rest.data() + rest.size()) {
        if (len < 1 || len > 100000)
          return bad_line(line_no, "length " + std::to_string(len) + " out of range (1..100000)");
        r.length = len;
      } else {
        r.text = std::string(rest);
      }
    }
    if (r.length == 0 && r.text.empty()) return bad_line(line_no, "empty text");
    out.push_back(std::move(r));
  }
  if (out.empty()) return status::invalid("trace has no requests");
  return out;
}

result<std::vector<trace_row>> read_trace_csv(const std::string& path) {
  const auto text = read_file(path);
  if (!text) return status::not_found("cannot open trace file " + path);
  auto r = parse_trace_csv(*text);
  if (!r.ok()) return r.error().with_context(path);
  return r;
}

std::string format_trace_csv(const std::vector<trace_row>& rows) {
  std::string out = "arrival_seconds,text_or_length\n";
  char buf[64];
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%.17g,", r.arrival_seconds);
    out += buf;
    if (r.text.empty()) {
      out += std::to_string(r.length);
    } else {
      out += '"';
      for (char c : r.text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
      out += '"';
    }
    out += '\n';
  }
  return out;
}

status write_trace_csv(const std::vector<trace_row>& rows, const std::string& path) {
  std::ofstream out(path);
  if (!out) return status::invalid(path + ": cannot write the trace");
  out << format_trace_csv(rows);
  out.flush();
  return out ? ok_status() : status::io_error(path + ": write failed");
}

}  // namespace tessera
