// tessera-bench-placement: BERT on N real tile processes against the single-process packed
// forward, on the seed's workload (256 requests, 60% U[8,64] + 40% U[200,512] tokens, seed 0),
// in fp32, bf16 and/or int8, all in one run so the ratios compare like with like.
//
// Rows, per --dtype:
//   single process   the packed forward in this process on T threads, for T = 1 (per-core speed)
//                    and T = min(N, cores) for every N measured below (the baseline of N tiles);
//   tiles, auto      N tiles (--tiles) under the automatic plan;
//   tiles, tp        W tiles (--tp) forced tensor-parallel, plan R=1 S=1 W=W.
// Each tile runs 1 compute thread, so N tiles run N threads: beyond the core count they share
// cores, and the baseline of N tiles is the single process on min(N, cores) threads (all cores
// either way). Each row gives requests/s of wall time and per CPU-second (this process and its
// tiles: what dedicated cores would give on a shared machine), its ratio to its baseline (same
// dtype), bytes exchanged per request (hidden rows and partial sums apart: bf16 sends hidden
// rows in bf16, partial sums stay f32; int8 sends both in f32), the tiles' own counters per request (compute, waiting for
// slices, waiting at barriers; wall time summed over tiles, so a tile descheduled by a busy core
// counts) and this process's CPU while they ran, and the targets for the automatic plan
// (bf16 and int8: N = 2 >= 0.9x, N = 8 >= 0.7x; fp32: 0.85x and 0.60x) marked met or missed.
// The automatic plan is ranked with the barrier measured on the tiles started for it
// (deploy_bert with measure_barrier: start_ranked, as tessera-host does for decoders), printed per
// row (ranking barrier); --barrier-us X ranks with X instead, for plans that do not vary with load.
// Output: a Markdown table, RESULT lines (key=value), --csv and --json.
//
//   tessera-bench-placement                       # bert-base, fp32 and bf16, N = 2 8, W = 2 4
//   tessera-bench-placement --model bert-tiny --requests 16 --dtype bf16 --json out.json
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "bench_common.hpp"
#include "tessera/common/cli.hpp"
#include "tessera/common/cpu_time.hpp"
#include "tessera/common/log.hpp"
#include "tessera/common/units.hpp"
#include "tessera/host/profiler.hpp"
#include "tessera/host/tile_model.hpp"
#include "tessera/models/bf16_weights.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/kernels.hpp"

namespace po = boost::program_options;
using namespace tessera;
using clk = std::chrono::steady_clock;

namespace {

// "2,8" -> {2, 8}; "" or "none" -> {}.
result<std::vector<int>> parse_counts(const std::string& option, const std::string& text, bool may_be_empty) {
  std::vector<int> out;
  if (may_be_empty && (text.empty() || text == "none")) return out;
  for (size_t p = 0; p <= text.size();) {
    size_t c = text.find(',', p);
    if (c == std::string::npos) c = text.size();
    const std::string item = text.substr(p, c - p);
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n < 1 || n > 4096)
      return status::invalid(option + " takes counts 1..4096 separated by commas" +
                                      (may_be_empty ? " (or none)" : "") + ", not '" + text + "'");
    out.push_back(static_cast<int>(n));
    p = c + 1;
  }
  return out;
}

struct row {
  std::string dtype, mode;  // mode: single, auto, tp
  int tiles = 0;            // 0: the single process
  int threads = 0;          // compute threads in all (tiles: one each)
  std::string plan = "-";   // R,S,W,M
  double seconds = 0, cpu_seconds = 0;
  double req_per_s = 0, req_per_cpu_s = 0;
  int baseline_threads = 0;  // tiles: the single-process row they compare with
  double ratio = 0, cpu_ratio = 0;
  double bytes = 0, hidden_bytes = 0, partial_bytes = 0;  // per request
  int64_t supersteps = 0;                                 // per batch
  double compute_ms = 0, exchange_ms = 0, barrier_ms = 0; // per request, summed over tiles
  double host_cpu_ms = 0;  // per request: this process's CPU while the tiles ran
  double max_diff = 0;  // against the single process of the same dtype
  double load = 0;      // 1-minute load average when the row started
  double target = 0;    // 0: none
  std::string verdict, cpu_verdict;
  // Tiles: the barrier cost the plan ranking charged, "measured" on its tiles or "forced" by --barrier-us.
  std::string barrier = "-";
  double barrier_s = 0;

