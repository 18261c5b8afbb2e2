// Length mixes, texts, arrivals, traces and reports. See workload.hpp.
#include "tessera/loadgen/workload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace tessera::loadgen {

namespace {

// Common English words, each one WordPiece in bert-base-uncased and in tessera's built-in vocab.
constexpr const char* words[] = {
    "the",    "of",     "and",   "to",     "in",      "is",    "that",   "for",    "it",
    "as",     "was",    "with",  "be",     "by",      "on",    "not",    "he",     "this",
    "are",    "or",     "his",   "from",   "at",      "which", "but",    "have",   "an",
    "they",   "you",    "were",  "her",    "she",     "there", "been",   "one",    "all",
    "we",     "their",  "has",   "would",  "when",    "if",    "so",     "no",     "will",
    "more",   "out",    "up",    "into",   "do",      "any",   "your",   "what",   "some",
    "can",    "about",  "them",  "him",    "than",    "then",  "only",   "its",    "also",
    "two",    "time",   "could", "new",    "first",   "after", "like",   "may",    "other",
    "over",   "such",   "people", "very",  "how",     "most",  "our",    "these",  "just",
    "used",   "made",   "through", "between", "many", "well",  "before", "must",   "back",
    "where",  "those",  "much",  "year",   "day",     "make",  "world",  "good",   "way",
    "because", "each",  "while", "part",   "same",    "under", "house",  "word",   "work",
    "school", "state",  "city",  "government", "company", "system", "number", "group", "problem",
    "fact",   "hand",   "place", "case",   "week",    "point", "home",   "water",  "room",
    "mother", "area",   "money", "story",  "night",   "month", "right",  "study",  "book",
    "job",    "business", "issue", "side", "kind",    "head",  "service", "friend", "father",
    "power",  "hour",   "game",  "line",   "end",     "member", "law",   "car",    "name",
    "president", "team", "minute", "idea", "body",    "information", "face", "others", "level",
    "office", "door",   "health", "person", "art",    "war",   "history", "party", "result",
    "change", "morning", "reason", "research", "girl"};
constexpr size_t num_words = sizeof(words) / sizeof(words[0]);

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

uint64_t rng64::next() {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double rng64::unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
int64_t rng64::uniform(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
}
double rng64::exponential(double rate) { return -std::log(1.0 - unit()) / rate; }

result<length_mix> mix_preset(std::string_view name) {
  length_mix m;
  m.name = std::string(name);
  auto number_after = [&](std::string_view prefix, int& out) {
    if (name.substr(0, prefix.size()) != prefix) return false;
    auto rest = name.substr(prefix.size());
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), out);
    return ec == std::errc() && p == rest.data() + rest.size();
  };
  int v = 0;
  if (name == "short") return m;
  if (name == "long") {
    m.long_share = 1.0;
    return m;
  }
  if (number_after("seed-", v) && v >= 0 && v <= 100) {
    m.long_share = v / 100.0;
    return m;
  }
  if (number_after("fixed-", v) && v >= 2 && v <= 8192) {
    m.short_min = m.short_max = v;
    return m;
  }
  return status::invalid("unknown length mix '" + std::string(name) +
                         "'; use seed-0, seed-40, seed-<percent long>, short, long or fixed-<tokens>");
}

std::string make_text(int32_t tokens, rng64& rng) {
  std::string s;
  int32_t n = std::max<int32_t>(1, tokens - 2);
  s.reserve(static_cast<size_t>(n) * 6);
  for (int32_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += words[rng.next() % num_words];
  }
  return s;
}

std::vector<planned_request> synthesize(const length_mix& mix, int64_t n, double rate,
                                        uint64_t seed) {
  rng64 rng(seed);
  std::vector<planned_request> plan;
  plan.reserve(static_cast<size_t>(std::max<int64_t>(0, n)));
  double t = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (rate > 0) t += rng.exponential(rate);
    bool is_long = rng.unit() < mix.long_share;
    int32_t len = static_cast<int32_t>(is_long ? rng.uniform(mix.long_min, mix.long_max)
                                               : rng.uniform(mix.short_min, mix.short_max));
    plan.push_back({rate > 0 ? t : 0.0, len, make_text(len, rng)});
  }
  return plan;
}

result<std::vector<planned_request>> parse_trace(std::string_view csv, uint64_t seed) {
  rng64 rng(seed);
  std::vector<planned_request> out;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t end = csv.find('\n', pos);
    if (end == std::string_view::npos) end = csv.size();
    std::string_view line = csv.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    size_t comma = line.find(',');
    if (comma == std::string_view::npos)
      return status::invalid("trace line " + std::to_string(line_no) +
                             ": expected arrival_seconds,text_or_length");
    std::string first(line.substr(0, comma));
    std::string_view rest = line.substr(comma + 1);
    char* stop = nullptr;
    double arrival = std::strtod(first.c_str(), &stop);
    if (stop == first.c_str() || *stop != '\0') {
      if (out.empty() && line_no == 1) continue;  // a header line
      return status::invalid("trace line " + std::to_string(line_no) + ": arrival '" + first +
                             "' is not a number of seconds");
    }
    if (arrival < 0)
      return status::invalid("trace line " + std::to_string(line_no) + ": negative arrival");
    planned_request r;
    r.arrival_seconds = arrival;
    if (!rest.empty() && rest.front() == '"') {
      std::string text;
      size_t i = 1;
      bool closed = false;
      for (; i < rest.size(); ++i) {
        if (rest[i] == '"') {
          if (i + 1 < rest.size() && rest[i + 1] == '"') {
            text += '"';
            ++i;
          } else {
            closed = true;
            break;
          }
        } else {
          text += rest[i];
        }
      }
      if (!closed)
        return status::invalid("trace line " + std::to_string(line_no) + ": unterminated quote");
      r.text = std::move(text);
    } else {
      int32_t len = 0;
      auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), len);
      if (ec == std::errc() && p == rest.data() + rest.size()) {
        if (len < 2 || len > 100000)
          return status::invalid("trace line " + std::to_string(line_no) + ": length " +
                                 std::to_string(len) + " out of range (2..100000)");
        r.tokens = len;
        r.text = make_text(len, rng);
      } else {
        r.text = std::string(rest);
      }
    }
    if (r.text.empty())
      return status::invalid("trace line " + std::to_string(line_no) + ": empty text");
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.arrival_seconds < b.arrival_seconds;
  });
  if (out.empty()) return status::invalid("trace has no requests");
  return out;
}

