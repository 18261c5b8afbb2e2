// tessera-bench-placement: BERT on N real tile processes against the single-process packed
// forward, on the seed's workload (256 requests, 60% U[8,64] + 40% U[200,512] tokens, seed 0),
// wall clock, all in one run so the ratios compare like with like.
//
//   tessera-bench-placement                       # bert-base, N = 1 2 4 8, ~6 minutes here
//   tessera-bench-placement --requests 64 --model bert-small --csv out.csv
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "tessera/common/log.hpp"
#include "tessera/host/profiler.hpp"
#include "tessera/host/tile_model.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera;
using clk = std::chrono::steady_clock;

namespace {

// Requests in arrival order, packed greedily into batches within the token budget.
std::vector<models::packed_batch> make_batches(const models::bert_config& cfg, int n, double long_share, int budget,
                                               int max_seqs) {
  auto lengths = models::seed_workload(n, long_share, 0);
  auto all = models::synthetic_batch(lengths, cfg.vocab_size, 1);
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

struct row {
  std::string what;
  int tiles = 0;
  std::string plan;
  double seconds = 0;
  double req_per_s = 0;
  double ratio = 0;
  double bytes_per_request = 0;
  int64_t supersteps = 0;
  double max_diff = 0;
};

}  // namespace

int main(int argc, char** argv) {
  log::init_from_env();
  std::string model_name = "bert-base", csv, trace, tiles_list = "1,2,4,8";
  int requests = 256, budget = 4096, max_seqs = 64;
  double long_share = 0.4;
  bool tensor_parallel_too = true;
  po::options_description opts("tessera-bench-placement: BERT on N tile processes vs the single-process forward\nOptions");
  opts.add_options()("help,h", "show this help")
      ("model", po::value(&model_name)->default_value(model_name), "preset or Hugging Face folder")
      ("requests", po::value(&requests)->default_value(requests), "requests of the seed workload")
      ("long-share", po::value(&long_share)->default_value(long_share), "share of long (200-512 token) requests")
      ("token-budget", po::value(&budget)->default_value(budget), "tokens per packed batch")
      ("max-seqs", po::value(&max_seqs)->default_value(max_seqs), "sequences per batch")
      ("tiles", po::value(&tiles_list)->default_value(tiles_list), "tile counts, comma-separated")
      ("auto-only", "only the automatic plan per tile count (else also R=1 S=1 W=N)")
      ("csv", po::value(&csv), "also write the table as CSV")
      ("trace", po::value(&trace), "Chrome trace per configuration: FILE becomes FILE.<tiles>-<auto|tp>.json (profile on stderr)");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-bench-placement", argc, argv, opts, vm)) return *done;
  tensor_parallel_too = !vm.count("auto-only");
  if (requests < 1 || budget < 1 || max_seqs < 1 || long_share < 0 || long_share > 1)
    return std::cerr << "tessera-bench-placement: --requests, --token-budget and --max-seqs must be positive and "
                        "--long-share within [0, 1]\n", 2;
  std::vector<int> tile_counts;
  for (size_t p = 0; p < tiles_list.size();) {
    size_t c = tiles_list.find(',', p);
    if (c == std::string::npos) c = tiles_list.size();
    const std::string item = tiles_list.substr(p, c - p);
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n < 1 || n > 4096)
      return std::cerr << "tessera-bench-placement: --tiles takes tile counts 1..4096 separated by commas, not '"
                       << tiles_list << "'\n", 2;
    tile_counts.push_back(static_cast<int>(n));
    p = c + 1;
  }
  auto model = models::load_model(model_name);
  if (!model) return std::cerr << model.error().to_string() << "\n", 2;
  const auto batches = make_batches(model->config, requests, long_share, budget, max_seqs);
  int64_t tokens = 0;
  for (const auto& b : batches) tokens += b.num_tokens();
  std::fprintf(stderr, "%s: %d requests, %lld tokens, %zu batches of <= %d tokens\n", model_name.c_str(), requests,
               (long long)tokens, batches.size(), budget);

  std::vector<row> rows;
  // The single-process packed forward on both cores: the baseline.
  models::set_num_threads(2);
  std::vector<std::vector<float>> reference;
  (void)models::reference_forward(*model, batches.front());  // warm-up: oneDNN builds its kernels once
  auto t0 = clk::now();
  for (const auto& b : batches) reference.push_back(models::reference_forward(*model, b));
  const double base = std::chrono::duration<double>(clk::now() - t0).count();
  rows.push_back({"single process, packed, 2 threads", 1, "-", base, requests / base, 1.0, 0, 0, 0});
  std::fprintf(stderr, "single process: %.1f s, %.2f req/s\n", base, requests / base);

