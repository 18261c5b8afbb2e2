// What the benches share: the clocks they read, the machine's load printed beside every figure,
// and the seed workload packed into batches.
//
//   const double t0 = bench::now(), c0 = bench::cpu_now();
//   const auto load = bench::load_avg();  // {1, 5, 15 minutes}; -1 each when unknown
#pragma once

#include <stdlib.h>

#include <array>
#include <boost/program_options.hpp>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/common/cpu_time.hpp"
#include "tessera/common/status.hpp"
#include "tessera/models/batch.hpp"
#include "tessera/models/config.hpp"

namespace tessera::bench {

/// Seconds on the steady clock.
inline double now() { return wall_seconds(); }
/// This process's CPU time: on a shared machine, requests / (cpu / threads) estimates dedicated-core
/// speed (pessimistically: OpenMP spin-waits count as CPU time).
inline double cpu_now() { return self_cpu_seconds(); }

/// The 1-, 5- and 15-minute load averages; -1 each when they cannot be read.
inline std::array<double, 3> load_avg() {
  std::array<double, 3> l{0, 0, 0};
  if (::getloadavg(l.data(), 3) != 3) l = {-1, -1, -1};
  return l;
}
/// The 1-minute load average, -1 when it cannot be read.
inline double load_1min() { return load_avg()[0]; }

/// The seed's workload of `n` requests (`long_share` of them 200-512 tokens, seed 0) in arrival
/// order, packed greedily into batches of at most `budget` tokens and `max_seqs` sequences.
inline std::vector<models::packed_batch> seed_batches(const models::bert_config& cfg, int n, double long_share,
                                                      int budget, int max_seqs) {
  auto all = models::synthetic_batch(models::seed_workload(n, long_share, 0), cfg.vocab_size, 1);
  std::vector<models::packed_batch> out;
  int first = 0;
  while (first < all.num_seqs()) {
    int count = 0;
    int64_t tokens = 0;
    while (first + count < all.num_seqs() && count < max_seqs && tokens + all.seq_len(first + count) <= budget)
      tokens += all.seq_len(first + count++);
    out.push_back(all.slice(first, count));
    first += count;
  }
  return out;
}

/// Every batch index in [0, n) once, `replicas` threads pulling the next from a shared queue (as the
/// tile backend does when serving): `run(rep, i)` (a result) outside the lock, `take(rep, i, out)`
/// under it. The first error stops every thread and is returned.
template <class Run, class Take>
status run_on_replicas(int replicas, size_t n, Run run, Take take) {
  std::mutex mu;
  size_t next = 0;
  status failure;
  std::vector<std::thread> workers;
  for (int rep = 0; rep < replicas; ++rep)
    workers.emplace_back([&, rep] {
      for (;;) {
        size_t i;
        {
          std::lock_guard lk(mu);
          if (next >= n || !failure.ok()) return;
          i = next++;
        }
        auto out = run(rep, i);
        std::lock_guard lk(mu);
        if (!out) {
          failure = out.error();
          return;
        }
        take(rep, i, *out);
      }
    });
  for (auto& w : workers) w.join();
  return failure;
}

/// The seed workload's options, as the BERT benches take them.
struct workload_options {
  int requests = 256;
  double long_share = 0.4;
  int budget = 4096;   ///< tokens per packed batch
  int max_seqs = 64;   ///< sequences per batch

  /// --requests, --long-share, --token-budget, --max-seqs (defaults: the values above).
  void add_to(boost::program_options::options_description& opts) {
    namespace po = boost::program_options;
    opts.add_options()
        ("requests", po::value(&requests)->default_value(requests), "requests of the seed workload")
        ("long-share", po::value(&long_share)->default_value(long_share), "share of long (200-512 token) requests")
        ("token-budget", po::value(&budget)->default_value(budget), "tokens per packed batch")
        ("max-seqs", po::value(&max_seqs)->default_value(max_seqs), "sequences per batch");
  }
  /// Positive counts and a share within [0, 1].
  bool valid() const { return requests >= 1 && budget >= 1 && max_seqs >= 1 && long_share >= 0 && long_share <= 1; }
  std::vector<models::packed_batch> batches(const models::bert_config& cfg) const {
    return seed_batches(cfg, requests, long_share, budget, max_seqs);
  }
};

}  // namespace tessera::bench