result<std::vector<planned_request>> read_trace(const std::string& path, uint64_t seed) {
  std::ifstream in(path);
  if (!in) return status::not_found("cannot open trace file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_trace(ss.str(), seed);
  if (!r) return r.error().with_context(path);
  return r;
}

double nearest_rank(const std::vector<double>& sorted, double q) {
  size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, i == 0 ? 0 : i - 1)];
}

void summarize(run_report& r, std::vector<double> lat) {
  r.ok = static_cast<int64_t>(lat.size());
  r.throughput = r.duration_seconds > 0 ? static_cast<double>(r.ok) / r.duration_seconds : 0;
  if (lat.empty()) return;
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) { return nearest_rank(lat, p) * 1e3; };
  r.p50_ms = pct(0.50);
  r.p90_ms = pct(0.90);
  r.p99_ms = pct(0.99);
  double sum = 0;
  for (double v : lat) sum += v;
  r.mean_ms = sum / static_cast<double>(lat.size()) * 1e3;
  r.max_ms = lat.back() * 1e3;
}

std::string to_table(const run_report& r) {
  std::ostringstream o;
  o << "mode         " << r.mode << (r.mode == "open" ? " (" + format("%.1f", r.offered_rate) + " req/s offered)" : "")
    << "\nmix          " << r.mix << "\nconnections  " << r.connections
    << "\nduration     " << format("%.2f", r.duration_seconds) << " s"
    << "\nsent         " << r.sent;
  if (r.unsent) o << "\nunsent       " << r.unsent << " (due, but every connection was busy at the end)";
  o << "\nok           " << r.ok << "\nerrors       " << r.errors;
  for (const auto& [k, n] : r.errors_by_kind) o << "\n  " << k << ": " << n;
  o << "\nthroughput   " << format("%.1f", r.throughput) << " req/s"
    << "\nlatency ms   p50 " << format("%.2f", r.p50_ms) << "  p90 " << format("%.2f", r.p90_ms)
    << "  p99 " << format("%.2f", r.p99_ms) << "  mean " << format("%.2f", r.mean_ms) << "  max "
    << format("%.2f", r.max_ms) << "\n";
  return o.str();
}

std::string csv_header() {
  return "mode,mix,offered_rate,connections,duration_s,sent,ok,errors,throughput_rps,p50_ms,"
         "p90_ms,p99_ms,mean_ms,max_ms,unsent\n";
}

std::string to_csv_row(const run_report& r) {
  std::ostringstream o;
  o << r.mode << ',' << r.mix << ',' << format("%.3f", r.offered_rate) << ',' << r.connections
    << ',' << format("%.3f", r.duration_seconds) << ',' << r.sent << ',' << r.ok << ','
    << r.errors << ',' << format("%.3f", r.throughput) << ',' << format("%.3f", r.p50_ms) << ','
    << format("%.3f", r.p90_ms) << ',' << format("%.3f", r.p99_ms) << ','
    << format("%.3f", r.mean_ms) << ',' << format("%.3f", r.max_ms) << ',' << r.unsent << '\n';
  return o.str();
}

std::string to_json(const run_report& r) {
  std::ostringstream o;
  o << "{\"mode\":\"" << r.mode << "\",\"mix\":\"" << r.mix << "\",\"offered_rate\":"
    << format("%.3f", r.offered_rate) << ",\"connections\":" << r.connections
    << ",\"duration_s\":" << format("%.3f", r.duration_seconds) << ",\"sent\":" << r.sent
    << ",\"unsent\":" << r.unsent << ",\"ok\":" << r.ok << ",\"errors\":" << r.errors
    << ",\"errors_by_kind\":{";
  bool first = true;
  for (const auto& [k, n] : r.errors_by_kind) {
    o << (first ? "" : ",") << '"' << k << "\":" << n;
    first = false;
  }
  o << "},\"throughput_rps\":" << format("%.3f", r.throughput) << ",\"latency_ms\":{\"p50\":"
    << format("%.3f", r.p50_ms) << ",\"p90\":" << format("%.3f", r.p90_ms) << ",\"p99\":"
    << format("%.3f", r.p99_ms) << ",\"mean\":" << format("%.3f", r.mean_ms) << ",\"max\":"
    << format("%.3f", r.max_ms) << "}}\n";
  return o.str();
}

}  // namespace tessera::loadgen
