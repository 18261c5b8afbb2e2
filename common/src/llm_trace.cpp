// LLM request traces. See llm_trace.hpp.
#include "tessera/common/llm_trace.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "tessera/common/text.hpp"
#include "tessera/common/trace_csv.hpp"

namespace tessera {

namespace {

constexpr int64_t max_tokens = 1000000;
// Arrival times: seconds, finite, 0..max_arrival (30 years: BurstGPT's two months fit).
constexpr double max_arrival = 1e9;

status bad_line(int line, const std::string& what) {
  return status::invalid("trace line " + std::to_string(line) + ": " + what);
}

// The fields of one CSV line (RFC 4180 quotes: "a,b" and "" for a quote); false on an
// unterminated quote.
bool split_fields(std::string_view line, std::vector<std::string>& out) {
  out.clear();
  std::string cur;
  bool quoted = false, any = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c != '"') {
        cur += c;
      } else if (i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
    any = true;
  }
  if (quoted) return false;
  if (any) out.push_back(std::move(cur));
  return true;
}

std::string trim_lower(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  s = s.substr(b);
  // A UTF-8 byte-order mark before the first header.
  if (s.size() >= 3 && static_cast<unsigned char>(s[0]) == 0xEF && static_cast<unsigned char>(s[1]) == 0xBB &&
      static_cast<unsigned char>(s[2]) == 0xBF)
    s = s.substr(3);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool parse_number(std::string_view text, double& out) {
  std::string t(text);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  size_t b = 0;
  while (b < t.size() && std::isspace(static_cast<unsigned char>(t[b]))) ++b;
  if (b == t.size()) return false;
  // Decimal numbers only (strtod would also take hex, "inf" and "nan"); the whole field (an
  // embedded NUL is not an end).
  for (size_t i = b; i < t.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(t[i])) && std::string_view("+-.eE").find(t[i]) == std::string_view::npos)
      return false;
  char* stop = nullptr;
  out = std::strtod(t.c_str() + b, &stop);
  return stop != t.c_str() + b && stop == t.c_str() + t.size();
}

bool parse_arrival(std::string_view text, double& out) {
  return parse_number(text, out) && std::isfinite(out) && out >= 0 && out <= max_arrival;
}

// A count of tokens: an integer 0..max_tokens (a trailing ".0" allowed: spreadsheets write one).
bool parse_tokens(std::string_view text, int32_t& out) {
  double v = 0;
  if (!parse_number(text, v) || !std::isfinite(v) || v < 0 || v > double(max_tokens) || v != std::floor(v)) return false;
  out = static_cast<int32_t>(v);
  return true;
}

int column(const std::vector<std::string>& header, std::string_view name) {
  for (size_t i = 0; i < header.size(); ++i)
    if (trim_lower(header[i]) == name) return static_cast<int>(i);
  return -1;
}

// Columns of a public format: the arrival's, the prompt's and the output's.
struct layout {
  int time = -1, prompt = -1, output = -1;
  size_t width = 0;
};

result<llm_trace> parse_public(line_reader& lines, const layout& cols, const std::string& format) {
  llm_trace t;
  t.format = format;
  std::vector<std::string> f;
  for (std::string_view line; lines.next(line);) {
    const int n = lines.number();
    if (line.empty() || line.front() == '#') continue;
    if (!split_fields(line, f)) return bad_line(n, "unterminated quote");
    if (f.size() < cols.width)
      return bad_line(n, std::to_string(f.size()) + " fields; the header names " + std::to_string(cols.width));
    llm_trace_row r;
    r.line = n;
    const std::string& when = f[size_t(cols.time)];
    if (format == "azure") {
      if (!parse_utc_timestamp(when, r.arrival_seconds))
        return bad_line(n, "TIMESTAMP '" + when + "' is not YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]");
    } else if (!parse_arrival(when, r.arrival_seconds)) {
      return bad_line(n, "Timestamp '" + when + "' is not a number of seconds 0..1e9");
    }
    const char* pname = format == "azure" ? "ContextTokens" : "Request tokens";
    const char* oname = format == "azure" ? "GeneratedTokens" : "Response tokens";
    if (!parse_tokens(f[size_t(cols.prompt)], r.prompt_tokens))
      return bad_line(n, std::string(pname) + " '" + f[size_t(cols.prompt)] + "' is not a whole number 0.." +
                             std::to_string(max_tokens));
    if (!parse_tokens(f[size_t(cols.output)], r.output_tokens))
      return bad_line(n, std::string(oname) + " '" + f[size_t(cols.output)] + "' is not a whole number 0.." +
                             std::to_string(max_tokens));
    if (r.prompt_tokens == 0 || r.output_tokens == 0) {
      if (t.skipped++ == 0) t.first_skipped_line = n;
      continue;
    }
    t.rows.push_back(std::move(r));
  }
  if (t.rows.empty())
    return status::invalid("trace has no requests" +
                           (t.skipped ? " (" + std::to_string(t.skipped) + " rows with 0 tokens skipped)" : std::string()));
  auto by_time = [](const auto& a, const auto& b) { return a.arrival_seconds < b.arrival_seconds; };
  const auto [lo, hi] = std::minmax_element(t.rows.begin(), t.rows.end(), by_time);
  if (hi->arrival_seconds - lo->arrival_seconds > max_arrival) {
    // A span of more than 1e9 s: one end is wrong. Name the end farther from the median.
    std::vector<double> when;
    for (const auto& r : t.rows) when.push_back(r.arrival_seconds);
    std::nth_element(when.begin(), when.begin() + long(when.size() / 2), when.end());
    const double median = when[when.size() / 2];
    const auto& odd = median - lo->arrival_seconds > hi->arrival_seconds - median ? *lo : *hi;
    return bad_line(odd.line, "its time is " + std::to_string(std::abs(odd.arrival_seconds - median)) +
                                  " s from the trace's median row: a trace spans at most 1e9 s");
  }
  const double first = lo->arrival_seconds;
  for (auto& r : t.rows) r.arrival_seconds -= first;
  return t;
}

// tessera's three columns: arrival_seconds,prompt_tokens,output_tokens.
result<llm_trace> parse_own(line_reader& lines, int header_line) {
  llm_trace t;
  t.format = "tessera";
  std::vector<std::string> f;
  for (std::string_view line; lines.next(line);) {
    const int n = lines.number();
    if (line.empty() || line.front() == '#' || n == header_line) continue;
    if (!split_fields(line, f)) return bad_line(n, "unterminated quote");
    if (f.size() != 3) return bad_line(n, std::to_string(f.size()) + " fields; expected arrival_seconds,prompt_tokens,output_tokens");
    llm_trace_row r;
    r.line = n;
    if (!parse_arrival(f[0], r.arrival_seconds))
      return bad_line(n, "arrival_seconds '" + f[0] + "' is not a number of seconds 0..1e9");
    if (!parse_tokens(f[1], r.prompt_tokens) || r.prompt_tokens < 1)
      return bad_line(n, "prompt_tokens '" + f[1] + "' is not a whole number 1.." + std::to_string(max_tokens));
    if (!parse_tokens(f[2], r.output_tokens) || r.output_tokens < 1)
      return bad_line(n, "output_tokens '" + f[2] + "' is not a whole number 1.." + std::to_string(max_tokens));
    t.rows.push_back(std::move(r));
  }
  if (t.rows.empty()) return status::invalid("trace has no requests");
  return t;
}

}  // namespace

