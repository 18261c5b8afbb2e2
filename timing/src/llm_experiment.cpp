// The LLM experiment: systems x batching at an SLO, load sweeps, cost and energy per million tokens.
#include "tessera/timing/llm_experiment.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "report_text.hpp"

namespace tessera::timing {
using detail::money;
using detail::num;

result<std::string> run_llm_experiment(const llm_experiment_options& o, std::ostream& log) {
  auto shape = resolve_decoder_shape(o.model);
  if (!shape) return shape.error();
  auto dims = decoder_dims_of(*shape);
  if (!dims) return dims.error();
  if (o.systems.empty()) return status::invalid("no systems to compare");
  if (o.seeds < 0) return status::invalid("seeds (--experiment-seeds) must be >= 0 (0: skip the table over seeds)");
  const int64_t n = o.quick ? 300 : o.requests;
  schedule_options cont = o.continuous, stat = o.static_batch;
  cont.policy = batching::continuous;
  stat.policy = batching::static_batch;

  std::vector<llm_system> systems;
  std::vector<llm_experiment_row> rows;
  std::ostringstream csv;
  csv << "system,batching,chips,load_fraction,rate_per_s,tokens_per_s,tokens_per_s_per_chip,ttft_p50_s,ttft_p99_s,"
         "tpot_p50_s,tpot_p99_s,e2e_p50_s,e2e_p99_s,preemptions,meets_slo,at_slo,usd_per_mtok,kwh_per_mtok,tdp_w,price_usd\n";
  std::vector<std::string> csv_rows;
  for (const auto& spec : o.systems) {
    auto sys = make_llm_system(spec, *dims);
    if (!sys) return sys.error().with_context("system " + spec);
    systems.push_back(*sys);
    double base_rate = 0;
    for (const schedule_options* opt : {&cont, &stat}) {
      auto p = throughput_at_slo(*sys, *dims, o.traffic, *opt, o.slo, n, o.seed);
      if (!p) return p.error().with_context(spec + " " + std::string(batching_name(opt->policy)));
      llm_experiment_row row;
      row.system = spec;
      row.batching = std::string(batching_name(opt->policy));
      row.chips = sys->chips;
      row.slo_rate_per_s = p->rate_per_s;
      row.slo_tokens_per_s = p->rate_per_s > 0 ? p->report.tokens_per_s : 0;
      row.max_tokens_per_s = p->max_tokens_per_s;
      row.at_slo = p->report;
      rows.push_back(row);
      if (opt == &cont) base_rate = p->rate_per_s > 0 ? p->rate_per_s : p->max_tokens_per_s / o.traffic.output.mean / 8;
      log << "llm-experiment: " << spec << " " << row.batching << ": " << num(row.slo_tokens_per_s, "%.0f")
          << " tok/s at the SLO (" << num(row.slo_rate_per_s, "%.3g") << " req/s), " << num(row.max_tokens_per_s, "%.0f")
          << " tok/s unconstrained\n";
    }
    for (const schedule_options* opt : {&cont, &stat}) {
      for (double f : o.load_fractions) {
        auto r = simulate_llm_serving(*sys, *dims, poisson_trace(n, f * base_rate, o.traffic, o.seed), *opt);
        if (!r) return r.error().with_context(spec);
        const bool meets = r->ttft_p99_s <= o.slo.ttft_p99_s && r->tpot_p99_s <= o.slo.tpot_p99_s;
        std::ostringstream line;
        line << spec << "," << batching_name(opt->policy) << "," << sys->chips << "," << f << "," << f * base_rate << ","
             << r->tokens_per_s << "," << r->tokens_per_s / double(sys->chips) << "," << r->ttft_p50_s << ","
             << r->ttft_p99_s << "," << r->tpot_p50_s << "," << r->tpot_p99_s << "," << r->e2e_p50_s << ","
             << r->e2e_p99_s << "," << r->preemptions << "," << (meets ? 1 : 0) << ",0,,," << sys->tdp_watts << ","
             << (sys->price_usd ? num(*sys->price_usd, "%.0f") : "");
        csv_rows.push_back(line.str());
      }
    }
  }

  // Cost: the reference is the first priced GPU's continuous row.
  const llm_experiment_row* ref = nullptr;
  const llm_system* ref_sys = nullptr;
  for (size_t i = 0; i < rows.size() && ref == nullptr; ++i) {
    const llm_system& s = systems[i / 2];
    if (s.kind == "gpu" && s.price_usd && rows[i].batching == "continuous" && rows[i].slo_tokens_per_s > 0)
      ref = &rows[i], ref_sys = &s;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& row = rows[i];
    const llm_system& s = systems[i / 2];
    if (row.slo_tokens_per_s <= 0) continue;
    std::optional<double> price = s.price_usd;
    if (!price && s.kind == "ipu" && o.ipu_price_usd > 0) price = o.ipu_price_usd * double(s.chips);
    auto c = cost_per_million_tokens(price.value_or(0), s.tdp_watts, row.slo_tokens_per_s, o.cost);
    if (!c) return c.error();
    row.kwh_per_mtok = c->kwh_per_million_tokens;
    if (price) row.usd_per_mtok = c->usd_per_million_tokens;
    if (ref != nullptr && s.kind == "ipu") {
      row.break_even_parity_usd = break_even_price_usd(ref->usd_per_mtok, s.tdp_watts, row.slo_tokens_per_s, o.cost) /
                                  double(s.chips);
      row.break_even_25pct_usd =
          break_even_price_usd(0.75 * ref->usd_per_mtok, s.tdp_watts, row.slo_tokens_per_s, o.cost) / double(s.chips);
    }
    std::ostringstream line;
    line << row.system << "," << row.batching << "," << row.chips << ",slo," << row.slo_rate_per_s << ","
         << row.slo_tokens_per_s << "," << row.slo_tokens_per_s / double(row.chips) << "," << row.at_slo.ttft_p50_s << ","
         << row.at_slo.ttft_p99_s << "," << row.at_slo.tpot_p50_s << "," << row.at_slo.tpot_p99_s << ","
         << row.at_slo.e2e_p50_s << "," << row.at_slo.e2e_p99_s << "," << row.at_slo.preemptions << ",1,1,"
         << (row.usd_per_mtok >= 0 ? num(row.usd_per_mtok) : "") << "," << row.kwh_per_mtok << "," << s.tdp_watts << ","
         << (price ? num(*price, "%.0f") : "");
    csv_rows.push_back(line.str());
  }
  for (const auto& l : csv_rows) csv << l << "\n";

  std::ostringstream md;
  md << "# LLM experiment: " << o.model << " on modelled systems (timing model, modelled clock)\n\n";
  md << "Command: `" << o.command << "`\n\n";
  md << "Traffic: ShareGPT-like chat, Poisson arrivals, " << n << " requests per run (seed " << o.seed
     << "); prompt log-normal mean " << o.traffic.prompt.mean << " tokens (sigma " << o.traffic.prompt.sigma
     << ", clipped to [" << o.traffic.prompt.lo << ", " << o.traffic.prompt.hi << "]), output mean "
     << o.traffic.output.mean << " (sigma " << o.traffic.output.sigma << ", [" << o.traffic.output.lo << ", "
     << o.traffic.output.hi << "]).\n";
  md << "SLO: p99 TTFT <= " << o.slo.ttft_p99_s << " s and p99 TPOT <= " << o.slo.tpot_p99_s * 1e3 << " ms. "
     << "Continuous batching: up to " << cont.max_seqs << " sequences and " << cont.token_budget
     << " new tokens per step and replica (chunked prefill); static: batches of up to " << stat.static_batch
     << " requests padded to the longest prompt, run until the longest output ends.\n";
  md << "Cost: 3-year-style amortisation over " << o.cost.amortisation_years << " years, utilisation "
     << o.cost.utilisation << ", $" << o.cost.usd_per_kwh << "/kWh, TDP drawn all the time; usd/Mtok = (price / "
     << "amortisation s + TDP x $/J) / (utilisation x tok/s) x 1e6.\n\n";
  md << "## Systems\n\n| system | modelled as | replicas | KV per pool (GB) | TDP (W) | price |\n|---|---|---|---|---|---|\n";
  for (const auto& s : systems)
    md << "| " << s.spec << " | " << s.description << " | " << s.replicas << " | " << num(s.kv_capacity_bytes / 1e9, "%.2f")
       << " | " << num(s.tdp_watts, "%.0f") << " | "
       << (s.price_usd ? money(*s.price_usd) : (o.ipu_price_usd > 0 && s.kind == "ipu"
                                                    ? money(o.ipu_price_usd * double(s.chips)) + " (--ipu-price-usd)"
                                                    : std::string("none published")))
       << " |\n";
  md << "\n## Throughput at the SLO, cost and energy per million output tokens\n\n"
        "| system | batching | req/s at SLO | tok/s at SLO | tok/s per chip | tok/s, all at t=0 | p99 TTFT s | p99 TPOT ms "
        "| preemptions | $/Mtok | kWh/Mtok | IPU price for parity | IPU price for -25% |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const bool ipu = r.break_even_parity_usd != 0 || r.break_even_25pct_usd != 0;
    // A rate below 1% of the all-at-once throughput means only an idle system meets the SLO.
    const bool idle_only = r.slo_tokens_per_s < 0.01 * r.max_tokens_per_s;
    if (idle_only) {
      md << "| " << r.system << " | " << r.batching << " | misses the SLO at any load above idle | - | - | "
         << num(r.max_tokens_per_s, "%.0f") << " | - | - | - | - | - | - | - |\n";
      continue;
    }
    md << "| " << r.system << " | " << r.batching << " | " << num(r.slo_rate_per_s, "%.3g") << " | "
       << num(r.slo_tokens_per_s, "%.0f") << " | " << num(r.slo_tokens_per_s / double(r.chips), "%.0f") << " | "
       << num(r.max_tokens_per_s, "%.0f") << " | " << (r.slo_rate_per_s > 0 ? num(r.at_slo.ttft_p99_s, "%.3f") : "-")
       << " | " << (r.slo_rate_per_s > 0 ? num(r.at_slo.tpot_p99_s * 1e3, "%.1f") : "-") << " | " << r.at_slo.preemptions
       << " | " << money(r.usd_per_mtok) << " | " << (r.slo_tokens_per_s > 0 ? num(r.kwh_per_mtok, "%.3g") : "-") << " | "
       << (ipu ? money(r.break_even_parity_usd) : "-") << " | " << (ipu ? money(r.break_even_25pct_usd) : "-") << " |\n";
  }
  if (ref != nullptr)
    md << "\nReference for the break-even prices: " << ref_sys->spec << " continuous, " << money(ref->usd_per_mtok)
       << "/Mtok. An IPU price at or below the '-25%' column makes that IPU system's cost per million tokens 25% lower "
          "than the reference's at the same SLO.\n";

