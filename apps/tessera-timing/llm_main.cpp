// tessera-llm-timing: the LLM step model, the serving simulator, its validation and the experiment.
//
//   tessera-llm-timing step --system a100-40gb --model llama-2-7b --decode 64x512 --prefill 1x2048
//   tessera-llm-timing system --system ipu-mk2:chips=64          (every figure and its source)
//   tessera-llm-timing simulate --system a100-40gb --rate 4 --requests 1000 --batching static
//   tessera-llm-timing simulate --trace azure.csv --time-scale 0.5 --slo-ttft-ms 500 --slo-tpot-ms 50
//   tessera-llm-timing validate                                  (modelled vs published, held out)
//   tessera-llm-timing experiment --out-dir results              (CSV + markdown; scripts/llm-experiment plots)
//   tessera-llm-timing search --csv results/llm-search.csv      (design-space search; scripts/llm-search plots)
//   tessera-llm-timing compare --model llama-2-70b --systems h100-sxm:tp=8,ipu-mk2:chips=64:weights=streaming
//                                                                (one model at the same SLO; held-out multi-GPU error)
//   tessera-llm-timing step --system h100-sxm:tp=8 --model path/to/config.json --decode 64x512
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/program_options.hpp>

#include "tessera/common/cli.hpp"
#include "tessera/common/llm_trace.hpp"
#include "tessera/timing/llm_compare.hpp"
#include "tessera/timing/llm_experiment.hpp"
#include "tessera/timing/llm_schedule.hpp"
#include "tessera/timing/llm_search.hpp"
#include "tessera/timing/llm_system.hpp"
#include "tessera/timing/llm_validation.hpp"

namespace po = boost::program_options;
using namespace tessera::timing;

namespace {

int fail(const tessera::status& s) { return tessera::exit_refused(s.to_string(), "tessera-llm-timing"); }

// "64x512,1x17" -> 64 entries of 512 and one of 17.
tessera::result<std::vector<int64_t>> parse_counts(const std::string& flag, const std::string& csv) {
  std::vector<int64_t> out;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t x = item.find('x');
    try {
      size_t used = 0;
      int64_t n = x == std::string::npos ? 1 : std::stoll(item.substr(0, x), &used);
      std::string len = x == std::string::npos ? item : item.substr(x + 1);
      int64_t l = std::stoll(len, &used);
      if (used != len.size() || n <= 0 || n > 1000000 || l < 0) throw std::invalid_argument(item);
      out.insert(out.end(), size_t(n), l);
    } catch (const std::exception&) {
      return tessera::status::invalid("--" + flag + ": '" + item + "' is not COUNTxLENGTH or LENGTH (e.g. 64x512,1x17)");
    }
  }
  return out;
}

