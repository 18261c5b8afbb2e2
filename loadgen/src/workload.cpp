// Length mixes, texts, arrivals, traces and reports. See workload.hpp.
#include "tessera/loadgen/workload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tessera/common/trace_csv.hpp"

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

std::string make_text(int32_t tokens, splitmix64& rng) {
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
  splitmix64 rng(seed);
  std::vector<planned_request> plan;
  plan.reserve(static_cast<size_t>(std::max<int64_t>(0, n)));
  double t = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (rate > 0) t += rng.exponential(rate);
    const int32_t len = mix.draw(rng);
    plan.push_back({rate > 0 ? t : 0.0, len, make_text(len, rng)});
  }
  return plan;
}

namespace {

result<std::vector<planned_request>> plan_trace(std::vector<trace_row> rows, uint64_t seed) {
  splitmix64 rng(seed);
  std::vector<planned_request> out;
  out.reserve(rows.size());
  for (auto& row : rows) {
    planned_request r;
    r.arrival_seconds = row.arrival_seconds;
    if (row.text.empty()) {
      if (row.length < 2)
        return status::invalid("trace line " + std::to_string(row.line) + ": length " + std::to_string(row.length) +
                               " is below 2 ([CLS] and [SEP])");
      r.tokens = row.length;
      r.text = make_text(row.length, rng);
    } else {
      r.text = std::move(row.text);
    }
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.arrival_seconds < b.arrival_seconds;
  });
  return out;
}

}  // namespace

result<std::vector<planned_request>> parse_trace(std::string_view csv, uint64_t seed) {
  auto rows = parse_trace_csv(csv);
  if (!rows.ok()) return rows.error();
  return plan_trace(std::move(*rows), seed);
}

result<std::vector<planned_request>> read_trace(const std::string& path, uint64_t seed) {
  auto rows = read_trace_csv(path);
  if (!rows.ok()) return rows.error();
  auto r = plan_trace(std::move(*rows), seed);
  if (!r.ok()) return r.error().with_context(path);
  return r;
}

double nearest_rank(const std::vector<double>& sorted, double q) {
  size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, i == 0 ? 0 : i - 1)];
}

latency_summary summarize_ms(std::vector<double> v) {
  latency_summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return nearest_rank(v, q) * 1e3; };
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size()) * 1e3;
  s.max = v.back() * 1e3;
  return s;
}

void summarize(run_report& r, std::vector<double> lat) {
  r.ok = static_cast<int64_t>(lat.size());
  r.throughput = r.duration_seconds > 0 ? static_cast<double>(r.ok) / r.duration_seconds : 0;
  if (lat.empty()) return;
  const latency_summary s = summarize_ms(std::move(lat));
  r.p50_ms = s.p50;
  r.p90_ms = s.p90;
  r.p99_ms = s.p99;
  r.mean_ms = s.mean;
  r.max_ms = s.max;
}

namespace {

// Per backend: the value of `name{backend="B"...}` lines (the first label must be backend).
std::map<std::string, double> per_backend(const std::string& metrics, const std::string& name, const std::string& more = "") {
  std::map<std::string, double> out;
  const std::string head = name + "{backend=\"";
  for (size_t at = 0; (at = metrics.find(head, at)) != std::string::npos; at += head.size()) {
    if (at > 0 && metrics[at - 1] != '\n') continue;
    const size_t name_end = metrics.find('"', at + head.size());
    if (name_end == std::string::npos) break;
    const std::string backend = metrics.substr(at + head.size(), name_end - at - head.size());
    const size_t close = metrics.find('}', name_end);
    if (close == std::string::npos) break;
    if (metrics.substr(name_end + 1, close - name_end - 1) != more) continue;
    out[backend] = std::atof(metrics.c_str() + close + 1);
  }
  return out;
}

}  // namespace

void summarize_modelled(run_report& r, std::vector<double> modelled, const std::string& before, const std::string& after) {
  r.modelled_answers = static_cast<int64_t>(modelled.size());
  if (!modelled.empty()) {
    const latency_summary s = summarize_ms(std::move(modelled));
    r.modelled_p50_ms = s.p50;
    r.modelled_p90_ms = s.p90;
    r.modelled_p99_ms = s.p99;
    r.modelled_mean_ms = s.mean;
  }
  const auto was = per_backend(before, "tessera_backend_modelled_seconds");
  const auto now = per_backend(after, "tessera_backend_modelled_seconds");
  const auto up = per_backend(after, "tessera_backend_replicas", ",state=\"up\"");
  r.modelled_seconds = 0;
  for (const auto& [backend, seconds] : now) {
    const auto w = was.find(backend);
    const auto u = up.find(backend);
    const double replicas = u == up.end() || u->second < 1 ? 1.0 : u->second;
    r.modelled_seconds = std::max(r.modelled_seconds, (seconds - (w == was.end() ? 0.0 : w->second)) / replicas);
  }
  r.modelled_throughput = r.modelled_seconds > 0 ? static_cast<double>(r.ok) / r.modelled_seconds : 0;
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
  if (r.modelled_answers > 0) {
    o << "modelled ms  p50 " << format("%.4g", r.modelled_p50_ms) << "  p90 " << format("%.4g", r.modelled_p90_ms)
      << "  p99 " << format("%.4g", r.modelled_p99_ms) << "  mean " << format("%.4g", r.modelled_mean_ms) << "  ("
      << r.modelled_answers << " answers; a request's batch on the modelled device, no queueing)\n";
    if (r.modelled_seconds > 0)
      o << "modelled     " << format("%.1f", r.modelled_throughput) << " req/s over " << format("%.4g", r.modelled_seconds)
        << " s of modelled device time (wall " << format("%.1f", r.throughput) << " req/s over "
        << format("%.2f", r.duration_seconds) << " s)\n";
  }
  return o.str();
}

std::string csv_header() {
  return "mode,mix,offered_rate,connections,duration_s,sent,ok,errors,throughput_rps,p50_ms,"
         "p90_ms,p99_ms,mean_ms,max_ms,unsent,modelled_throughput_rps,modelled_p50_ms,modelled_p99_ms\n";
}

std::string to_csv_row(const run_report& r) {
  std::ostringstream o;
  o << r.mode << ',' << r.mix << ',' << format("%.3f", r.offered_rate) << ',' << r.connections
    << ',' << format("%.3f", r.duration_seconds) << ',' << r.sent << ',' << r.ok << ','
    << r.errors << ',' << format("%.3f", r.throughput) << ',' << format("%.3f", r.p50_ms) << ','
    << format("%.3f", r.p90_ms) << ',' << format("%.3f", r.p99_ms) << ','
    << format("%.3f", r.mean_ms) << ',' << format("%.3f", r.max_ms) << ',' << r.unsent << ','
    << format("%.3f", r.modelled_throughput) << ',' << format("%.9g", r.modelled_p50_ms) << ','
    << format("%.9g", r.modelled_p99_ms) << '\n';
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
    << format("%.3f", r.max_ms) << "},\"modelled\":{\"answers\":" << r.modelled_answers << ",\"seconds\":"
    << format("%.9g", r.modelled_seconds) << ",\"throughput_rps\":" << format("%.3f", r.modelled_throughput)
    << ",\"latency_ms\":{\"p50\":" << format("%.9g", r.modelled_p50_ms) << ",\"p90\":" << format("%.9g", r.modelled_p90_ms)
    << ",\"p99\":" << format("%.9g", r.modelled_p99_ms) << ",\"mean\":" << format("%.9g", r.modelled_mean_ms) << "}}}\n";
  return o.str();
}

}  // namespace tessera::loadgen