bool parse_utc_timestamp(std::string_view s, double& seconds) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  auto digits = [&](size_t at, size_t n, int& out) {
    if (at + n > s.size()) return false;
    out = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
      out = out * 10 + (s[i] - '0');
    }
    return true;
  };
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  if (s.size() < 19 || !digits(0, 4, y) || s[4] != '-' || !digits(5, 2, mo) || s[7] != '-' || !digits(8, 2, d) ||
      (s[10] != ' ' && s[10] != 'T') || !digits(11, 2, h) || s[13] != ':' || !digits(14, 2, mi) || s[16] != ':' ||
      !digits(17, 2, sec))
    return false;
  using namespace std::chrono;
  const year_month_day ymd{year{y}, month{unsigned(mo)}, day{unsigned(d)}};
  if (!ymd.ok() || h > 23 || mi > 59 || sec > 60) return false;
  size_t at = 19;
  double frac = 0;
  if (at < s.size() && s[at] == '.') {
    double scale = 0.1;
    size_t k = at + 1;
    for (; k < s.size() && std::isdigit(static_cast<unsigned char>(s[k])); ++k, scale /= 10) frac += (s[k] - '0') * scale;
    if (k == at + 1) return false;
    at = k;
  }
  int offset = 0;
  if (at < s.size()) {
    if (s[at] == 'Z' && at + 1 == s.size()) {
      at = s.size();
    } else if (s[at] == '+' || s[at] == '-') {
      int oh = 0, om = 0;
      if (at + 6 != s.size() || !digits(at + 1, 2, oh) || s[at + 3] != ':' || !digits(at + 4, 2, om) || oh > 23 || om > 59)
        return false;
      offset = (s[at] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
      at = s.size();
    } else {
      return false;
    }
  }
  const double days = double(sys_days(ymd).time_since_epoch().count());
  seconds = days * 86400.0 + h * 3600.0 + mi * 60.0 + sec + frac - offset;
  return true;
}

