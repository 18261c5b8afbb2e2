// tessera-experiment: experiments on the virtual clock (modelled time). Parses options and wires
// the parts of tessera_experiment; see docs/experiment.md.
#include <boost/program_options.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tessera/experiment/compute.hpp"
#include "tessera/experiment/provenance.hpp"
#include "tessera/experiment/seed_experiment.hpp"
#include "tessera/timing/llm_experiment.hpp"
#include "tessera/common/cli.hpp"
#include "tessera/common/text.hpp"

namespace po = boost::program_options;
using namespace tessera;
using namespace tessera::experiment;

namespace {

int fail(const status& st) {
  std::cerr << "tessera-experiment: " << st.to_string() << "\n";
  return st.code() == errc::invalid_argument || st.code() == errc::not_found ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  experiment_options o;
  compute_options co;
  std::string mode = "seed", long_shares = "0,0.4", configs, out_dir = "results", trace_path, requests_csv,
              save_trace, slo_ms = "10,25,50,100", llm_rows = "quick", dtype_text;
  bool full = false, no_tiles = false;
  int requests = 0;
  double rate = 300, share = 0.4;
  po::options_description d("tessera-experiment: serving experiments on modelled time (virtual clock)");
  d.add_options()("help,h", "this text")
      ("mode", po::value(&mode)->default_value(mode), "seed: the seed's experiment (all configurations, table, CSV); "
       "run: one configuration over one trace (--config, --trace or --rate/--requests/--long-share)")
      ("full", po::bool_switch(&full), "seed: the full run (10000-request sweeps, 128 requests computed with bert-base)")
      ("timing-only", po::bool_switch(&o.timing_only), "skip the arithmetic: modelled numbers only")
      ("no-tile-processes", po::bool_switch(&no_tiles), "compute tile devices with the in-process reference engine")
      ("tile-processes", po::value(&co.tiles)->default_value(co.tiles), "tessera-tile processes of the real tile group")
      ("compute-model", po::value(&co.model)->default_value(co.model), "the model computed for real (preset or HF folder)")
      ("dtype", po::value(&dtype_text)->default_value("fp32"), "what the computed sample computes in: fp32 or bf16 "
       "(tiles and tessera-gpu; answers checked against the fp32 reference within bf16's bound; the modelled clock stays fp16)")
      ("model-shape", po::value(&o.model_shape)->default_value(o.model_shape), "the modelled network (timing)")
      ("tiles-preset", po::value(&o.tiles_preset)->default_value(o.tiles_preset), "tile chip preset (ipu-mk2, ipu-c600, ...)")
      ("gpu-preset", po::value(&o.gpu_preset)->default_value(o.gpu_preset), "GPU preset")
      ("long-shares", po::value(&long_shares)->default_value(long_shares), "seed: long-request shares, comma-separated")
      ("configs", po::value(&configs), "seed: configurations to run, comma-separated (default all); run: the one to run")
      ("config", po::value(&configs), "alias of --configs")
      ("saturation-requests", po::value(&o.saturation_requests)->default_value(o.saturation_requests), "")
      ("latency-requests", po::value(&o.latency_requests)->default_value(o.latency_requests), "")
      ("computed-requests", po::value(&o.computed_requests)->default_value(o.computed_requests), "per configuration and mix")
      ("load", po::value(&o.load_rps)->default_value(0), "offered load of the latency runs, req/s (0: --load-fraction x gpu-static saturation)")
      ("load-fraction", po::value(&o.load_fraction)->default_value(o.load_fraction), "")
      ("batch-size", po::value(&o.batch_size)->default_value(o.batch_size), "B of the padded policies")
      ("token-budget", po::value(&o.token_budget)->default_value(o.token_budget), "tokens per packed batch")
      ("hybrid-threshold", po::value(&o.hybrid_threshold)->default_value(o.hybrid_threshold), "hybrid: longer goes to tiles")
      ("max-queue-delay-ms", po::value(&o.max_queue_delay_ms)->default_value(o.max_queue_delay_ms), "")
      ("max-inflight", po::value(&o.max_inflight_batches)->default_value(o.max_inflight_batches), "batches at a device at once")
      ("seed", po::value(&o.seed)->default_value(o.seed), "trace seed")
      ("slo-p99-ms", po::value(&slo_ms)->default_value(slo_ms), "seed: p99 targets of the SLO columns, ms, comma-separated")
      ("slo-points", po::value(&o.slo_points)->default_value(o.slo_points), "seed: offered loads per latency-throughput curve (0: none)")
      ("amortization-years", po::value(&o.amortization_years)->default_value(o.amortization_years), "seed: list price amortised over these years ($ per 1M requests)")
      ("energy-usd-per-kwh", po::value(&o.energy_usd_per_kwh)->default_value(o.energy_usd_per_kwh), "seed: energy price ($ per 1M requests)")
      ("out-dir", po::value(&out_dir)->default_value(out_dir), "seed: writes seed-experiment.csv and .md here")
      ("llm-rows", po::value(&llm_rows)->default_value(llm_rows),
       "seed: the LLM row group (llama-2-7b, timing model; llm-experiment.csv and .md): quick, full (default with --full) or none")
      ("trace", po::value(&trace_path), "run: a CSV trace (arrival_s,length)")
      ("requests", po::value(&requests)->default_value(0), "run: requests of a generated trace")
      ("rate", po::value(&rate)->default_value(rate), "run: Poisson arrival rate, req/s (0: all at t=0)")
      ("long-share", po::value(&share)->default_value(share), "run: long-request share of a generated trace")
      ("save-trace", po::value(&save_trace), "run: write the trace as CSV")
      ("requests-csv", po::value(&requests_csv), "run: per-request modelled times as CSV");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-experiment", argc, argv, d, vm)) return *done;
  co.tile_processes = !no_tiles;
  if (auto d = models::parse_dtype(dtype_text); d) {
    co.dtype = o.compute_dtype = *d;
  } else {
    return fail(d.error().with_context("--dtype"));
  }
  if (full) {
    if (vm["saturation-requests"].defaulted()) o.saturation_requests = 10000;
    if (vm["latency-requests"].defaulted()) o.latency_requests = 10000;
    if (vm["computed-requests"].defaulted()) o.computed_requests = 128;
    if (vm["compute-model"].defaulted()) co.model = "bert-base";
  }
  o.long_shares.clear();
  for (const auto& s : tessera::split_list(long_shares)) o.long_shares.push_back(std::stod(s));
  o.configs = tessera::split_list(configs);
  o.slo_p99_ms.clear();
  for (const auto& s : tessera::split_list(slo_ms)) {
    double v = 0;
    try {
      v = std::stod(s);
    } catch (const std::exception&) {
    }
    if (!(v > 0)) return fail(status::invalid("--slo-p99-ms: '" + s + "' is not a positive number of ms; pass e.g. 10,25,50"));
    o.slo_p99_ms.push_back(v);
  }
  if (o.slo_points < 0) return fail(status::invalid("--slo-points must be >= 0"));
  if (!(o.amortization_years > 0) || !(o.energy_usd_per_kwh >= 0))
    return fail(status::invalid("--amortization-years must be > 0 and --energy-usd-per-kwh >= 0"));
  // run: one trace from --seed; seed: saturation, latency, computed-sample and curve traces use seed .. seed + 3.
  const std::vector<uint64_t> seeds =
      mode == "run" ? std::vector<uint64_t>{o.seed} : std::vector<uint64_t>{o.seed, o.seed + 1, o.seed + 2, o.seed + 3};
  const provenance prov = collect_provenance(argc, argv, {o.tiles_preset, o.gpu_preset}, seeds);
  auto log = [](const std::string& s) { std::cerr << "tessera-experiment: " << s << "\n"; };

  std::unique_ptr<compute_pool> pool;
  if (!o.timing_only && (mode == "run" || o.computed_requests > 0)) {
    auto p = compute_pool::start(co, log);
    if (!p) return fail(p.error());
    pool = std::move(*p);
  }

  if (mode == "run") {
    trace t;
    if (!trace_path.empty()) {
      auto r = read_trace(trace_path);
      if (!r) return fail(r.error());
      t = std::move(*r);
    } else {
      t = poisson_trace({.requests = requests > 0 ? requests : 256, .rate = rate, .long_share = share, .seed = o.seed});
    }
    if (!save_trace.empty())
      if (auto st = write_trace(t, save_trace); !st.ok()) return fail(st);
    if (o.configs.size() != 1) return fail(status::invalid("--mode run needs exactly one --config (e.g. tiles-packed)"));
    auto cs = seed_configurations(o);
    if (cs.empty()) return fail(status::invalid("unknown configuration " + o.configs[0]));
    auto shape = models::shape_preset(o.model_shape);
    if (!shape) return fail(shape.error());
    virtual_run_config vc;
    vc.shape = *shape;
    vc.backends = cs[0].backends;
    vc.routing = cs[0].routing;
    if (pool) {
      for (auto& b : vc.backends) b.compute = pool->provider()(cs[0], b);
      vc.check_model = pool->model();
      vc.computed_in = co.dtype;
    }
    auto r = run_virtual(t, vc);
    if (!r) return fail(r.error());
    const auto& s = r->summary;
    std::printf("config %s, trace %s: %lld requests (%lld ok, %lld failed), %lld batches of %.1f sequences, padding %.1f%%\n",
                cs[0].name.c_str(), t.source.c_str(), (long long)s.requests, (long long)s.completed, (long long)s.failed,
                (long long)s.batches, s.mean_batch_sequences, s.padding_share * 100);
    std::printf("modelled: %.6f s makespan, %.2f req/s, latency mean %.3f ms p50 %.3f ms p99 %.3f ms\n", s.makespan_s,
                s.throughput_rps, s.mean_latency_s * 1e3, s.p50_latency_s * 1e3, s.p99_latency_s * 1e3);
    if (s.computed) {
      std::printf("computed: %.3f s wall (%.3f s in backends), %.2f req/s wall, %lld answers checked, max |logit error| %.2e\n",
                  s.wall_s, s.compute_wall_s, s.wall_rps, (long long)s.checked, s.max_abs_logit_error);
      for (const auto& b : vc.backends) {
        auto it = s.checks.find(b.name);
        const bool any = it != s.checks.end();
        std::printf("check %s: %s in %s vs in-process fp32 reference_forward, %lld answers, max %s %.2e, tolerance %.0e\n",
                    b.name.c_str(), describe_compute(*b.compute).c_str(), std::string(models::dtype_name(co.dtype)).c_str(),
                    any ? (long long)it->second.checked : 0LL,
                    co.dtype == models::dtype::fp32 ? "abs diff" : "abs diff / max(1, max |fp32 logit|)",
                    any ? it->second.max_abs_logit_error : 0.0, logit_tolerance_of(co.dtype));
      }
    }
    else
      std::printf("timing-only: %.3f s wall\n", s.wall_s);
    if (!requests_csv.empty())
      if (auto st = write_requests_csv(*r, requests_csv, prov.comment_lines("# ")); !st.ok()) return fail(st);
    if (s.computed && !(s.max_abs_logit_error <= logit_tolerance_of(co.dtype)))
      return fail(status::internal("logits differ from the reference forward by more than the tolerance"));
    return s.failed > 0 ? 1 : 0;
  }
  if (mode != "seed") return fail(status::invalid("--mode must be seed or run"));

  std::string note = pool ? pool->note() : "";
  auto rows = run_seed_experiment(o, pool ? pool->provider() : compute_provider{}, pool ? pool->model() : nullptr, log);
  if (!rows) return fail(rows.error());
  std::string md = rows_markdown(*rows, o, note);
  if (full && vm["llm-rows"].defaulted()) llm_rows = "full";
  if (llm_rows != "none") {  // the LLM row group: the timing model's llama-2-7b experiment (docs/timing.md)
    if (llm_rows != "quick" && llm_rows != "full") return fail(status::invalid("--llm-rows: quick, full or none"));
    tessera::timing::llm_experiment_options lo;
    lo.out_dir = out_dir;
    lo.quick = llm_rows == "quick";
    lo.seed = o.seed == 0 ? 42 : o.seed;
    lo.command = "tessera-experiment --mode seed --llm-rows " + llm_rows + " (tessera-llm-timing experiment" +
                 (lo.quick ? " --quick" : "") + ")";
    lo.cost.amortisation_years = o.amortization_years;
    lo.cost.usd_per_kwh = o.energy_usd_per_kwh;
    std::ostringstream llm_log;
    auto llm = tessera::timing::run_llm_experiment(lo, llm_log);
    if (!llm) return fail(llm.error().with_context("LLM row group"));
    std::cerr << llm_log.str();
    md += "\n## LLM row group (llama-2-7b, modelled clock; also " + out_dir + "/llm-experiment.md and .csv)\n\n";
    std::string body = *llm;
    body = body.substr(body.find('\n') + 1);  // its own title line goes
    for (size_t at = 0; (at = body.find("\n## ", at)) != std::string::npos; at += 5) body.insert(at + 1, "#");
    md += body;
  }
  md += prov.markdown();
  std::cout << md;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (auto st = write_rows_csv(*rows, out_dir + "/seed-experiment.csv", o, prov.comment_lines("# ")); !st.ok()) return fail(st);
  if (auto st = write_curves_csv(*rows, out_dir + "/seed-experiment-curves.csv", prov.comment_lines("# ")); !st.ok())
    return fail(st);
  std::ofstream(out_dir + "/seed-experiment.md") << md;
  std::cerr << "tessera-experiment: wrote " << out_dir << "/seed-experiment.csv, -curves.csv and .md\n";
  return 0;
}
