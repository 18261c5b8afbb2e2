// The design-space search (llm_search.hpp).
#include "tessera/timing/llm_search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <tuple>

#include "report_text.hpp"

namespace tessera::timing {
namespace {

constexpr int64_t kMk2Tiles = 1472;
constexpr int64_t kMk2SramKib = 624;

using detail::num;

// The ipu-mk2 figures the IPU-like candidates are scaled from, read through make_llm_system so that
// the preset file stays the only source.
struct ipu_base {
  double chip_flops = 0, sram_bw = 0, usable_fraction = 0, stream_bw = 0, stream_mem = 0;
  double per_layer_overhead_s = 0, per_step_overhead_s = 0, clock_hz = 0;
};

result<ipu_base> load_ipu_base(const decoder_dims& d) {
  auto pod = make_llm_system("ipu-mk2:chips=64", d);
  if (!pod) return pod.error().with_context("the search's IPU base (ipu-mk2:chips=64)");
  auto str = make_llm_system("ipu-mk2:chips=4:weights=streaming", d);
  ipu_base b;
  b.chip_flops = pod->flops_per_s;
  b.sram_bw = pod->weight_bytes_per_s;
  const double chip_bytes = double(kMk2Tiles) * kMk2SramKib * 1024.0;
  b.usable_fraction = (pod->kv_capacity_bytes + d.resident_bytes()) / 64.0 / chip_bytes;
  b.per_layer_overhead_s = pod->per_layer_overhead_s;
  b.per_step_overhead_s = pod->per_step_overhead_s;
  b.clock_hz = pod->clock_hz;
  if (str) b.stream_bw = str->weight_bytes_per_s / 4.0;
  return b;
}

double area_factor(const llm_search_point& p) {
  return double(p.tiles) / kMk2Tiles * (0.5 + 0.5 * double(p.sram_kib) / kMk2SramKib);
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class T>
status positive_list(const std::vector<T>& v, const char* flag) {
  if (v.empty()) return status::invalid(std::string("--") + flag + ": give at least one value");
  for (auto x : v)
    if (!(x > 0)) return status::invalid(std::string("--") + flag + ": " + num(double(x)) + " is not positive");
  return {};
}

}  // namespace

std::string llm_search_point::label() const {
  if (kind == "gpu") return gpu + " max_seqs=" + std::to_string(max_seqs) + " budget=" + std::to_string(token_budget);
  std::string s = "ipu chips=" + std::to_string(chips);
  s += streaming ? " weights=streaming" : " pipeline=" + std::to_string(pipeline == 0 ? chips : pipeline);
  s += " tiles=" + std::to_string(tiles) + " sram_kib=" + std::to_string(sram_kib) + " link_gbps=" + num(link_gbps) +
       " hop_us=" + num(hop_us) + " max_seqs=" + std::to_string(max_seqs) + " budget=" + std::to_string(token_budget);
  return s;
}

result<std::vector<llm_search_point>> llm_search_grid(const llm_search_options& o) {
  TESSERA_RETURN_IF_ERROR(positive_list(o.chips, "chips"));
  TESSERA_RETURN_IF_ERROR(positive_list(o.tiles, "tiles"));
  TESSERA_RETURN_IF_ERROR(positive_list(o.sram_kib, "sram-kib"));
  TESSERA_RETURN_IF_ERROR(positive_list(o.link_gbps, "link-gbps"));
  TESSERA_RETURN_IF_ERROR(positive_list(o.hop_us, "hop-us"));
  TESSERA_RETURN_IF_ERROR(positive_list(o.max_seqs, "max-seqs"));
  TESSERA_RETURN_IF_ERROR(positive_list(o.token_budget, "token-budget"));
  if (o.pipelines.empty()) return status::invalid("--pipeline: give at least one value (0: all chips)");
  for (auto p : o.pipelines)
    if (p < 0) return status::invalid("--pipeline: " + std::to_string(p) + " is negative (0: all chips)");
  for (const auto& w : o.weights)
    if (w != "sram" && w != "streaming") return status::invalid("--weights: '" + w + "'; use sram or streaming");
  for (const auto& g : o.gpus)
    if (g != "a100-40gb" && g != "h100-sxm")
      return status::invalid("--gpus: '" + g + "' has no price in its preset; use a100-40gb or h100-sxm");
  if (o.workload != "sharegpt")
    return status::invalid("--workload: '" + o.workload + "'; the built-in mix is sharegpt (trace files are not read by the search)");
  if (o.requests < 20) return status::invalid("--requests: " + std::to_string(o.requests) + " is below 20 per run");
  if (o.seeds < 1) return status::invalid("--seeds: must be >= 1");
  if (o.budget_usd < 0) return status::invalid("--budget-usd: must be >= 0 (0: none)");
  if (o.target_tokens_per_s < 0) return status::invalid("--target-tokens-per-s: must be >= 0");
  if (!(o.ipu_chip_usd > 0) || !(o.ipu_chip_watts > 0))
    return status::invalid("--ipu-chip-usd and --ipu-chip-watts must be positive");
  if (!(o.slo.ttft_p99_s > 0) || !(o.slo.tpot_p99_s > 0)) return status::invalid("--ttft-p99 and --tpot-p99 must be positive");
  std::vector<llm_search_point> g;
  for (const auto& w : o.weights)
    for (auto c : o.chips)
      for (auto pl : (w == "streaming" ? std::vector<int64_t>{0} : o.pipelines)) {
        if (pl > 0 && (pl >= c || c % pl != 0)) continue;  // must divide the chips; pl == chips is pipeline 0
        for (auto t : o.tiles)
          for (auto m : o.sram_kib)
            for (auto l : o.link_gbps)
              for (auto h : o.hop_us)
                for (auto ms : o.max_seqs)
                  for (auto tb : o.token_budget) {
                    llm_search_point p;
                    p.kind = "ipu";
                    p.chips = c;
                    p.pipeline = pl;
                    p.streaming = w == "streaming";
                    p.tiles = t;
                    p.sram_kib = m;
                    p.link_gbps = l;
                    p.hop_us = h;
                    p.max_seqs = ms;
                    p.token_budget = tb;
                    g.push_back(p);
                  }
      }
  for (const auto& gpu : o.gpus)
    for (auto ms : o.max_seqs)
      for (auto tb : o.token_budget) {
        llm_search_point p;
        p.kind = "gpu";
        p.gpu = gpu;
        p.max_seqs = ms;
        p.token_budget = tb;
        g.push_back(p);
      }
  return g;
}

result<llm_system> make_search_system(const llm_search_point& p, const decoder_dims& d) {
  if (p.kind == "gpu") return make_llm_system(p.gpu, d);
  auto b = load_ipu_base(d);
  if (!b) return b.error();
  const double scale = double(p.tiles) / kMk2Tiles;
  const double chip_usable = b->usable_fraction * double(p.tiles) * double(p.sram_kib) * 1024.0;
  llm_system s;
  s.spec = p.label();
  s.preset = "ipu-mk2 (scaled)";
  s.kind = "ipu";
  s.chips = p.chips;
  s.clock_hz = b->clock_hz;
  s.hop_bytes_per_s = p.link_gbps * 1e9;
  s.hop_latency_s = p.hop_us * 1e-6;
  s.per_layer_overhead_s = b->per_layer_overhead_s;
  s.per_step_overhead_s = b->per_step_overhead_s;
  if (!p.streaming) {
    const int64_t S = p.pipeline == 0 ? p.chips : p.pipeline;
    if (p.chips % S != 0) return status::invalid(p.label() + ": the pipeline does not divide the chips");
    const double kv = double(S) * chip_usable - d.resident_bytes();
    if (kv <= 0)
      return status::out_of_memory(p.label() + ": " + num(d.resident_bytes() / 1e9) + " GB of weights do not fit in " +
                                   num(double(S) * chip_usable / 1e9) + " GB of usable SRAM");
    s.weights = weight_home::sram;
    s.replicas = p.chips;
    s.flops_per_s = b->chip_flops * scale;
    s.weight_bytes_per_s = s.kv_bytes_per_s = b->sram_bw * scale;
    s.kv_capacity_bytes = kv;
    s.replicas_per_pool = S;
    s.hops = S - 1;
  } else {
    if (!(b->stream_bw > 0)) return status::invalid("ipu-mk2 preset: no Streaming Memory bandwidth");
    s.weights = weight_home::streaming;
    s.replicas = 1;
    s.flops_per_s = double(p.chips) * b->chip_flops * scale;
    s.weight_bytes_per_s = double(p.chips) * b->stream_bw;
    s.kv_bytes_per_s = double(p.chips) * b->sram_bw * scale;
    s.kv_capacity_bytes = double(p.chips) * chip_usable - 2 * double(d.layer_linear_params()) * d.element_bytes;
    s.collectives_per_layer = p.chips > 1 ? 2 : 0;
    s.tensor_parallel = p.chips;
    s.collective_bytes_per_s = s.hop_bytes_per_s;
    s.collective_hop_latency_s = s.hop_latency_s;
    if (s.kv_capacity_bytes <= 0) return status::out_of_memory(p.label() + ": no SRAM left for the KV cache");
  }
  s.description = "IPU-like, scaled from ipu-mk2: " + p.label();
  return s;
}

llm_search_eval evaluate_search_point(const llm_search_point& p, const decoder_dims& d, const llm_search_options& o,
                                      uint64_t seed) {
  llm_search_eval e;
  e.point = p;
  auto sys = make_search_system(p, d);
  if (!sys) {
    e.why = sys.error().message();
    return e;
  }
  if (p.kind == "gpu") {
    e.copy_price_usd = sys->price_usd.value_or(0);
    e.copy_watts = sys->tdp_watts;
  } else {
    e.copy_price_usd = double(p.chips) * o.ipu_chip_usd * area_factor(p);
    e.copy_watts = double(p.chips) * o.ipu_chip_watts * area_factor(p);
  }
  schedule_options so;
  so.policy = batching::continuous;
  so.max_seqs = p.max_seqs;
  so.token_budget = p.token_budget;
  auto at = throughput_at_slo(*sys, d, chat_traffic{}, so, o.slo, o.requests, seed);
  if (!at) {
    e.why = at.error().message();
    return e;
  }
  if (!(at->rate_per_s > 0) || !(at->report.tokens_per_s > 0)) {
    e.why = "misses the SLO at any load";
    return e;
  }
  e.feasible = true;
  e.tokens_per_s = at->report.tokens_per_s;
  e.ttft_p99_s = at->report.ttft_p99_s;
  e.tpot_p50_s = at->report.tpot_p50_s;
  e.tpot_p99_s = at->report.tpot_p99_s;
  e.copies = o.target_tokens_per_s > 0 ? int64_t(std::ceil(o.target_tokens_per_s / e.tokens_per_s)) : 1;
  e.price_usd = double(e.copies) * e.copy_price_usd;
  e.within_budget = o.budget_usd <= 0 || e.price_usd <= o.budget_usd;
  auto c = cost_per_million_tokens(e.copy_price_usd, e.copy_watts, e.tokens_per_s, o.cost);
  e.usd_per_mtok = c ? c->usd_per_million_tokens : std::numeric_limits<double>::infinity();
  e.tokens_med = e.tokens_lo = e.tokens_hi = e.tokens_per_s;
  e.usd_med = e.usd_lo = e.usd_hi = e.usd_per_mtok;
  return e;
}

namespace {

// A point re-run over o.seeds seeds: medians and extremes; per-seed tokens/s in `per_seed`.
llm_search_eval over_seeds(const llm_search_point& p, const decoder_dims& d, const llm_search_options& o,
                           std::vector<double>* per_seed, int64_t& sims) {
  std::vector<double> tok, usd;
  llm_search_eval first;
  for (int64_t k = 0; k < o.seeds; ++k) {
    auto e = evaluate_search_point(p, d, o, o.seed + uint64_t(k));
    ++sims;
    if (k == 0) first = e;
    if (!e.feasible) {
      first.feasible = false;
      first.why = "seed " + std::to_string(o.seed + uint64_t(k)) + ": " + e.why;
      tok.push_back(0);
      continue;
    }
    tok.push_back(e.tokens_per_s);
    usd.push_back(e.usd_per_mtok);
  }
  if (per_seed) *per_seed = tok;
  first.tokens_med = median_of(tok);
  first.tokens_lo = *std::min_element(tok.begin(), tok.end());
  first.tokens_hi = *std::max_element(tok.begin(), tok.end());
  if (!usd.empty()) {
    first.usd_med = median_of(usd);
    first.usd_lo = *std::min_element(usd.begin(), usd.end());
    first.usd_hi = *std::max_element(usd.begin(), usd.end());
  }
  return first;
}

}  // namespace

result<llm_search_result> run_llm_search(const llm_search_options& o, std::ostream& log) {
  auto shape = resolve_decoder_shape(o.model);
  if (!shape) return shape.error();
  auto d = decoder_dims_of(*shape);
  if (!d) return d.error();
  auto grid = llm_search_grid(o);
  if (!grid) return grid.error();
  const auto t0 = std::chrono::steady_clock::now();
  auto secs = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  llm_search_result r;
  const size_t n = grid->size();
  for (size_t i = 0; i < n; ++i) {
    r.evals.push_back(evaluate_search_point((*grid)[i], *d, o, o.seed));
    ++r.simulations;
    if ((i + 1) % 10 == 0 || i + 1 == n)
      log << "search: " << (i + 1) << "/" << n << " points, " << num(secs()) << " s\n" << std::flush;
  }
  r.evaluated = int64_t(n);
  r.grid_seconds = secs();
  // Pareto front: price up, tokens/s strictly up (feasible, within budget).
  std::vector<size_t> ok;
  for (size_t i = 0; i < n; ++i)
    if (r.evals[i].feasible && r.evals[i].within_budget) ok.push_back(i);
  std::sort(ok.begin(), ok.end(), [&](size_t a, size_t b) {
    const auto &x = r.evals[a], &y = r.evals[b];
    return x.price_usd != y.price_usd ? x.price_usd < y.price_usd : x.tokens_per_s > y.tokens_per_s;
  });
  // A point is on the front when no other feasible point is at most its price with more tokens/s,
  // or cheaper with as many (ties on both stay on the front); listed by price.
  auto delivered = [&](size_t i) { return r.evals[i].tokens_per_s * double(r.evals[i].copies); };
  for (size_t i : ok) {
    bool dominated = false;
    for (size_t j : ok) {
      if (j == i) continue;
      const double pi = r.evals[i].price_usd, pj = r.evals[j].price_usd;
      if ((pj <= pi && delivered(j) > delivered(i)) || (pj < pi && delivered(j) >= delivered(i))) {
        dominated = true;
        break;
      }
    }
    if (!dominated) {
      r.evals[i].pareto = true;
      r.pareto.push_back(i);
    }
  }
  // The cheapest per token of each kind; ties go to the first in grid order.
  for (size_t i = 0; i < n; ++i) {
    if (!r.evals[i].feasible || !r.evals[i].within_budget) continue;
    long& best = r.evals[i].point.kind == "ipu" ? r.best_ipu : r.best_gpu;
    if (best < 0 || r.evals[i].usd_per_mtok < r.evals[size_t(best)].usd_per_mtok) best = long(i);
  }
  // Re-run the reported points over seeds.
  log << "search: re-running the front and the best points on " << o.seeds << " seeds\n" << std::flush;
  for (size_t i : r.pareto) {
    auto e = over_seeds(r.evals[i].point, *d, o, nullptr, r.simulations);
    auto& x = r.evals[i];
    x.tokens_med = e.tokens_med, x.tokens_lo = e.tokens_lo, x.tokens_hi = e.tokens_hi;
    x.usd_med = e.usd_med, x.usd_lo = e.usd_lo, x.usd_hi = e.usd_hi;
  }
  std::vector<double> ipu_tok, gpu_tok;
  if (r.best_ipu >= 0) r.ipu_seeds = over_seeds(r.evals[size_t(r.best_ipu)].point, *d, o, &ipu_tok, r.simulations);
  if (r.best_gpu >= 0) r.gpu_seeds = over_seeds(r.evals[size_t(r.best_gpu)].point, *d, o, &gpu_tok, r.simulations);
  if (r.best_ipu >= 0 && r.best_gpu >= 0) {
    // Per seed: the per-chip IPU price at which the IPU-like point costs 20% / 30% less per token.
    const auto& ie = r.ipu_seeds;
    std::vector<double> p20, p30;
    for (size_t k = 0; k < ipu_tok.size() && k < gpu_tok.size(); ++k) {
      if (!(ipu_tok[k] > 0) || !(gpu_tok[k] > 0)) continue;
      auto g = cost_per_million_tokens(r.gpu_seeds.copy_price_usd, r.gpu_seeds.copy_watts, gpu_tok[k], o.cost);
      if (!g) continue;
      const double chips = double(ie.point.chips);
      p20.push_back(break_even_price_usd(0.8 * g->usd_per_million_tokens, ie.copy_watts, ipu_tok[k], o.cost) / chips);
      p30.push_back(break_even_price_usd(0.7 * g->usd_per_million_tokens, ie.copy_watts, ipu_tok[k], o.cost) / chips);
    }
    if (!p20.empty()) {
      r.ipu_price_20_med = median_of(p20);
      r.ipu_price_20_lo = *std::min_element(p20.begin(), p20.end());
      r.ipu_price_20_hi = *std::max_element(p20.begin(), p20.end());
      r.ipu_price_30_med = median_of(p30);
      r.ipu_price_30_lo = *std::min_element(p30.begin(), p30.end());
      r.ipu_price_30_hi = *std::max_element(p30.begin(), p30.end());
    }
  }
  // Sensitivity around the best IPU-like point: each hardware parameter doubled and halved.
  if (o.sensitivity && r.best_ipu >= 0) {
    log << "search: sensitivity around " << r.ipu_seeds.point.label() << "\n" << std::flush;
    const auto base = r.ipu_seeds.point;
    const double base_usd = r.ipu_seeds.usd_med;
    for (double f : {2.0, 0.5}) {
      struct change {
        const char* name;
        llm_search_point p;
        llm_search_options opt;
        std::string value;
      };
      std::vector<change> changes;
      auto add = [&](const char* name, auto edit) {
        change c{name, base, o, ""};
        edit(c);
        changes.push_back(c);
      };
      add("tiles per chip", [&](change& c) { c.p.tiles = std::max<int64_t>(1, int64_t(std::llround(double(base.tiles) * f))); c.value = std::to_string(c.p.tiles); });
      add("SRAM per tile (KiB)", [&](change& c) { c.p.sram_kib = std::max<int64_t>(1, int64_t(std::llround(double(base.sram_kib) * f))); c.value = std::to_string(c.p.sram_kib); });
      add("chips", [&](change& c) {
        c.p.chips = std::max<int64_t>(1, int64_t(std::llround(double(base.chips) * f)));
        if (c.p.pipeline > 0 && c.p.chips % c.p.pipeline != 0) c.p.pipeline = 0;
        c.value = std::to_string(c.p.chips);
      });
      add("link bandwidth (GB/s)", [&](change& c) { c.p.link_gbps = base.link_gbps * f; c.value = num(c.p.link_gbps); });
      add("hop / sync latency (us)", [&](change& c) { c.p.hop_us = base.hop_us * f; c.value = num(c.p.hop_us); });
      add("price per chip (USD)", [&](change& c) { c.opt.ipu_chip_usd = o.ipu_chip_usd * f; c.value = num(c.opt.ipu_chip_usd); });
      add("TDP per chip (W)", [&](change& c) { c.opt.ipu_chip_watts = o.ipu_chip_watts * f; c.value = num(c.opt.ipu_chip_watts); });
      for (auto& c : changes) {
        auto e = over_seeds(c.p, *d, c.opt, nullptr, r.simulations);
        llm_sensitivity_row row;
        row.parameter = c.name;
        row.factor = f;
        row.value = c.value;
        if (e.feasible) {
          row.usd_per_mtok_med = e.usd_med;
          row.usd_lo = e.usd_lo;
          row.usd_hi = e.usd_hi;
          row.change_percent = 100.0 * (e.usd_med - base_usd) / base_usd;
        } else {
          row.change_percent = std::numeric_limits<double>::quiet_NaN();
          row.note = e.why;
        }
        r.sensitivity.push_back(row);
      }
    }
  }
  r.total_seconds = secs();
  if (!o.csv_path.empty()) {
    std::ofstream csv(o.csv_path);
    if (!csv) return status::invalid("cannot write " + o.csv_path);
    csv << "kind,gpu,chips,pipeline,weights,tiles,sram_kib,link_gbps,hop_us,max_seqs,token_budget,feasible,"
           "tokens_per_s,ttft_p99_s,tpot_p50_s,tpot_p99_s,copy_price_usd,copy_watts,copies,price_usd,usd_per_mtok,"
           "within_budget,pareto,tokens_med,tokens_lo,tokens_hi,usd_med,usd_lo,usd_hi,why\n";
    for (const auto& e : r.evals) {
      const auto& p = e.point;
      std::string why = e.why;
      std::replace(why.begin(), why.end(), ',', ';');
      std::replace(why.begin(), why.end(), '"', '\'');
      char buf[1024];
      std::snprintf(buf, sizeof buf,
                    "%s,%s,%lld,%lld,%s,%lld,%lld,%g,%g,%lld,%lld,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%lld,%.6g,%.6g,%d,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,",
                    p.kind.c_str(), p.gpu.c_str(), (long long)p.chips, (long long)p.pipeline,
                    p.kind == "gpu" ? "hbm" : (p.streaming ? "streaming" : "sram"), (long long)p.tiles,
                    (long long)p.sram_kib, p.link_gbps, p.hop_us, (long long)p.max_seqs, (long long)p.token_budget,
                    e.feasible ? 1 : 0, e.tokens_per_s, e.ttft_p99_s, e.tpot_p50_s, e.tpot_p99_s, e.copy_price_usd,
                    e.copy_watts, (long long)e.copies, e.price_usd, e.feasible ? e.usd_per_mtok : 0.0,
                    e.within_budget ? 1 : 0, e.pareto ? 1 : 0, e.tokens_med, e.tokens_lo, e.tokens_hi, e.usd_med,
                    e.usd_lo, e.usd_hi);
      csv << buf << why << "\n";
    }
  }
  return r;
}

std::string llm_search_markdown(const llm_search_result& r, const llm_search_options& o) {
  std::string s;
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "## Design-space search: %s, %s mix, SLO p99 TTFT <= %.3g s and p99 TPOT <= %.3g s, %lld requests "
                "per run, seeds %llu..%llu\n\n",
                o.model.c_str(), o.workload.c_str(), o.slo.ttft_p99_s, o.slo.tpot_p99_s, (long long)o.requests,
                (unsigned long long)o.seed, (unsigned long long)(o.seed + uint64_t(o.seeds) - 1));
  s += buf;
  std::snprintf(buf, sizeof buf,
                "Cost: %.3g years, utilisation %.2g, $%.3g/kWh; IPU-like chips $%.0f and %.0f W per Mk2-sized chip, "
                "scaled with the die (llm_search.hpp).%s\n\n",
                o.cost.amortisation_years, o.cost.utilisation, o.cost.usd_per_kwh, o.ipu_chip_usd, o.ipu_chip_watts,
                o.budget_usd > 0 ? (" Budget $" + num(o.budget_usd) + ".").c_str() : "");
  s += buf;
  s += "| cheapest | configuration | tok/s at the SLO, median (min..max) | $/Mtok, median (min..max) | price | p99 TTFT | p50 / p99 TPOT |\n|---|---|---|---|---|---|---|\n";
  using best_row = std::tuple<const char*, long, const llm_search_eval*>;
  for (auto [name, idx, e] : {best_row{"IPU-like", r.best_ipu, &r.ipu_seeds}, best_row{"GPU-like", r.best_gpu, &r.gpu_seeds}}) {
    if (idx < 0) {
      s += std::string("| ") + name + " | none meets the SLO within the budget | | | | | |\n";
      continue;
    }
    std::snprintf(buf, sizeof buf, "| %s | %s | %.0f (%.0f..%.0f) | $%.4f ($%.4f..$%.4f) | $%.0f | %.2f s | %.1f / %.1f ms |\n",
                  name, e->point.label().c_str(), e->tokens_med, e->tokens_lo, e->tokens_hi, e->usd_med, e->usd_lo,
                  e->usd_hi, e->copy_price_usd, e->ttft_p99_s, e->tpot_p50_s * 1e3, e->tpot_p99_s * 1e3);
    s += buf;
  }
  if (r.best_ipu >= 0 && r.best_gpu >= 0) {
    std::snprintf(buf, sizeof buf,
                  "\nThe seed's 20-30%% saving holds for the IPU-like system if one of its chips costs at most "
                  "**$%.0f** (20%% below the GPU-like system's $/Mtok; seeds: $%.0f..$%.0f) to **$%.0f** (30%% below; "
                  "$%.0f..$%.0f).\n",
                  r.ipu_price_20_med, r.ipu_price_20_lo, r.ipu_price_20_hi, r.ipu_price_30_med, r.ipu_price_30_lo,
                  r.ipu_price_30_hi);
    s += buf;
  }
  s += "\n### Pareto front (price of one copy vs tokens/s at the SLO; medians over seeds)\n\n"
       "| configuration | price | tok/s, median (min..max) | p50 TPOT | $/Mtok, median (min..max) |\n|---|---|---|---|---|\n";
  for (size_t i : r.pareto) {
    const auto& e = r.evals[i];
    std::snprintf(buf, sizeof buf, "| %s | $%.0f | %.0f (%.0f..%.0f) | %.2f ms | $%.4f ($%.4f..$%.4f) |\n",
                  e.point.label().c_str(), e.price_usd, e.tokens_med, e.tokens_lo, e.tokens_hi, e.tpot_p50_s * 1e3,
                  e.usd_med, e.usd_lo, e.usd_hi);
    s += buf;
  }
  if (!r.sensitivity.empty()) {
    std::snprintf(buf, sizeof buf,
                  "\n### Sensitivity around the cheapest IPU-like point ($%.4f/Mtok median)\n\n"
                  "| parameter | x | value | $/Mtok, median (min..max) | change |\n|---|---|---|---|---|\n",
                  r.ipu_seeds.usd_med);
    s += buf;
    for (const auto& row : r.sensitivity) {
      if (std::isnan(row.change_percent))
        std::snprintf(buf, sizeof buf, "| %s | %g | %s | infeasible: %s | |\n", row.parameter.c_str(), row.factor,
                      row.value.c_str(), row.note.c_str());
      else
        std::snprintf(buf, sizeof buf, "| %s | %g | %s | $%.4f ($%.4f..$%.4f) | %+.1f%% |\n", row.parameter.c_str(),
                      row.factor, row.value.c_str(), row.usd_per_mtok_med, row.usd_lo, row.usd_hi, row.change_percent);
      s += buf;
    }
  }
  int64_t feasible = 0;
  for (const auto& e : r.evals) feasible += e.feasible ? 1 : 0;
  std::snprintf(buf, sizeof buf,
                "\n### Speed\n\n%lld grid points (%lld meet the SLO) in %.2f s: **%.1f points/s** on one core; %lld "
                "throughput-at-SLO searches in all (grid, seeds, sensitivity) in %.2f s.\n",
                (long long)r.evaluated, (long long)feasible, r.grid_seconds,
                r.grid_seconds > 0 ? double(r.evaluated) / r.grid_seconds : 0.0, (long long)r.simulations,
                r.total_seconds);
  s += buf;
  return s;
}

}  // namespace tessera::timing