  std::string what() const {
    if (mode == "single") return "single process, " + std::to_string(threads) + " thread" + (threads > 1 ? "s" : "");
    return mode == "auto" ? "tiles, automatic plan" : "tiles, tensor parallel";
  }
};

// The issues' targets for the automatic plan (bf16: issue 17; int8: issue 27; fp32: the earlier
// placement issue).
double target_of(models::dtype dt, int tiles) {
  if (tiles == 2) return dt != models::dtype::fp32 ? 0.9 : 0.85;
  if (tiles == 8) return dt != models::dtype::fp32 ? 0.7 : 0.60;
  return 0;
}

// What each superstep of each tile sends: hidden rows, partial sums, or anything else.
enum class sent { nothing, hidden, partial, other };
using send_kinds = std::map<uint32_t, std::vector<sent>>;
send_kinds kinds_of(const std::map<uint32_t, exchange::program>& programs) {
  send_kinds out;
  for (const auto& [tile, prog] : programs) {
    auto& v = out[tile];
    for (const auto& step : prog.steps) {
      sent k = sent::nothing;
      for (const auto& s : step.sends) {
        const sent this_one = s.src.tensor_id == host::tensor_ids::hidden    ? sent::hidden
                              : s.src.tensor_id == host::tensor_ids::partial ? sent::partial
                                                                             : sent::other;
        k = k == sent::nothing || k == this_one ? this_one : sent::other;
      }
      v.push_back(k);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  log::init_from_env();
  std::string model_name = "bert-base", csv, json, trace, tiles_list = "2,8", tp_list = "2,4", dtypes_text = "fp32,bf16",
              memory_text = "2GiB";
  bench::workload_options w;
  const int &requests = w.requests, &budget = w.budget, &max_seqs = w.max_seqs;
  po::options_description opts(
      "tessera-bench-placement: BERT on N tile processes vs the single-process forward, fp32, bf16 and int8\nOptions");
  opts.add_options()("help,h", "show this help")
      ("model", po::value(&model_name)->default_value(model_name), "preset or Hugging Face folder")
      ("dtype", po::value(&dtypes_text)->default_value(dtypes_text), "fp32, bf16, int8, or a comma-separated list of them");
  w.add_to(opts);
  opts.add_options()
      ("tiles", po::value(&tiles_list)->default_value(tiles_list), "tile counts under the automatic plan, comma-separated")
      ("tp", po::value(&tp_list)->default_value(tp_list), "tensor-parallel widths W (plan 1,1,W), comma-separated, or none")
      ("auto-only", "no tensor-parallel rows (as --tp none)")
      ("tile-memory", po::value(&memory_text)->default_value(memory_text), "memory cap of each tile")
      ("barrier-us", po::value<double>(), "rank the plans with this barrier cost a superstep, in microseconds (> 0), "
       "for reproducible plans; default: measured on the tiles started for each row (measure_barrier)")
      ("csv", po::value(&csv), "also write the rows as CSV")
      ("json", po::value(&json), "also write the rows as a JSON array")
      ("trace", po::value(&trace),
       "Chrome trace per configuration: FILE becomes FILE.<dtype>.<tiles>-<auto|tp>.json (profile on stderr)");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-bench-placement", argc, argv, opts, vm)) return *done;
  auto fail = [](const std::string& what) { return std::cerr << "tessera-bench-placement: " << what << "\n", 2; };
  if (!w.valid())
    return fail("--requests, --token-budget and --max-seqs must be positive and --long-share within [0, 1]");
  auto tile_counts = parse_counts("--tiles", tiles_list, true);
  if (!tile_counts) return fail(tile_counts.error().message());
  auto tp_widths = parse_counts("--tp", vm.count("auto-only") ? "none" : tp_list, true);
  if (!tp_widths) return fail(tp_widths.error().message());
  for (int w : *tp_widths)
    if (w < 2) return fail("--tp takes widths of 2 or more (W = 1 is one tile of the automatic plan), not " + tp_list);
  auto tile_memory = parse_bytes(memory_text);
  if (!tile_memory) return fail("--tile-memory: " + tile_memory.error().message());
  std::optional<double> barrier_us;
  if (vm.count("barrier-us")) {
    barrier_us = vm["barrier-us"].as<double>();
    if (!(*barrier_us > 0) || !std::isfinite(*barrier_us) || *barrier_us > 1e7)
      return fail("--barrier-us " + std::to_string(*barrier_us) + ": use a barrier cost above 0 and at most 1e7 microseconds");
  }
  std::vector<models::dtype> dtypes;
  for (size_t p = 0; p <= dtypes_text.size();) {
    size_t c = dtypes_text.find(',', p);
    if (c == std::string::npos) c = dtypes_text.size();
    auto dt = models::parse_dtype(dtypes_text.substr(p, c - p), /*allow_int8=*/true);
    if (!dt) return fail("--dtype " + dtypes_text + ": " + dt.error().message());
    if (std::find(dtypes.begin(), dtypes.end(), *dt) == dtypes.end()) dtypes.push_back(*dt);
    p = c + 1;
  }
  auto loaded = models::load_model(model_name);
  if (!loaded) return fail(loaded.error().to_string());
  const models::bert_model fp32_model = std::move(*loaded);
  const auto batches = w.batches(fp32_model.config);
  int64_t tokens = 0;
  for (const auto& b : batches) tokens += b.num_tokens();
  const int cores = usable_cores();
  const auto load0 = bench::load_avg();
  std::fprintf(stderr, "%s: %d requests, %lld tokens, %zu batches of <= %d tokens; %d cores, load %.2f %.2f %.2f\n",
               model_name.c_str(), requests, (long long)tokens, batches.size(), budget, cores, load0[0], load0[1],
               load0[2]);

  // Thread counts of the single-process rows: 1, and each tile count's baseline.
  std::set<int> baseline_threads{1};
  for (int n : *tile_counts) baseline_threads.insert(std::min(n, cores));
  for (int w : *tp_widths) baseline_threads.insert(std::min(w, cores));

  std::vector<row> rows;
  for (const models::dtype dt : dtypes) {
    const std::string dname(models::dtype_name(dt));
    models::bert_model model = fp32_model;
    if (auto st = models::set_dtype(model, dt); !st.ok()) return fail(st.message());
    // The single process, on each thread count; the first run's logits are the tiles' reference.
    std::vector<std::vector<float>> reference;
    std::map<int, const row*> baseline;
    std::vector<row> singles;
    for (int t : baseline_threads) {
      models::set_num_threads(t);
      (void)models::reference_forward(model, batches.front());  // warm-up: oneDNN builds its kernels once
      row r{.dtype = dname, .mode = "single", .threads = t, .load = bench::load_1min()};
      const double c0 = self_cpu_seconds();
      const auto t0 = clk::now();
      for (const auto& b : batches) {
        auto logits = models::reference_forward(model, b);
        if (reference.size() < batches.size()) reference.push_back(std::move(logits));
      }
      r.seconds = std::chrono::duration<double>(clk::now() - t0).count();
      r.cpu_seconds = self_cpu_seconds() - c0;
      r.req_per_s = requests / r.seconds;
      r.req_per_cpu_s = requests / std::max(r.cpu_seconds, 1e-9);
      r.baseline_threads = t;
      r.ratio = r.cpu_ratio = 1;
      std::fprintf(stderr, "%s single process, %d threads: %.1f s, %.2f req/s, %.2f req/CPU-s\n", dname.c_str(), t,
                   r.seconds, r.req_per_s, r.req_per_cpu_s);
      singles.push_back(r);
    }
    models::set_num_threads(1);  // the tiles are other processes: nothing here spins meanwhile
    for (const auto& s : singles) rows.push_back(s);
    for (const auto& s : singles) baseline[s.threads] = &s;

    std::vector<std::pair<int, bool>> configs;  // (tiles, tensor parallel)
    for (int n : *tile_counts) configs.push_back({n, false});
    for (int w : *tp_widths) configs.push_back({w, true});
    for (const auto& [n, tp] : configs) {
      host::placement_request req;
      req.tiles = n;
      req.tile_memory = *tile_memory;
      req.token_budget = budget;
      req.max_sequences = max_seqs;
      req.dtype = dt;
      if (tp) req.forced = host::plan{1, 1, n, 1};
      if (barrier_us) req.machine.sync_seconds = *barrier_us * 1e-6;
      host::deploy_hooks hooks;
      hooks.measure_barrier = !barrier_us;  // ranked with the barrier these tiles pay
      // bf16: shards are converted as they stream; int8: quantized, with the scales calibrated in `model`.
      auto d = host::deploy_bert(model, req, {}, hooks);
      if (!d.ok()) return fail(d.error().to_string());
      auto& deployed = d->model;
      const auto& chosen = deployed->compiled().chosen;
      const int replicas = chosen.replicas;
      std::vector<send_kinds> kinds;
      for (int r = 0; r < replicas; ++r) kinds.push_back(kinds_of(deployed->compiled().programs[r]));
      std::vector<pid_t> pids;
      for (const auto& t : d->group->tiles()) pids.push_back(t.pid);
      for (int r = 0; r < replicas; ++r)  // warm-up, untimed
        if (auto w = deployed->run(r, batches.front()); !w) return fail(w.error().to_string());
      std::unique_ptr<host::profiler> prof;
      if (!trace.empty()) {
        auto p = host::profiler::create(deployed->compiled(), {.tile_memory = req.tile_memory});
        if (!p) return fail(p.error().to_string());
        prof = std::move(*p);
      }
      row r{.dtype = dname, .mode = tp ? "tp" : "auto", .tiles = n, .threads = n, .load = bench::load_1min()};
      r.plan = std::to_string(chosen.replicas) + "," + std::to_string(chosen.stages) + "," +
               std::to_string(chosen.width) + "," + std::to_string(chosen.micro_batches);
      r.barrier = d->barrier.measured ? "measured" : "forced";
      r.barrier_s = d->barrier.seconds;
      std::fprintf(stderr, "%s %d tiles, %s: plan %s ranked with %s%s\n", dname.c_str(), n, tp ? "tp" : "auto",
                   r.plan.c_str(), d->barrier.describe().c_str(), barrier_us ? ", forced by --barrier-us" : "");
      // Replicas pull batches from a shared queue, as the tile backend does when serving.
      uint64_t bytes = 0, hidden = 0, partial = 0, compute_ns = 0, exchange_ns = 0, sync_ns = 0;
      const double host0 = self_cpu_seconds(), c0 = host0 + cpu_seconds_of(pids);
      const auto t1 = clk::now();
      const status failure = bench::run_on_replicas(
          replicas, batches.size(),
          [&](int rep, size_t i) {
            const double t0 = prof ? prof->now() : 0;
            auto out = deployed->run(rep, batches[i]);
            if (prof && out)
              if (auto st = prof->record(rep, batches[i], *out, t0); !st.ok())
                std::fprintf(stderr, "trace: batch %zu left out: %s\n", i, st.to_string().c_str());
            return out;
          },
          [&](int rep, size_t i, const auto& out) {
            bytes += out.bytes_exchanged;
            r.supersteps = out.supersteps;
            for (const auto& [tile, cs] : out.counters) {
              const auto& k = kinds[rep][tile];
              for (size_t s = 0; s < cs.size(); ++s) {
                compute_ns += cs[s].compute_ns;
                exchange_ns += cs[s].exchange_ns;
                sync_ns += cs[s].sync_ns;
                if (s < k.size() && k[s] == sent::hidden) hidden += cs[s].bytes_sent;
                if (s < k.size() && k[s] == sent::partial) partial += cs[s].bytes_sent;
              }
            }
            for (size_t k = 0; k < reference[i].size(); ++k)
              r.max_diff = std::max(r.max_diff, double(std::abs(reference[i][k] - out.logits[k])));
          });
      r.seconds = std::chrono::duration<double>(clk::now() - t1).count();
      const double host1 = self_cpu_seconds();
      r.cpu_seconds = host1 + cpu_seconds_of(pids) - c0;
      r.host_cpu_ms = (host1 - host0) * 1e3 / requests;
      if (!failure.ok()) return std::cerr << failure.to_string() << "\n", 1;
      const row& base = *baseline.at(std::min(n, cores));
      r.req_per_s = requests / r.seconds;
      r.req_per_cpu_s = requests / std::max(r.cpu_seconds, 1e-9);
      r.baseline_threads = base.threads;
      r.ratio = r.req_per_s / base.req_per_s;
      r.cpu_ratio = r.req_per_cpu_s / base.req_per_cpu_s;
      r.bytes = double(bytes) / requests;
      r.hidden_bytes = double(hidden) / requests;
      r.partial_bytes = double(partial) / requests;
      r.compute_ms = compute_ns * 1e-6 / requests;
      r.exchange_ms = exchange_ns * 1e-6 / requests;
      r.barrier_ms = sync_ns * 1e-6 / requests;
      if (!tp) r.target = target_of(dt, n);
      if (r.target > 0) {
        r.verdict = r.ratio >= r.target ? "met" : "missed";
        r.cpu_verdict = r.cpu_ratio >= r.target ? "met" : "missed";
      }
      std::fprintf(stderr, "%s %d tiles R=%d S=%d W=%d: %.1f s, %.2f req/s (%.2fx), %.2f req/CPU-s (%.2fx), max |diff| %.1e\n",
                   dname.c_str(), n, chosen.replicas, chosen.stages, chosen.width, r.seconds, r.req_per_s, r.ratio,
                   r.req_per_cpu_s, r.cpu_ratio, r.max_diff);
      if (prof) {
        const std::string file = trace + "." + dname + "." + std::to_string(n) + (tp ? "-tp" : "-auto") + ".json";
        if (auto st = prof->write_trace(file); !st.ok()) return fail(st.to_string());
        std::fprintf(stderr, "%strace: %s\n", prof->summary().c_str(), file.c_str());
      }
      rows.push_back(r);
      d->group->shutdown();
    }
  }
  const auto load1 = bench::load_avg();

  std::printf("\n%s, %d requests (%lld tokens, %zu batches of <= %d tokens), %d cores\n", model_name.c_str(), requests,
              (long long)tokens, batches.size(), budget, cores);
  std::printf("load average (1/5/15 min): %.2f/%.2f/%.2f at the start, %.2f/%.2f/%.2f at the end\n", load0[0],
              load0[1], load0[2], load1[0], load1[1], load1[2]);
  std::printf("each tile runs 1 compute thread; N tiles compare with the single process on min(N, %d) threads of the "
              "same dtype; N > %d tiles share the cores: per CPU-second is the fair column\n\n", cores, cores);
  std::printf("| dtype | configuration | tiles | threads | plan R,S,W,M | seconds | req/s | req/CPU-s | vs single "
              "(threads) | per CPU-s vs single | bytes/req | hidden bytes/req | partial bytes/req | supersteps/batch | "
              "tile compute ms/req | exchange wait ms/req | barrier wait ms/req | host CPU ms/req | max abs logit diff | "
              "ranking barrier us | load | target |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    std::string target = "-";
    if (r.target > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ">= %.2fx: %s (per CPU-s: %s)", r.target, r.verdict.c_str(), r.cpu_verdict.c_str());
      target = buf;
    }
    char barrier[48] = "-";
    if (r.barrier != "-") std::snprintf(barrier, sizeof barrier, "%.1f %s", r.barrier_s * 1e6, r.barrier.c_str());
    std::printf("| %s | %s | %d | %d | %s | %.2f | %.2f | %.2f | %.2fx (%d) | %.2fx | %.0f | %.0f | %.0f | %lld | %.1f | "
                "%.1f | %.1f | %.1f | %.1e | %s | %.2f | %s |\n",
                r.dtype.c_str(), r.what().c_str(), r.tiles, r.threads, r.plan.c_str(), r.seconds, r.req_per_s,
                r.req_per_cpu_s, r.ratio, r.baseline_threads, r.cpu_ratio, r.bytes, r.hidden_bytes, r.partial_bytes,
                (long long)r.supersteps, r.compute_ms, r.exchange_ms, r.barrier_ms, r.host_cpu_ms, r.max_diff, barrier, r.load,
                target.c_str());
  }
  std::printf("\n");
  for (const auto& r : rows)
    std::printf("RESULT bench=placement model=%s dtype=%s mode=%s tiles=%d threads=%d plan=%s cores=%d secs=%.3f "
                "req_per_s=%.3f req_per_cpu_s=%.3f baseline_threads=%d ratio=%.3f cpu_ratio=%.3f bytes_per_req=%.0f "
                "hidden_bytes_per_req=%.0f partial_bytes_per_req=%.0f compute_ms_per_req=%.2f exchange_ms_per_req=%.2f "
                "barrier_ms_per_req=%.2f host_cpu_ms_per_req=%.2f max_abs_diff=%.2e load1=%.2f target=%.2f verdict=%s cpu_verdict=%s "
                "ranking_barrier=%s ranking_barrier_us=%.1f\n",
                model_name.c_str(), r.dtype.c_str(), r.mode.c_str(), r.tiles, r.threads, r.plan.c_str(), cores,
                r.seconds, r.req_per_s, r.req_per_cpu_s, r.baseline_threads, r.ratio, r.cpu_ratio, r.bytes,
                r.hidden_bytes, r.partial_bytes, r.compute_ms, r.exchange_ms, r.barrier_ms, r.host_cpu_ms, r.max_diff, r.load,
                r.target, r.verdict.empty() ? "-" : r.verdict.c_str(), r.cpu_verdict.empty() ? "-" : r.cpu_verdict.c_str(),
                r.barrier.c_str(), r.barrier_s * 1e6);
  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "dtype,mode,tiles,threads,plan,cores,seconds,cpu_seconds,req_per_s,req_per_cpu_s,baseline_threads,ratio,"
         "cpu_ratio,bytes_per_request,hidden_bytes_per_request,partial_bytes_per_request,supersteps_per_batch,"
         "compute_ms_per_request,exchange_ms_per_request,barrier_ms_per_request,host_cpu_ms_per_request,max_abs_diff,load1,target,verdict,"
         "cpu_verdict,ranking_barrier,ranking_barrier_seconds\n";
    for (const auto& r : rows)
      f << r.dtype << ',' << r.mode << ',' << r.tiles << ',' << r.threads << ",\"" << r.plan << "\"," << cores << ','
        << r.seconds << ',' << r.cpu_seconds << ',' << r.req_per_s << ',' << r.req_per_cpu_s << ','
        << r.baseline_threads << ',' << r.ratio << ',' << r.cpu_ratio << ',' << r.bytes << ',' << r.hidden_bytes << ','
        << r.partial_bytes << ',' << r.supersteps << ',' << r.compute_ms << ',' << r.exchange_ms << ',' << r.barrier_ms
        << ',' << r.host_cpu_ms << ',' << r.max_diff << ',' << r.load << ',' << r.target << ',' << r.verdict << ',' << r.cpu_verdict
        << ',' << r.barrier << ',' << r.barrier_s << '\n';
    if (!f) return fail("cannot write " + csv);
  }
  if (!json.empty()) {
    auto a = nlohmann::json::array();
    for (const auto& r : rows)
      a.push_back({{"model", model_name}, {"dtype", r.dtype}, {"mode", r.mode}, {"tiles", r.tiles},
                   {"threads", r.threads}, {"plan", r.plan}, {"cores", cores}, {"requests", requests},
                   {"seconds", r.seconds}, {"cpu_seconds", r.cpu_seconds}, {"req_per_s", r.req_per_s},
                   {"req_per_cpu_s", r.req_per_cpu_s}, {"baseline_threads", r.baseline_threads}, {"ratio", r.ratio},
                   {"cpu_ratio", r.cpu_ratio}, {"bytes_per_request", r.bytes},
                   {"hidden_bytes_per_request", r.hidden_bytes}, {"partial_bytes_per_request", r.partial_bytes},
                   {"supersteps_per_batch", r.supersteps}, {"compute_ms_per_request", r.compute_ms},
                   {"exchange_ms_per_request", r.exchange_ms}, {"barrier_ms_per_request", r.barrier_ms},
                   {"host_cpu_ms_per_request", r.host_cpu_ms},
                   {"max_abs_diff", r.max_diff}, {"load1", r.load}, {"target", r.target}, {"verdict", r.verdict},
                   {"cpu_verdict", r.cpu_verdict}, {"ranking_barrier", r.barrier},
                   {"ranking_barrier_seconds", r.barrier_s}});
    std::ofstream f(json);
    f << a.dump(1) << "\n";
    if (!f) return fail("cannot write " + json);
  }
  return 0;
}
