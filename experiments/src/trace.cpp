// Traces: Poisson arrivals over the seed's length mix, CSV in and out. See trace.hpp.
#include "tessera/experiment/trace.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include "tessera/models/batch.hpp"

namespace tessera::experiment {

namespace {

std::vector<double> poisson_arrivals(size_t n, double rate, uint64_t seed) {
  std::vector<double> out(n, 0.0);
  if (rate <= 0) return out;
  models::splitmix64 rng(seed ^ 0x5EEDA221BA15ull);
  double t = 0;
  for (size_t i = 0; i < n; ++i) {
    // 53-bit uniform in [0, 1); 1 - u is in (0, 1], so the log is finite.
    double u = static_cast<double>(rng.next() >> 11) * (1.0 / 9007199254740992.0);
    t += -std::log(1.0 - u) / rate;
    out[i] = t;
  }
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t b = s.find_first_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b);
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

result<trace> read_trace_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) return status::invalid(path + ": cannot open the trace; pass an existing CSV file");
  std::string line;
  if (!std::getline(in, line)) return status::invalid(path + ": empty; the first line must name arrival_s,length");
  int col_arrival = -1, col_length = -1, ncols = 0;
  {
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) {
      cell = trim(cell);
      if (cell == "arrival_s") col_arrival = ncols;
      if (cell == "length") col_length = ncols;
      ++ncols;
    }
  }
  if (col_arrival < 0 || col_length < 0)
    return status::invalid(path + ": the header must name the columns arrival_s and length");
  trace t;
  t.source = path;
  int lineno = 1;
  double last = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (trim(line).empty() || line[0] == '#') continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(trim(cell));
    if (static_cast<int>(cells.size()) <= std::max(col_arrival, col_length))
      return status::invalid(path + ":" + std::to_string(lineno) + ": too few columns");
    trace_entry e;
    try {
      e.arrival_s = std::stod(cells[col_arrival]);
      e.length = std::stoi(cells[col_length]);
    } catch (...) {
      return status::invalid(path + ":" + std::to_string(lineno) + ": arrival_s and length must be numbers");
    }
    if (e.length < 1 || e.arrival_s < 0 || !std::isfinite(e.arrival_s))
      return status::invalid(path + ":" + std::to_string(lineno) + ": length must be >= 1 and arrival_s >= 0");
    if (e.arrival_s < last)
      return status::invalid(path + ":" + std::to_string(lineno) + ": arrivals must be non-decreasing");
    last = e.arrival_s;
    t.entries.push_back(e);
  }
  if (t.entries.empty()) return status::invalid(path + ": no requests");
  return t;
}

status write_trace_csv(const trace& t, const std::string& path) {
  std::ofstream out(path);
  if (!out) return status::invalid(path + ": cannot write the trace");
  out << "arrival_s,length\n";
  char buf[64];
  for (const auto& e : t.entries) {
    std::snprintf(buf, sizeof buf, "%.17g,%d\n", e.arrival_s, e.length);
    out << buf;
  }
  return out ? ok_status() : status::internal(path + ": write failed");
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