// "16,32,64" -> numbers; a bad item is refused naming the flag.
template <class T>
tessera::result<std::vector<T>> parse_list(const std::string& flag, const std::string& csv) {
  std::vector<T> out;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      T v;
      if constexpr (std::is_same_v<T, std::string>) {
        v = item;
        used = item.size();
      } else if constexpr (std::is_integral_v<T>) {
        v = T(std::stoll(item, &used));
      } else {
        v = T(std::stod(item, &used));
      }
      if (item.empty() || used != item.size()) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return tessera::status::invalid("--" + flag + ": '" + item + "' is not a valid value");
    }
  }
  if (out.empty()) return tessera::status::invalid("--" + flag + ": give at least one value");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << "tessera-llm-timing: modelled LLM serving (step model, schedulers, validation, experiment)\n"
                 "usage: tessera-llm-timing step|system|simulate|validate|experiment|search|compare [options]; --help after a "
                 "command lists its options\n";
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  po::options_description opts("tessera-llm-timing " + cmd);
  opts.add_options()("help", "show this help")(
      "system", po::value<std::string>()->default_value("a100-40gb"),
      "preset[:key=value...]: a100-40gb[:gpus=N][:tp=T][:pp=P] (tp: tensor parallel over NVLink; pp: pipeline stages), ipu-mk2:chips=N[:pipeline=S], ipu-mk2:chips=4:weights=streaming")(
      "model", po::value<std::string>()->default_value("llama-2-7b"),
      "a decoder shape preset (llama-2-7b, llama-3-8b, llama-2-70b, gpt2, ...) or a Hugging Face config.json or its folder")(
      "decode", po::value<std::string>()->default_value(""), "step: decode contexts, COUNTxCONTEXT,...")(
      "prefill", po::value<std::string>()->default_value(""), "step: prompt chunks, COUNTxTOKENS,... (no cached context)")(
      "rate", po::value<double>()->default_value(1.0), "simulate: Poisson arrivals per second (0: all at once)")(
      "requests", po::value<int64_t>()->default_value(1000), "simulate: requests in the trace")(
      "seed", po::value<uint64_t>()->default_value(42), "trace seed")(
      "batching", po::value<std::string>()->default_value("continuous"), "continuous or static")(
      "max-seqs", po::value<int64_t>()->default_value(256), "continuous: running sequences per replica")(
      "token-budget", po::value<int64_t>()->default_value(2048), "continuous: new tokens per step")(
      "static-batch", po::value<int64_t>()->default_value(16), "static: requests per batch")(
      "out-dir", po::value<std::string>()->default_value("results"), "experiment: where the CSV and markdown go")(
      "systems", po::value<std::string>()->default_value(""),
      "experiment: system specs, comma-separated (default: a100-40gb, h100-sxm, three IPU pods, one streaming IPU-M2000);"
      " the first priced GPU is the cost reference")(
      "experiment-seeds", po::value<int64_t>()->default_value(5),
      "experiment: continuous rows re-run on this many seeds (median and spread; 0 skips)")(
      "quick", "experiment: fewer requests per run (a smoke run; the figures move by a few percent)")(
      "ttft-p99", po::value<double>()->default_value(2.0), "experiment: SLO, p99 time to first token (s)")(
      "tpot-p99", po::value<double>()->default_value(0.1), "experiment: SLO, p99 time per output token (s)")(
      "utilisation", po::value<double>()->default_value(0.5), "cost: fraction of the time serving at the SLO rate")(
      "usd-per-kwh", po::value<double>()->default_value(0.10), "cost: energy price")(
      "amortisation-years", po::value<double>()->default_value(3), "cost: years the price is spread over")(
      "ipu-price-usd", po::value<double>()->default_value(0),
      "cost: price per IPU (its share of an IPU-Machine and Pod); 0: none is published, report the break-even price");
  if (cmd == "simulate")
    opts.add_options()("trace", po::value<std::string>(),
                       "simulate: replay this trace file instead of Poisson arrivals: arrival_seconds,prompt_tokens,"
                       "output_tokens (what tessera-loadgen --write-trace writes), Azure's LLM inference trace "
                       "(TIMESTAMP,ContextTokens,GeneratedTokens) or BurstGPT (Timestamp,...,Request tokens,Response tokens,...)")(
        "time-scale", po::value<double>()->default_value(1.0), "simulate --trace: multiply its arrival times by this")(
        "duration", po::value<double>()->default_value(0.0),
        "simulate --trace: replay only the requests arriving within this many seconds (after --time-scale; 0: all)")(
        "slo-ttft-ms", po::value<double>()->default_value(0.0),
        "simulate: goodput's bound on the time to first token, ms (0: not checked)")(
        "slo-tpot-ms", po::value<double>()->default_value(0.0),
        "simulate: goodput's bound on the time per output token after the first, ms (0: not checked); goodput = "
        "requests within both bounds per second, as vLLM's benchmark_serving and genai-perf count it")(
        "csv", po::value<std::string>()->default_value(""), "simulate: append a CSV row (header when the file is new)");
  if (cmd == "compare")
    opts.add_options()("compare-requests", po::value<int64_t>()->default_value(400),
                       "compare: requests per simulated run of the SLO bisection")(
        "no-held-out", "compare: skip the held-out multi-GPU rows");
  if (cmd == "search")
    opts.add_options()("csv", po::value<std::string>()->default_value(""), "search: every evaluated point to this CSV")(
        "workload", po::value<std::string>()->default_value("sharegpt"), "search: the built-in mix (sharegpt)")(
        "budget-usd", po::value<double>()->default_value(0), "search: most a system may cost (0: no limit)")(
        "target-tokens-per-s", po::value<double>()->default_value(0), "search: copies of a system to deliver this (0: one copy)")(
        "ipu-chip-usd", po::value<double>()->default_value(10000), "search: price of a Mk2-sized IPU-like chip (an input)")(
        "ipu-chip-watts", po::value<double>()->default_value(185), "search: TDP of a Mk2-sized IPU-like chip")(
        "chips", po::value<std::string>()->default_value("16,32,64"), "search: IPU-like chips per copy")(
        "pipeline", po::value<std::string>()->default_value("0"), "search: chips per pipeline (0: all chips)")(
        "tiles", po::value<std::string>()->default_value("1472,2944"), "search: tiles per chip")(
        "sram-kib", po::value<std::string>()->default_value("624,1248"), "search: SRAM per tile, KiB")(
        "link-gbps", po::value<std::string>()->default_value("320"), "search: chip-to-chip bandwidth, GB/s")(
        "hop-us", po::value<std::string>()->default_value("2"), "search: chip-to-chip hop / sync latency, us")(
        "weights", po::value<std::string>()->default_value("sram"), "search: sram, streaming or both (sram,streaming)")(
        "gpus", po::value<std::string>()->default_value("a100-40gb,h100-sxm"), "search: GPU-like candidates")(
        "max-seqs-grid", po::value<std::string>()->default_value("64,256"), "search: running sequences per replica")(
        "token-budget-grid", po::value<std::string>()->default_value("2048"), "search: new tokens per step")(
        "search-requests", po::value<int64_t>()->default_value(200), "search: requests per simulated run")(
        "seeds", po::value<int64_t>()->default_value(5), "search: seeds for the reported rows (median and spread)")(
        "no-sensitivity", "search: skip the sensitivity table");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-llm-timing " + cmd, argc - 1, argv + 1, opts, vm)) return *done;
  auto shape = resolve_decoder_shape(vm["model"].as<std::string>());
  if (!shape) return fail(shape.error());
  auto dims = decoder_dims_of(*shape);
  if (!dims) return fail(dims.error());

  if (cmd == "validate") {
    auto rep = validate_llm_timing();
    if (!rep) return fail(rep.error());
    std::cout << llm_validation_markdown(*rep);
    return 0;
  }
  if (cmd == "experiment") {
    llm_experiment_options o;
    o.out_dir = vm["out-dir"].as<std::string>();
    o.quick = vm.count("quick") > 0;
    o.slo = {vm["ttft-p99"].as<double>(), vm["tpot-p99"].as<double>()};
    o.cost = {vm["amortisation-years"].as<double>(), vm["utilisation"].as<double>(), vm["usd-per-kwh"].as<double>()};
    o.ipu_price_usd = vm["ipu-price-usd"].as<double>();
    o.seed = vm["seed"].as<uint64_t>();
    o.model = vm["model"].as<std::string>();
    o.seeds = vm["experiment-seeds"].as<int64_t>();
    if (o.seeds < 0) return fail(tessera::status::invalid("--experiment-seeds must be >= 0 (0: skip the table over seeds)"));
    if (const auto& list = vm["systems"].as<std::string>(); !list.empty()) {
      o.systems.clear();
      std::stringstream ss(list);
      std::string item;
      while (std::getline(ss, item, ','))
        if (!item.empty()) o.systems.push_back(item);
    }
    o.command = "tessera-llm-timing";
    for (int i = 1; i < argc; ++i) o.command += std::string(" ") + argv[i];
    auto rep = run_llm_experiment(o, std::cerr);
    if (!rep) return fail(rep.error());
    std::cout << *rep;
    return 0;
  }

  if (cmd == "compare") {
    llm_compare_options o;
    if (!vm["model"].defaulted()) o.model = vm["model"].as<std::string>();
    if (const auto& list = vm["systems"].as<std::string>(); !list.empty()) {
      auto v = parse_list<std::string>("systems", list);
      if (!v) return fail(v.error());
      o.systems = *v;
    }
    o.slo = {vm["ttft-p99"].as<double>(), vm["tpot-p99"].as<double>()};
    o.cost = {vm["amortisation-years"].as<double>(), vm["utilisation"].as<double>(), vm["usd-per-kwh"].as<double>()};
    o.ipu_price_usd = vm["ipu-price-usd"].as<double>();
    o.seed = vm["seed"].as<uint64_t>();
    o.requests = vm["compare-requests"].as<int64_t>();
    o.continuous.max_seqs = vm["max-seqs"].as<int64_t>();
    o.continuous.token_budget = vm["token-budget"].as<int64_t>();
    o.held_out = vm.count("no-held-out") == 0;
    for (const char* other : {"system", "decode", "prefill", "rate", "requests", "batching", "static-batch", "out-dir",
                              "quick", "experiment-seeds"})
      if (!vm[other].defaulted() && vm.count(other))
        return fail(tessera::status::invalid(std::string("--") + other + " does not apply to compare (see compare --help)"));
    auto r = run_llm_compare(o);
    if (!r) return fail(r.error());
    std::cout << llm_compare_markdown(*r, o);
    return 0;
  }

  if (cmd == "search") {
    llm_search_options o;
    o.model = vm["model"].as<std::string>();
    o.workload = vm["workload"].as<std::string>();
    o.slo = {vm["ttft-p99"].as<double>(), vm["tpot-p99"].as<double>()};
    o.cost = {vm["amortisation-years"].as<double>(), vm["utilisation"].as<double>(), vm["usd-per-kwh"].as<double>()};
    o.budget_usd = vm["budget-usd"].as<double>();
    o.target_tokens_per_s = vm["target-tokens-per-s"].as<double>();
    o.ipu_chip_usd = vm["ipu-chip-usd"].as<double>();
    o.ipu_chip_watts = vm["ipu-chip-watts"].as<double>();
    o.requests = vm["search-requests"].as<int64_t>();
    o.seeds = vm["seeds"].as<int64_t>();
    o.seed = vm["seed"].as<uint64_t>();
    o.sensitivity = vm.count("no-sensitivity") == 0;
    o.csv_path = vm["csv"].as<std::string>();
    auto ints = [&](const char* flag, std::vector<int64_t>& dst) -> tessera::status {
      auto v = parse_list<int64_t>(flag, vm[flag].as<std::string>());
      if (!v) return v.error();
      dst = *v;
      return {};
    };
    auto dbls = [&](const char* flag, std::vector<double>& dst) -> tessera::status {
      auto v = parse_list<double>(flag, vm[flag].as<std::string>());
      if (!v) return v.error();
      dst = *v;
      return {};
    };
    for (auto st : {ints("chips", o.chips), ints("pipeline", o.pipelines), ints("tiles", o.tiles),
                    ints("sram-kib", o.sram_kib), dbls("link-gbps", o.link_gbps), dbls("hop-us", o.hop_us),
                    ints("max-seqs-grid", o.max_seqs), ints("token-budget-grid", o.token_budget)})
      if (!st.ok()) return fail(st);
    auto w = parse_list<std::string>("weights", vm["weights"].as<std::string>());
    if (!w) return fail(w.error());
    o.weights = *w;
    auto g = parse_list<std::string>("gpus", vm["gpus"].as<std::string>());
    if (!g) return fail(g.error());
    o.gpus = *g;
    for (const char* other : {"system", "decode", "prefill", "rate", "requests", "batching", "max-seqs", "token-budget",
                              "static-batch", "out-dir", "systems", "quick", "ipu-price-usd"})
      if (!vm[other].defaulted() && vm.count(other))
        return fail(tessera::status::invalid(std::string("--") + other + " does not apply to search (see search --help)"));
    auto r = run_llm_search(o, std::cerr);
    if (!r) return fail(r.error());
    std::cout << llm_search_markdown(*r, o);
    return 0;
  }
  auto sys = make_llm_system(vm["system"].as<std::string>(), *dims);
  if (!sys) return fail(sys.error());
  if (cmd == "system") {
    std::printf("%s: %s\n", sys->spec.c_str(), sys->description.c_str());
    std::printf("replicas %lld (%lld per KV pool), KV cache per pool %.2f GB (%.0f tokens of %s), TDP %.0f W, price %s\n",
                (long long)sys->replicas, (long long)sys->replicas_per_pool, sys->kv_capacity_bytes / 1e9, sys->kv_capacity_bytes / dims->kv_bytes_per_token(),
                dims->name.c_str(), sys->tdp_watts,
                sys->price_usd ? ("$" + std::to_string(int64_t(*sys->price_usd))).c_str() : "none published");
    for (const auto& [fig, src] : sys->figures) std::printf("  %s\n      source: %s\n", fig.c_str(), src.c_str());
    return 0;
  }
  if (cmd == "step") {
    llm_step_batch b;
    auto dec = parse_counts("decode", vm["decode"].as<std::string>());
    if (!dec) return fail(dec.error());
    b.decode_contexts = *dec;
    auto pre = parse_counts("prefill", vm["prefill"].as<std::string>());
    if (!pre) return fail(pre.error());
    for (int64_t t : *pre) b.prefills.push_back({t, 0, true});
    auto t = model_llm_step(*sys, *dims, b);
    if (!t) return fail(t.error());
    std::printf("%s on %s: %lld tokens (%zu prompt chunks, %zu decodes)\n", dims->name.c_str(), sys->spec.c_str(),
                (long long)b.tokens(), b.prefills.size(), b.decode_contexts.size());
    std::printf("weights resident: %.3f GB at %.0f bytes an element, vocab %lld\n", dims->resident_bytes() / 1e9,
                dims->element_bytes, (long long)dims->vocab);
    std::printf("modelled step: %.3f ms (%s-bound)\n", t->seconds * 1e3, t->memory_bound() ? "memory" : "compute");
    std::printf("  GEMMs      compute %8.3f ms  memory %8.3f ms\n", t->gemm_compute_s * 1e3, t->gemm_memory_s * 1e3);
    std::printf("  attention  compute %8.3f ms  memory %8.3f ms\n", t->attn_compute_s * 1e3, t->attn_memory_s * 1e3);
    std::printf("  LM head %.3f ms, overheads %.3f ms, chip-to-chip %.3f ms\n", t->lm_head_s * 1e3, t->overhead_s * 1e3,
                t->link_s * 1e3);
    std::printf("  %.1f GFLOP, %.2f GB moved\n", t->flops / 1e9, t->bytes / 1e9);
    return 0;
  }
  if (cmd == "simulate") {
    schedule_options o;
    const std::string pol = vm["batching"].as<std::string>();
    if (pol != "continuous" && pol != "static") return fail(tessera::status::invalid("--batching: continuous or static"));
    o.policy = pol == "static" ? batching::static_batch : batching::continuous;
    o.max_seqs = vm["max-seqs"].as<int64_t>();
    o.token_budget = vm["token-budget"].as<int64_t>();
    o.static_batch = vm["static-batch"].as<int64_t>();
    if (vm["rate"].as<double>() < 0) return fail(tessera::status::invalid("--rate must be >= 0"));
    const double slo_ttft_ms = vm["slo-ttft-ms"].as<double>(), slo_tpot_ms = vm["slo-tpot-ms"].as<double>();
    if (!(slo_ttft_ms >= 0) || !(slo_tpot_ms >= 0) || !std::isfinite(slo_ttft_ms) || !std::isfinite(slo_tpot_ms))
      return fail(tessera::status::invalid("--slo-ttft-ms and --slo-tpot-ms must be >= 0"));
    o.goodput_ttft_s = slo_ttft_ms / 1e3;
    o.goodput_tpot_s = slo_tpot_ms / 1e3;
    const double time_scale = vm["time-scale"].as<double>(), duration = vm["duration"].as<double>();
    std::vector<llm_request> trace;
    std::string workload;
    if (vm.count("trace")) {
      // The trace gives the arrivals and the lengths: the options that would draw them do not apply.
      for (const char* other : {"rate", "seed"})
        if (!vm[other].defaulted())
          return fail(tessera::status::invalid(std::string("--") + other + " does not apply with --trace (the trace gives "
                                               "the arrivals and lengths; scale them with --time-scale)"));
      if (!(time_scale > 0) || !std::isfinite(time_scale)) return fail(tessera::status::invalid("--time-scale must be > 0"));
      if (!(duration >= 0) || !std::isfinite(duration)) return fail(tessera::status::invalid("--duration must be >= 0"));
      const std::string path = vm["trace"].as<std::string>();
      auto t = tessera::read_llm_trace(path);
      if (!t) return fail(t.error());
      if (!t->has_output())
        return fail(tessera::status::invalid(path + ": a " + t->format + " trace gives no output lengths; the timing "
                                             "engine needs arrival_seconds,prompt_tokens,output_tokens, Azure's or BurstGPT's columns"));
      const int64_t limit = vm["requests"].defaulted() ? 0 : vm["requests"].as<int64_t>();
      for (const auto& row : t->rows) {
        const double at = row.arrival_seconds * time_scale;
        if (duration > 0 && at > duration) break;
        if (limit > 0 && int64_t(trace.size()) >= limit) break;
        trace.push_back({at, row.prompt_tokens, row.output_tokens});
      }
      if (trace.empty())
        return fail(tessera::status::invalid(path + ": no request arrives within --duration " + std::to_string(duration) + " s"));
      if (t->skipped > 0)
        std::fprintf(stderr, "tessera-llm-timing: %s: %lld rows with 0 prompt or output tokens skipped (the first on line %d)\n",
                     path.c_str(), (long long)t->skipped, t->first_skipped_line);
      workload = "trace:" + path + " (" + t->format + ")";
    } else {
      for (const char* other : {"time-scale", "duration"})
        if (!vm[other].defaulted())
          return fail(tessera::status::invalid(std::string("--") + other + " applies only with --trace"));
      trace = poisson_trace(vm["requests"].as<int64_t>(), vm["rate"].as<double>(), {}, vm["seed"].as<uint64_t>());
      workload = "sharegpt-like";
    }
    auto r = simulate_llm_serving(*sys, *dims, trace, o);
    if (!r) return fail(r.error());
    // The offered rate: the requests over the span of their arrivals (a trace's own rate).
    const double span = trace.back().arrival_s - trace.front().arrival_s;
    const double offered = vm.count("trace") ? (span > 0 ? double(trace.size() - 1) / span : 0) : vm["rate"].as<double>();
    std::printf("%s, %s batching, %lld requests at %.3g/s: %.0f output tokens/s over %.1f s\n", sys->spec.c_str(),
                pol.c_str(), (long long)r->requests, offered, r->tokens_per_s, r->duration_s);
    if (vm.count("trace")) std::printf("workload %s%s\n", workload.c_str(), time_scale != 1 ? (", arrivals x " + std::to_string(time_scale)).c_str() : "");
    // Milliseconds to 4 significant digits: a tiny model's modelled step is microseconds.
    std::printf("TTFT p50 %.4g ms p99 %.4g ms | TPOT p50 %.4g ms p99 %.4g ms | e2e p50 %.4g ms p99 %.4g ms\n",
                r->ttft_p50_s * 1e3, r->ttft_p99_s * 1e3, r->tpot_p50_s * 1e3, r->tpot_p99_s * 1e3, r->e2e_p50_s * 1e3,
                r->e2e_p99_s * 1e3);
    std::printf("%lld steps, %.1f tokens per step, %.0f%% memory-bound, %lld preemptions\n", (long long)r->steps,
                r->mean_step_tokens, r->memory_bound_fraction * 100, (long long)r->preemptions);
    if (slo_ttft_ms > 0 || slo_tpot_ms > 0)
      std::printf("goodput %.3f req/s (%lld of %lld requests within TTFT <= %g ms and TPOT <= %g ms; 0: not checked)\n",
                  r->goodput_rps, (long long)r->good, (long long)r->requests, slo_ttft_ms, slo_tpot_ms);
    if (const std::string csv = vm["csv"].as<std::string>(); !csv.empty()) {
      const bool fresh = !std::ifstream(csv).good();
      std::ofstream out(csv, std::ios::app);
      if (fresh)
        out << "system,model,batching,workload,time_scale,requests,offered_rps,duration_s,output_tok_per_s,ttft_p50_ms,"
               "ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,e2e_p50_ms,e2e_p99_ms,slo_ttft_ms,slo_tpot_ms,good,goodput_rps\n";
      std::string w = workload;
      for (char& c : w)
        if (c == ',') c = ';';
      char buf[512];
      std::snprintf(buf, sizeof buf, "%s,%s,%s,%s,%g,%lld,%.4f,%.4f,%.2f,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%g,%g,%lld,%.4f\n",
                    sys->spec.c_str(), vm["model"].as<std::string>().c_str(), pol.c_str(), w.c_str(), time_scale,
                    (long long)r->requests, offered, r->duration_s, r->tokens_per_s, r->ttft_p50_s * 1e3,
                    r->ttft_p99_s * 1e3, r->tpot_p50_s * 1e3, r->tpot_p99_s * 1e3, r->e2e_p50_s * 1e3, r->e2e_p99_s * 1e3,
                    slo_ttft_ms, slo_tpot_ms, (long long)r->good, r->goodput_rps);
      out << buf;
      out.flush();
      if (!out) return fail(tessera::status::io_error(csv + ": cannot write"));
    }
    return 0;
  }
  return fail(tessera::status::invalid("unknown command '" + cmd + "'; use step, system, simulate, validate, experiment, search or compare"));
}