  // Over seeds: the continuous rows re-run on o.seeds seeds (median and min..max).
  std::ostringstream seeds_csv;
  seeds_csv << "system,seed,tokens_per_s,usd_per_mtok,break_even_parity_usd,break_even_25pct_usd\n";
  if (o.seeds > 0) {
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
    };
    auto spread = [&](const std::vector<double>& v, const char* f, bool dollars) {
      if (v.empty()) return std::string("-");
      auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      return dollars ? money(med(v)) + " (" + money(*lo) + ".." + money(*hi) + ")"
                     : num(med(v), f) + " (" + num(*lo, f) + ".." + num(*hi, f) + ")";
    };
    // The reference's $/Mtok per seed first (the break-even prices are per seed against it).
    std::vector<double> ref_usd;
    struct per_system {
      std::vector<double> tok, usd, par, b25;
    };
    std::vector<per_system> all(systems.size());
    for (size_t si = 0; si < systems.size(); ++si) {
      const llm_system& s = systems[si];
      for (int64_t k = 0; k < o.seeds; ++k) {
        auto p = throughput_at_slo(s, *dims, o.traffic, cont, o.slo, n, o.seed + uint64_t(k));
        if (!p) return p.error().with_context(s.spec + " seed " + std::to_string(o.seed + uint64_t(k)));
        all[si].tok.push_back(p->rate_per_s > 0 ? p->report.tokens_per_s : 0);
      }
      log << "llm-experiment: " << s.spec << " continuous over " << o.seeds << " seeds\n";
    }
    const size_t ref_index = ref_sys ? size_t(ref_sys - systems.data()) : systems.size();
    for (size_t si = 0; si < systems.size(); ++si) {
      const llm_system& s = systems[si];
      std::optional<double> price = s.price_usd;
      if (!price && s.kind == "ipu" && o.ipu_price_usd > 0) price = o.ipu_price_usd * double(s.chips);
      for (size_t k = 0; k < all[si].tok.size(); ++k) {
        const double tok = all[si].tok[k];
        double usd = -1, par = 0, b25 = 0;
        if (tok > 0) {
          auto c = cost_per_million_tokens(price.value_or(0), s.tdp_watts, tok, o.cost);
          if (c && price) usd = c->usd_per_million_tokens, all[si].usd.push_back(usd);
          if (ref_index < systems.size() && s.kind == "ipu" && all[ref_index].tok[k] > 0) {
            auto rc = cost_per_million_tokens(*ref_sys->price_usd, ref_sys->tdp_watts, all[ref_index].tok[k], o.cost);
            if (rc) {
              par = break_even_price_usd(rc->usd_per_million_tokens, s.tdp_watts, tok, o.cost) / double(s.chips);
              b25 = break_even_price_usd(0.75 * rc->usd_per_million_tokens, s.tdp_watts, tok, o.cost) / double(s.chips);
              all[si].par.push_back(par);
              all[si].b25.push_back(b25);
            }
          }
        }
        // Full precision: the markdown's medians are of these values, not of rounded ones.
        seeds_csv << s.spec << "," << o.seed + k << "," << num(tok, "%.10g") << "," << (usd >= 0 ? num(usd, "%.10g") : "")
                  << "," << (par != 0 ? num(par, "%.10g") : "") << "," << (b25 != 0 ? num(b25, "%.10g") : "") << "\n";
      }
    }
    md << "\n## Over seeds (continuous batching; seeds " << o.seed << ".." << o.seed + uint64_t(o.seeds) - 1
       << "): median (min..max)\n\n| system | tok/s at SLO | $/Mtok | IPU price for parity | IPU price for -25% |\n"
          "|---|---|---|---|---|\n";
    for (size_t si = 0; si < systems.size(); ++si) {
      if (std::all_of(all[si].tok.begin(), all[si].tok.end(), [](double t) { return t <= 0; })) {
        md << "| " << systems[si].spec << " | misses the SLO on every seed | - | - | - |\n";
        continue;
      }
      md << "| " << systems[si].spec << " | " << spread(all[si].tok, "%.0f", false) << " | "
         << spread(all[si].usd, "%.3f", true) << " | " << spread(all[si].par, "%.0f", true) << " | "
         << spread(all[si].b25, "%.0f", true) << " |\n";
    }
  }

  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  // --experiment-seeds 0: no table over seeds, and no stale one left from an earlier run.
  if (const auto seeds_path = std::filesystem::path(o.out_dir) / "llm-experiment-seeds.csv"; o.seeds > 0) {
    std::ofstream sc(seeds_path);
    if (!sc) return status::io_error("cannot write " + seeds_path.string());
    sc << seeds_csv.str();
  } else {
    std::filesystem::remove(seeds_path, ec);
  }
  const auto csv_path = std::filesystem::path(o.out_dir) / "llm-experiment.csv";
  const auto md_path = std::filesystem::path(o.out_dir) / "llm-experiment.md";
  std::ofstream c(csv_path), m(md_path);
  if (!c || !m) return status::io_error("cannot write " + csv_path.string() + " / " + md_path.string());
  c << csv.str();
  m << md.str();
  if (!c || !m) return status::io_error("writing " + csv_path.string() + " failed");
  return md.str();
}

}  // namespace tessera::timing
