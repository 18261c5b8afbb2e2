// One model on several systems at the same SLO, with the held-out multi-GPU error (llm_compare.hpp).
#include "tessera/timing/llm_compare.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "report_text.hpp"

namespace tessera::timing {
using detail::money;
using detail::num;

result<llm_compare_report> run_llm_compare(const llm_compare_options& o) {
  auto shape = resolve_decoder_shape(o.model);
  if (!shape) return shape.error();
  auto dims = decoder_dims_of(*shape);
  if (!dims) return dims.error();
  if (o.systems.empty()) return status::invalid("compare: no systems (--systems)");
  if (o.requests < 10) return status::invalid("compare: --requests must be >= 10, got " + std::to_string(o.requests));
  schedule_options cont = o.continuous;
  cont.policy = batching::continuous;
  llm_compare_report rep;
  rep.model = dims->name;
  rep.parameters = double(shape->parameter_count());
  const llm_compare_row* ref = nullptr;
  std::vector<llm_system> built;
  for (const auto& spec : o.systems) {
    llm_compare_row row;
    row.system = spec;
    auto sys = make_llm_system(spec, *dims);
    if (!sys) {
      // Does not fit (or cannot be built for this model): a row saying why; a bad spec is an error.
      if (sys.error().code() != errc::out_of_memory) return sys.error().with_context("system " + spec);
      row.refused = sys.error().message();
      rep.rows.push_back(row);
      built.emplace_back();
      continue;
    }
    row.description = sys->description;
    row.kind = sys->kind;
    row.chips = sys->chips;
    row.replicas = sys->replicas;
    row.kv_capacity_gb = sys->kv_capacity_bytes / 1e9;
    llm_step_batch one;
    one.decode_contexts = {512};
    auto t = model_llm_step(*sys, *dims, one);
    if (!t) return t.error().with_context(spec);
    row.single_decode_ms = t->seconds * 1e3;
    auto p = throughput_at_slo(*sys, *dims, o.traffic, cont, o.slo, o.requests, o.seed);
    if (!p) return p.error().with_context(spec);
    row.at_slo = *p;
    // A rate below 1% of the all-at-once throughput means only an idle system meets the SLO.
    row.tokens_per_s = p->rate_per_s > 0 && p->report.tokens_per_s >= 0.01 * p->max_tokens_per_s ? p->report.tokens_per_s : 0;
    std::optional<double> price = sys->price_usd;
    if (!price && sys->kind == "ipu" && o.ipu_price_usd > 0) price = o.ipu_price_usd * double(sys->chips);
    if (row.tokens_per_s > 0) {
      auto c = cost_per_million_tokens(price.value_or(0), sys->tdp_watts, row.tokens_per_s, o.cost);
      if (!c) return c.error();
      row.kwh_per_mtok = c->kwh_per_million_tokens;
      if (price) row.usd_per_mtok = c->usd_per_million_tokens;
    }
    rep.rows.push_back(row);
    built.push_back(*sys);
  }
  for (const auto& r : rep.rows)
    if (ref == nullptr && r.kind == "gpu" && r.usd_per_mtok >= 0) ref = &r;
  if (ref != nullptr) {
    rep.reference = ref->system;
    for (size_t i = 0; i < rep.rows.size(); ++i) {
      auto& r = rep.rows[i];
      if (r.kind == "ipu" && r.tokens_per_s > 0)
        r.ipu_parity_usd = break_even_price_usd(ref->usd_per_mtok, built[i].tdp_watts, r.tokens_per_s, o.cost) / double(r.chips);
    }
  }
  if (o.held_out) {
    auto all = load_llm_anchors();
    if (!all) return all.error();
    std::vector<llm_anchor> multi;
    for (const auto& a : *all)
      if (llm_anchor_family(a).ends_with("multi-GPU")) multi.push_back(a);
    auto v = validate_llm_timing(multi);
    if (!v) return v.error();
    rep.multi_gpu = *v;
  }
  return rep;
}

std::string llm_compare_markdown(const llm_compare_report& r, const llm_compare_options& o) {
  std::ostringstream md;
  md << "## " << r.model << " (" << num(r.parameters / 1e9, "%.1f") << "B parameters) at the same SLO (modelled clock)\n\n";
  md << "SLO: p99 TTFT <= " << o.slo.ttft_p99_s << " s, p99 TPOT <= " << o.slo.tpot_p99_s * 1e3
     << " ms; ShareGPT-like chat (prompt mean " << o.traffic.prompt.mean << ", output mean " << o.traffic.output.mean
     << " tokens), Poisson arrivals, " << o.requests << " requests per run, seed " << o.seed
     << "; continuous batching (up to " << o.continuous.max_seqs << " sequences, " << o.continuous.token_budget
     << " new tokens per step and replica). Cost: " << o.cost.amortisation_years << " years, utilisation "
     << o.cost.utilisation << ", $" << o.cost.usd_per_kwh << "/kWh.\n\n";
  md << "| system | chips | modelled as | KV per pool GB | 1-sequence decode ms | tok/s at the SLO | tok/s per chip | "
        "p99 TTFT s | p99 TPOT ms | $/Mtok | kWh/Mtok | IPU price for parity |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& row : r.rows) {
    if (!row.refused.empty()) {
      md << "| " << row.system << " | - | does not fit: " << row.refused << " | - | - | - | - | - | - | - | - | - |\n";
      continue;
    }
    md << "| " << row.system << " | " << row.chips << " | " << row.description << " | " << num(row.kv_capacity_gb, "%.1f")
       << " | " << num(row.single_decode_ms, "%.2f") << " | ";
    if (row.tokens_per_s <= 0) {
      md << "misses the SLO at any load (" << num(row.at_slo.max_tokens_per_s, "%.0f") << " tok/s with all requests at t=0) | - | - | - | - | - | - |\n";
      continue;
    }
    md << num(row.tokens_per_s, "%.0f") << " | " << num(row.tokens_per_s / double(row.chips), "%.0f") << " | "
       << num(row.at_slo.report.ttft_p99_s, "%.3f") << " | " << num(row.at_slo.report.tpot_p99_s * 1e3, "%.1f") << " | "
       << money(row.usd_per_mtok) << " | " << num(row.kwh_per_mtok, "%.3g") << " | "
       << (row.kind == "ipu" && row.ipu_parity_usd != 0 ? money(row.ipu_parity_usd) : std::string("-")) << " |\n";
  }
  if (!r.reference.empty())
    md << "\nIPU price for parity: the price per IPU at which that system's $/Mtok equals " << r.reference << "'s.\n";
  if (r.multi_gpu) {
    md << "\n### Held-out multi-GPU rows (tensor parallel; nothing fitted on them)\n\n"
          "| case | system | model | conditions | unit | modelled | published | error % | source |\n"
          "|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& row : r.multi_gpu->rows) {
      const auto& a = row.anchor;
      std::string cond = a.kind == "static_throughput"
                             ? "batch " + std::to_string(a.batch) + ", in " + std::to_string(a.input) + ", out " + std::to_string(a.output)
                             : "batch " + std::to_string(a.batch) + ", in " + std::to_string(a.input);
      if (a.precision != "fp16") cond += ", " + a.precision;
      md << "| " << a.id << " | " << a.system << " | " << a.model << " | " << cond << " | " << a.unit << " | "
         << num(row.model) << " | " << num(a.value) << " | " << num(row.error_percent(), "%+.1f") << " | "
         << a.source_url.substr(0, a.source_url.find(' ')) << " |\n";
    }
    md << "\nmulti-GPU held-out error: " << r.multi_gpu->rows.size() << " rows, mean |error| "
       << num(r.multi_gpu->mean_abs_error_percent, "%.1f") << "%, max " << num(r.multi_gpu->max_abs_error_percent, "%.1f")
       << "%\n";
  }
  return md.str();
}

}  // namespace tessera::timing