  for (int n : tile_counts) {
    std::vector<std::optional<host::plan>> plans{std::nullopt};
    if (tensor_parallel_too && n > 1) plans.push_back(host::plan{1, 1, n, 1});
    for (const auto& forced : plans) {
      host::placement_request req;
      req.tiles = n;
      req.tile_memory = 2ull << 30;
      req.token_budget = budget;
      req.max_sequences = max_seqs;
      req.forced = forced;
      auto d = host::deploy_bert(*model, req);
      if (!d.ok()) return std::cerr << d.error().to_string() << "\n", 1;
      auto& deployed = d->model;
      const std::string plan_text = deployed->compiled().chosen.to_string();
      const int replicas = deployed->compiled().chosen.replicas;
      for (int r = 0; r < replicas; ++r) (void)deployed->run(r, batches.front());  // warm-up, untimed
      std::unique_ptr<host::profiler> prof;
      if (!trace.empty()) {
        auto p = host::profiler::create(deployed->compiled(), {.tile_memory = req.tile_memory});
        if (!p) return std::cerr << p.error().to_string() << "\n", 2;
        prof = std::move(*p);
      }
      // Replicas pull batches from a shared queue, as the tile backend does when serving.
      std::mutex mu;
      size_t next = 0;
      uint64_t bytes = 0;
      int64_t supersteps = 0;
      double worst = 0;
      status failure;
      auto t1 = clk::now();
      std::vector<std::thread> workers;
      for (int r = 0; r < replicas; ++r)
        workers.emplace_back([&, r] {
          for (;;) {
            size_t i;
            {
              std::lock_guard lk(mu);
              if (next >= batches.size() || !failure.ok()) return;
              i = next++;
            }
            const double t0 = prof ? prof->now() : 0;
            auto out = deployed->run(r, batches[i]);
            if (prof && out)
              if (auto st = prof->record(r, batches[i], *out, t0); !st.ok())
                std::fprintf(stderr, "trace: batch %zu left out: %s\n", i, st.to_string().c_str());
            std::lock_guard lk(mu);
            if (!out) {
              failure = out.error();
              return;
            }
            bytes += out->bytes_exchanged;
            supersteps = out->supersteps;
            for (size_t k = 0; k < reference[i].size(); ++k)
              worst = std::max(worst, double(std::abs(reference[i][k] - out->logits[k])));
          }
        });
      for (auto& w : workers) w.join();
      const double secs = std::chrono::duration<double>(clk::now() - t1).count();
      if (!failure.ok()) return std::cerr << failure.to_string() << "\n", 1;
      rows.push_back({forced ? "tiles, tensor parallel" : "tiles, automatic plan", n, plan_text, secs, requests / secs,
                      base / secs, double(bytes) / requests, supersteps, worst});
      std::fprintf(stderr, "%d tiles %s: %.1f s, %.2f req/s (%.2fx), max |diff| %.1e\n", n, plan_text.c_str(), secs,
                   requests / secs, base / secs, worst);
      if (prof) {
        const std::string file = trace + "." + std::to_string(n) + (forced ? "-tp" : "-auto") + ".json";
        if (auto st = prof->write_trace(file); !st.ok()) return std::cerr << st.to_string() << "\n", 1;
        std::fprintf(stderr, "%strace: %s\n", prof->summary().c_str(), file.c_str());
      }
      d->group->shutdown();
    }
  }
  std::printf("\n| configuration | tiles | plan | seconds | req/s | vs single process | exchanged bytes/request | supersteps/batch | max abs logit diff |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows)
    std::printf("| %s | %d | %s | %.1f | %.2f | %.2fx | %.0f | %lld | %.1e |\n", r.what.c_str(), r.tiles, r.plan.c_str(),
                r.seconds, r.req_per_s, r.ratio, r.bytes_per_request, (long long)r.supersteps, r.max_diff);
  std::printf("\ntargets: N=2 >= 0.85x and N=8 >= 0.60x the single-process throughput (automatic plan)\n");
  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "configuration,tiles,plan,seconds,req_per_s,ratio,bytes_per_request,supersteps_per_batch,max_abs_diff\n";
    for (const auto& r : rows)
      f << '"' << r.what << "\"," << r.tiles << ',' << r.plan << ',' << r.seconds << ',' << r.req_per_s << ',' << r.ratio
        << ',' << r.bytes_per_request << ',' << r.supersteps << ',' << r.max_diff << '\n';
  }
  return 0;
}
