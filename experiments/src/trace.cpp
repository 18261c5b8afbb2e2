// Traces: Poisson arrivals over the seed's length mix, CSV in and out. See trace.hpp.
#include "tessera/experiment/trace.hpp"

#include <sstream>

#include "tessera/common/random.hpp"
#include "tessera/common/trace_csv.hpp"
#include "tessera/models/batch.hpp"

namespace tessera::experiment {

namespace {

std::vector<double> poisson_arrivals(size_t n, double rate, uint64_t seed) {
  std::vector<double> out(n, 0.0);
  if (rate <= 0) return out;
  splitmix64 rng(seed ^ 0x5EEDA221BA15ull);
  double t = 0;
  for (size_t i = 0; i < n; ++i) out[i] = t += rng.exponential(rate);
  return out;
}

}  // namespace

trace poisson_trace(const poisson_options& o) {
  trace t;
  auto lens = models::seed_workload(o.requests, o.long_share, o.seed);
  auto arr = poisson_arrivals(lens.size(), o.rate, o.seed);
  t.entries.reserve(lens.size());
  for (size_t i = 0; i < lens.size(); ++i) t.entries.push_back({arr[i], static_cast<int32_t>(lens[i])});
  std::ostringstream src;
  src << "poisson:rate=" << o.rate << ":long=" << o.long_share << ":seed=" << o.seed;
  t.source = src.str();
  return t;
}

trace with_poisson_arrivals(const trace& t, double rate, uint64_t seed) {
  trace out = t;
  auto arr = poisson_arrivals(t.size(), rate, seed);
  for (size_t i = 0; i < arr.size(); ++i) out.entries[i].arrival_s = arr[i];
  std::ostringstream src;
  src << t.source << "@rate=" << rate;
  out.source = src.str();
  return out;
}

result<trace> read_trace(const std::string& path) {
  auto rows = tessera::read_trace_csv(path);
  if (!rows.ok()) return rows.error();
  trace t;
  t.source = path;
  double last = 0;
  for (const auto& r : *rows) {
    const std::string at = path + ": trace line " + std::to_string(r.line) + ": ";
    if (r.length == 0) return status::invalid(at + "a text; an experiment's trace gives lengths in tokens");
    if (r.arrival_seconds < last) return status::invalid(at + "arrivals must be non-decreasing");
    last = r.arrival_seconds;
    t.entries.push_back({r.arrival_seconds, r.length});
  }
  return t;
}

status write_trace(const trace& t, const std::string& path) {
  std::vector<trace_row> rows;
  rows.reserve(t.size());
  for (const auto& e : t.entries) rows.push_back({.arrival_seconds = e.arrival_s, .length = e.length});
  return tessera::write_trace_csv(rows, path);
}

double mean_length(const trace& t) {
  if (t.entries.empty()) return 0;
  double s = 0;
  for (const auto& e : t.entries) s += e.length;
  return s / static_cast<double>(t.entries.size());
}

double long_share(const trace& t, int32_t threshold) {
  if (t.entries.empty()) return 0;
  size_t n = 0;
  for (const auto& e : t.entries) n += e.length > threshold;
  return static_cast<double>(n) / static_cast<double>(t.entries.size());
}

}  // namespace tessera::experiment
