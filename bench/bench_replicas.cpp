// tessera-bench-replicas: wall latency of batches on R replicas of one tile group driven at
// once (one submitting thread per replica), so contention on the host's control path shows.
// Prints p50/p99 per batch and batches/s, as a table and as CSV.
//
//   tessera-bench-replicas                          # bert-tiny, plan 4,1,1, 4 threads, 400 batches
//   tessera-bench-replicas --model bert-mini --batches 800 --csv out.csv
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "tessera/common/log.hpp"
#include "tessera/host/tile_model.hpp"
#include "tessera/models/batch.hpp"
#include "tessera/models/model.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera;
using clk = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string model_name = "bert-tiny", csv;
  int replicas = 4, batches = 400, seqs = 4, length = 32;
  po::options_description opts("tessera-bench-replicas: per-batch wall latency of R replicas driven at once");
  opts.add_options()("help,h", "show this help")
      ("model", po::value(&model_name)->default_value(model_name), "BERT preset")
      ("replicas", po::value(&replicas)->default_value(replicas), "replicas (one tile each, plan R,1,1)")
      ("batches", po::value(&batches)->default_value(batches), "batches in all (spread over the replicas)")
      ("sequences", po::value(&seqs)->default_value(seqs), "sequences per batch")
      ("length", po::value(&length)->default_value(length), "tokens per sequence")
      ("csv", po::value(&csv), "also write the row as CSV to FILE");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-bench-replicas", argc, argv, opts, vm)) return *done;
  if (replicas < 1 || batches < replicas || seqs < 1 || length < 2) {
    std::cerr << "tessera-bench-replicas: need --replicas >= 1, --batches >= replicas, --sequences >= 1, --length >= 2\n";
    return 2;
  }
  log::set_level(log::level::warn);
  auto model = models::load_model(model_name, 0);
  if (!model) return std::cerr << model.error().to_string() << "\n", 1;
  host::placement_request req;
  req.tiles = replicas;
  req.tile_memory = 512ull << 20;
  req.forced = host::plan{replicas, 1, 1};
  auto d = host::deploy_bert(*model, req);
  if (!d.ok()) return std::cerr << d.error().to_string() << "\n", 1;
  auto& deployed = d->model;
  std::vector<int> lengths(static_cast<size_t>(seqs), length);
  auto batch = models::synthetic_batch(lengths, model->config.vocab_size, 7);
  for (int r = 0; r < replicas; ++r) (void)deployed->run(r, batch);  // warm-up

  std::vector<std::vector<double>> lat(static_cast<size_t>(replicas));
  std::vector<std::thread> threads;
  const auto t0 = clk::now();
  for (int r = 0; r < replicas; ++r)
    threads.emplace_back([&, r] {
      for (int i = r; i < batches; i += replicas) {
        auto s = clk::now();
        auto out = deployed->run(r, batch);
        if (!out) {
          std::cerr << "batch failed: " << out.error().to_string() << "\n";
          std::exit(1);
        }
        lat[static_cast<size_t>(r)].push_back(std::chrono::duration<double, std::milli>(clk::now() - s).count());
      }
    });
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(clk::now() - t0).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))]; };
  std::printf("%-10s %8s %8s %10s %10s %10s %12s\n", "model", "replicas", "batches", "p50 ms", "p99 ms", "max ms",
              "batches/s");
  std::printf("%-10s %8d %8zu %10.3f %10.3f %10.3f %12.1f\n", model_name.c_str(), replicas, all.size(), pct(0.50),
              pct(0.99), all.back(), all.size() / secs);
  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "model,replicas,batches,sequences,length,p50_ms,p99_ms,max_ms,batches_per_s\n"
      << model_name << ',' << replicas << ',' << all.size() << ',' << seqs << ',' << length << ',' << pct(0.5) << ','
      << pct(0.99) << ',' << all.back() << ',' << all.size() / secs << "\n";
  }
  d->group->shutdown();
  return 0;
}
