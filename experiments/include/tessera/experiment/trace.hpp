// tessera/experiment/trace.hpp: a request trace (arrival time + length per request) for runs on
// the virtual clock: generated from the seed's length mix with a Poisson arrival process, or
// read from a CSV file.
//
//   auto t = tessera::experiment::poisson_trace({.requests = 512, .rate = 300, .long_share = 0.4});
//   auto st = tessera::experiment::write_trace(t, "trace.csv");
//   auto back = tessera::experiment::read_trace("trace.csv");   // same entries
//
// CSV: tessera/common/trace_csv.hpp (the format tessera-loadgen replays), every row a length in
// tokens, arrivals non-decreasing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::experiment {

struct trace_entry {
  double arrival_s = 0;  ///< seconds since the start of the run (modelled time)
  int32_t length = 0;    ///< tokens, [CLS] and [SEP] included
};

struct trace {
  std::vector<trace_entry> entries;
  std::string source;  ///< "poisson:rate=300:long=0.4:seed=0" or the CSV path
  size_t size() const { return entries.size(); }
};

struct poisson_options {
  int requests = 256;
  double rate = 300;        ///< requests per modelled second; <= 0: every request arrives at 0
  double long_share = 0.4;  ///< the seed's mix: long U[200,512] with this probability, else U[8,64]
  uint64_t seed = 0;
};

/// Lengths from models::seed_workload(requests, long_share, seed); exponential inter-arrival
/// times from splitmix64(seed ^ constant). Identical on every machine for the same options.
trace poisson_trace(const poisson_options& o);

/// The same lengths with new arrival times (Poisson at `rate`, or all at 0 when rate <= 0).
trace with_poisson_arrivals(const trace& t, double rate, uint64_t seed);

result<trace> read_trace(const std::string& path);
status write_trace(const trace& t, const std::string& path);

/// Mean length and the share of requests longer than `threshold` tokens.
double mean_length(const trace& t);
double long_share(const trace& t, int32_t threshold = 128);

}  // namespace tessera::experiment