static result<llm_trace> parse_unsorted(std::string_view csv) {
  // The first line that is neither blank nor a comment tells the format.
  line_reader probe(csv);
  std::string_view first;
  int first_no = 0;
  for (std::string_view line; probe.next(line);)
    if (!line.empty() && line.front() != '#') {
      first = line;
      first_no = probe.number();
      break;
    }
  if (first_no == 0) return status::invalid("trace has no requests");
  std::vector<std::string> header;
  if (!split_fields(first, header)) return bad_line(first_no, "unterminated quote");
  layout cols;
  cols.width = header.size();
  if ((cols.time = column(header, "timestamp")) >= 0) {
    line_reader lines(csv);
    for (std::string_view skip; lines.number() < first_no && lines.next(skip);) {
    }
    if ((cols.prompt = column(header, "contexttokens")) >= 0 && (cols.output = column(header, "generatedtokens")) >= 0)
      return parse_public(lines, cols, "azure");
    if ((cols.prompt = column(header, "request tokens")) >= 0 && (cols.output = column(header, "response tokens")) >= 0)
      return parse_public(lines, cols, "burstgpt");
    return bad_line(first_no, "a TIMESTAMP header without ContextTokens,GeneratedTokens (Azure) or Request tokens,"
                              "Response tokens (BurstGPT)");
  }
  double ignored = 0;
  const bool has_header = !parse_number(header.empty() ? "" : header[0], ignored);
  std::string names;
  for (size_t i = 0; i < header.size(); ++i) names += (i ? "," : "") + trim_lower(header[i]);
  if (has_header && names != "arrival_seconds,prompt_tokens,output_tokens" && names != "arrival_seconds,text_or_length")
    return bad_line(first_no, "unknown header '" + std::string(first) +
                                  "'; known: arrival_seconds,prompt_tokens,output_tokens; arrival_seconds,text_or_length; "
                                  "TIMESTAMP,ContextTokens,GeneratedTokens (Azure); Timestamp,Model,Request tokens,"
                                  "Response tokens,Total tokens,Log Type (BurstGPT)");
  // Three columns (by the header, or a first row of three numbers): tessera's LLM format.
  bool three = false;
  if (has_header) {
    three = header.size() == 3;
  } else {
    double a = 0, b = 0;
    three = header.size() == 3 && parse_number(header[1], a) && parse_number(header[2], b);
  }
  if (three) {
    line_reader lines(csv);
    return parse_own(lines, has_header ? first_no : 0);
  }
  auto rows = parse_trace_csv(csv);
  if (!rows) return rows.error();
  llm_trace t;
  t.format = "tessera-text";
  for (auto& r : *rows) t.rows.push_back({r.arrival_seconds, r.length, 0, std::move(r.text), r.line});
  return t;
}

result<llm_trace> parse_llm_trace(std::string_view csv) {
  auto t = parse_unsorted(csv);
  if (t)
    std::stable_sort(t->rows.begin(), t->rows.end(),
                     [](const auto& a, const auto& b) { return a.arrival_seconds < b.arrival_seconds; });
  return t;
}

result<llm_trace> read_llm_trace(const std::string& path) {
  const auto text = read_file(path);
  if (!text) return status::not_found("cannot open trace file " + path);
  auto t = parse_llm_trace(*text);
  if (!t) return t.error().with_context(path);
  return t;
}

std::string format_llm_trace(const std::vector<llm_trace_row>& rows) {
  std::string out = "arrival_seconds,prompt_tokens,output_tokens\n";
  char buf[96];
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%.17g,%d,%d\n", r.arrival_seconds, r.prompt_tokens, r.output_tokens);
    out += buf;
  }
  return out;
}

}  // namespace tessera
