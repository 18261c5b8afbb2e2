// The seed's experiment: configurations, saturation and latency runs, computed sample, tables.
#include "tessera/experiment/seed_experiment.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <variant>

#include "tessera/host/remote_backend.hpp"
#include "tessera/host/tile_backend.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::experiment {
namespace {

// What logit_error measures, for the reader.
std::string error_name(models::dtype d) {
  return d == models::dtype::fp32 ? "abs diff" : "abs diff / max(1, max |fp32 logit|)";
}

}  // namespace


namespace {

serving::batching_config padded(const experiment_options& o, bool fixed) {
  serving::batching_config b;
  b.kind = fixed ? serving::policy_kind::static_padded : serving::policy_kind::dynamic_padded;
  b.max_batch_size = o.batch_size;
  b.token_budget = 0;  // padded batches are limited by B only
  b.max_sequence_length = o.max_sequence_length;
  b.max_queue_delay = std::chrono::microseconds(static_cast<int64_t>(o.max_queue_delay_ms * 1000));
  b.max_inflight_batches = o.max_inflight_batches;
  return b;
}

serving::batching_config packed(const experiment_options& o) {
  serving::batching_config b;
  b.kind = serving::policy_kind::token_budget;
  b.max_batch_size = 0;  // no cap on sequences: the token budget decides
  b.token_budget = o.token_budget;
  b.max_sequence_length = o.max_sequence_length;
  b.max_queue_delay = std::chrono::microseconds(static_cast<int64_t>(o.max_queue_delay_ms * 1000));
  b.max_inflight_batches = o.max_inflight_batches;
  return b;
}

virtual_backend_spec device(const std::string& name, const std::string& kind, const std::string& preset,
                            serving::batching_config b, const experiment_options& o) {
  virtual_backend_spec s;
  s.name = name;
  s.kind = kind;
  s.preset = preset;
  s.batching = b;
  s.max_sequence_length = o.max_sequence_length;
  return s;
}

std::string batching_text(const serving::batching_config& b) {
  std::ostringstream s;
  switch (b.kind) {
    case serving::policy_kind::static_padded: s << "static " << b.max_batch_size << "x" << b.max_sequence_length; break;
    case serving::policy_kind::dynamic_padded: s << "dynamic <=" << b.max_batch_size << " padded"; break;
    case serving::policy_kind::token_budget: s << "packed " << b.token_budget << " tok"; break;
  }
  return s.str();
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

bool same_modelled(const run_result& a, const run_result& b) {
  if (a.requests.size() != b.requests.size() || a.batches.size() != b.batches.size()) return false;
  for (size_t i = 0; i < a.requests.size(); ++i)
    if (a.requests[i].done_s != b.requests[i].done_s || a.requests[i].dispatch_s != b.requests[i].dispatch_s ||
        a.requests[i].backend != b.requests[i].backend)
      return false;
  return a.summary.p99_latency_s == b.summary.p99_latency_s && a.summary.throughput_rps == b.summary.throughput_rps;
}

}  // namespace

std::vector<std::string> configuration_names() {
  return {"tiles-packed", "gpu-static", "gpu-dynamic", "gpu-packed", "tiles-static", "tiles-dynamic", "hybrid"};
}

std::vector<configuration> seed_configurations(const experiment_options& o) {
  std::vector<configuration> all;
  auto one = [&](std::string name, std::string desc, virtual_backend_spec s) {
    configuration c;
    c.name = std::move(name);
    c.description = std::move(desc);
    c.backends.push_back(std::move(s));
    all.push_back(std::move(c));
  };
  one("tiles-packed", "tile chip, token-budget packing (the seed's IPU)",
      device("tiles0", "tiles", o.tiles_preset, packed(o), o));
  one("gpu-static", "GPU, static batches padded to the max length (the seed's GPU)",
      device("gpu0", "gpu", o.gpu_preset, padded(o, true), o));
  one("gpu-dynamic", "GPU, dynamic batches padded to their longest",
      device("gpu0", "gpu", o.gpu_preset, padded(o, false), o));
  one("gpu-packed", "GPU with token-budget packing (crossed)", device("gpu0", "gpu", o.gpu_preset, packed(o), o));
  one("tiles-static", "tile chip with static padded batches (crossed)",
      device("tiles0", "tiles", o.tiles_preset, padded(o, true), o));
  one("tiles-dynamic", "tile chip with dynamic padded batches (crossed)",
      device("tiles0", "tiles", o.tiles_preset, padded(o, false), o));
  configuration h;
  h.name = "hybrid";
  h.description = "long (> " + std::to_string(o.hybrid_threshold) + " tokens) to the tile chip packed, short to the GPU dynamic";
  h.backends.push_back(device("tiles0", "tiles", o.tiles_preset, packed(o), o));
  h.backends.push_back(device("gpu0", "gpu", o.gpu_preset, padded(o, false), o));
  h.routing.strategy = serving::routing_strategy::hybrid_length;
  h.routing.long_threshold = o.hybrid_threshold;
  all.push_back(std::move(h));
  if (o.configs.empty()) return all;
  std::vector<configuration> chosen;
  for (auto& c : all)
    if (std::find(o.configs.begin(), o.configs.end(), c.name) != o.configs.end()) chosen.push_back(c);
  return chosen;
}

result<std::vector<experiment_row>> run_seed_experiment(const experiment_options& o, const compute_provider& compute,
                                                        const std::shared_ptr<const models::bert_model>& check_model,
                                                        const log_fn& log) {
  auto shape = models::shape_preset(o.model_shape);
  if (!shape) return shape.error();
  auto configs = seed_configurations(o);
  if (configs.empty()) return status::invalid("no configuration selected; known: tiles-packed, gpu-static, ...");
  auto say = [&](const std::string& s) {
    if (log) log(s);
  };
  std::vector<experiment_row> rows;
  for (double share : o.long_shares) {
    trace sat = poisson_trace({.requests = o.saturation_requests, .rate = 0, .long_share = share, .seed = o.seed});
    // Saturation first (it also sets the default load).
    std::vector<run_summary> sats;
    for (const auto& c : configs) {
      virtual_run_config vc;
      vc.shape = *shape;
      vc.backends = c.backends;
      vc.routing = c.routing;
      auto r = run_virtual(sat, vc);
      if (!r) return r.error().with_context(c.name + " at saturation");
      sats.push_back(r->summary);
      say(c.name + " long=" + fmt("%.0f%%", share * 100) + ": saturation " + fmt("%.1f", r->summary.throughput_rps) +
          " req/s (modelled)");
    }
    double load = o.load_rps;
    if (load <= 0) {
      double gpu_static = 0;
      for (size_t i = 0; i < configs.size(); ++i)
        if (configs[i].name == "gpu-static") gpu_static = sats[i].throughput_rps;
      if (gpu_static <= 0) gpu_static = sats[0].throughput_rps;
      load = o.load_fraction * gpu_static;
    }
    trace lat_trace = poisson_trace({.requests = o.latency_requests, .rate = load, .long_share = share, .seed = o.seed + 1});
    trace sample = poisson_trace({.requests = o.computed_requests, .rate = load, .long_share = share, .seed = o.seed + 2});
    for (size_t i = 0; i < configs.size(); ++i) {
      const auto& c = configs[i];
      experiment_row row;
      row.config = c.name;
      row.long_share = share;
      row.device_count = static_cast<int>(c.backends.size());
      bool tdp_known = true, price_known = true;
      for (size_t k = 0; k < c.backends.size(); ++k) {
        row.devices += (k ? " + " : "") + c.backends[k].preset;
        row.batching += (k ? " + " : "") + batching_text(c.backends[k].batching);
        auto preset = timing::load_preset(c.backends[k].preset);
        if (!preset) return preset.error();
        const auto& pub = std::visit([](const auto& x) -> const timing::published_figures& { return x.published; }, *preset);
        if (pub.tdp_watts) row.tdp_w += *pub.tdp_watts;
        else tdp_known = false, row.cost_note += (row.cost_note.empty() ? "" : "; ") + c.backends[k].preset + ": no TDP";
        if (pub.list_price_usd) row.price_usd += *pub.list_price_usd;
        else price_known = false, row.cost_note += (row.cost_note.empty() ? "" : "; ") + c.backends[k].preset + ": no list price";
      }
      if (!tdp_known) row.tdp_w = 0;
      if (!price_known) row.price_usd = 0;
      row.saturation_rps = sats[i].throughput_rps;
      row.saturation_padding = sats[i].padding_share;
      row.saturation_batch = sats[i].mean_batch_sequences;
      row.load_rps = load;
      virtual_run_config vc;
      vc.shape = *shape;
      vc.backends = c.backends;
      vc.routing = c.routing;
      auto lr = run_virtual(lat_trace, vc);
      if (!lr) return lr.error().with_context(c.name + " at " + fmt("%.1f", load) + " req/s");
      row.p50_s = lr->summary.p50_latency_s;
      row.p99_s = lr->summary.p99_latency_s;
      for (int k = 1; k <= o.slo_points; ++k) {
        const double offered = row.saturation_rps * double(k) / double(o.slo_points);
        trace t = poisson_trace({.requests = o.latency_requests, .rate = offered, .long_share = share, .seed = o.seed + 3});
        auto cr = run_virtual(t, vc);
        if (!cr) return cr.error().with_context(c.name + " curve at " + fmt("%.1f", offered) + " req/s");
        row.curve.push_back({offered, cr->summary.throughput_rps, cr->summary.p50_latency_s, cr->summary.p99_latency_s});
      }
      for (double slo_ms : o.slo_p99_ms) {
        double best = 0;  // the highest load before the first point that misses (p99 grows with load)
        for (const auto& pt : row.curve) {
          if (pt.p99_s * 1e3 > slo_ms) break;
          best = pt.load_rps;
        }
        row.slo_rps.push_back(best);
      }
      if (!o.timing_only && o.computed_requests > 0 && compute) {
        virtual_run_config cc = vc;
        std::string notes;
        for (auto& b : cc.backends) {
          b.compute = compute(c, b);
          if (!b.compute) return status::invalid("no compute backend for " + c.name + "/" + b.name);
          notes += (notes.empty() ? "" : " + ") + b.compute->info().kind;
        }
        cc.check_model = check_model;
        cc.computed_in = o.compute_dtype;
        auto computed = run_virtual(sample, cc);
        if (!computed) return computed.error().with_context(c.name + " computed sample");
        auto replay = run_virtual(sample, vc);
        if (!replay) return replay.error();
        row.computed = computed->summary.completed;
        row.wall_rps = computed->summary.wall_rps;
        row.max_logit_error = computed->summary.max_abs_logit_error;
        row.modelled_match = same_modelled(*computed, *replay);
        row.compute_note = notes;
        for (const auto& b : cc.backends) {
          auto it = computed->summary.checks.find(b.name);
          const int64_t n = it == computed->summary.checks.end() ? 0 : it->second.checked;
          const double err = n ? it->second.max_abs_logit_error : 0;
          row.check += (row.check.empty() ? "" : "; ") + b.name + ": " + describe_compute(*b.compute) + " in " +
                       std::string(models::dtype_name(o.compute_dtype)) + " vs in-process fp32 reference_forward, " +
                       std::to_string(n) + " answers, max " + error_name(o.compute_dtype) + " " + fmt("%.2e", err) +
                       ", tolerance " + fmt("%.0e", logit_tolerance_of(o.compute_dtype));
        }
        if (computed->summary.failed > 0) {
          std::string first;
          for (const auto& q : computed->requests)
            if (!q.ok) {
              first = q.backend + (q.backend.empty() ? "" : ": ") + q.error;
              break;
            }
          return status::internal(c.name + ": " + std::to_string(computed->summary.failed) +
                                  " computed requests failed (computed by " + notes + "), e.g. " + first);
        }
        if (check_model && computed->summary.checked != computed->summary.completed)
          return status::internal(c.name + ": not every computed answer was checked");
        if (!(row.max_logit_error <= logit_tolerance_of(o.compute_dtype)))
          return status::internal(c.name + ": logits differ from the reference forward by " +
                                  fmt("%.3g", row.max_logit_error) + " (> " +
                                  fmt("%.0e", logit_tolerance_of(o.compute_dtype)) + "): " + row.check);
        if (!row.modelled_match)
          return status::internal(c.name + ": the computed run's modelled times differ from the timing-only replay");
        say(c.name + " long=" + fmt("%.0f%%", share * 100) + ": computed " + std::to_string(row.computed) +
            " requests at " + fmt("%.1f", row.wall_rps) + " req/s wall; " + row.check);
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

double rps_per_kw(const experiment_row& r) { return r.tdp_w > 0 ? r.saturation_rps / (r.tdp_w / 1000) : 0; }

double rps_per_kusd(const experiment_row& r) { return r.price_usd > 0 ? r.saturation_rps / (r.price_usd / 1000) : 0; }

double usd_per_million(const experiment_row& r, const experiment_options& o) {
  if (r.tdp_w <= 0 || r.price_usd <= 0 || r.saturation_rps <= 0 || o.amortization_years <= 0) return 0;
  const double seconds = o.amortization_years * 365.25 * 86400;
  const double usd_per_s = r.price_usd / seconds + r.tdp_w / 1000 * o.energy_usd_per_kwh / 3600;
  return usd_per_s / r.saturation_rps * 1e6;
}

std::string describe_compute(const backends::backend& b) {
  if (auto* r = dynamic_cast<const host::remote_backend*>(&b)) {
    if (r->child_pid() > 0) return "tessera-gpu process (pid " + std::to_string(r->child_pid()) + ")";
    return "remote " + b.info().kind + " process";
  }
  if (dynamic_cast<const host::tile_backend*>(&b)) {
    std::string pids;
    int n = 0;
    for (const auto& rep : b.replicas())
      for (int64_t pid : rep.pids) pids += (n++ ? " " : "") + std::to_string(pid);
    return std::to_string(n) + " tessera-tile processes (pids " + pids + ")";
  }
  return "in-process " + b.info().kind + " reference engine";
}

std::string rows_markdown(const std::vector<experiment_row>& rows, const experiment_options& o,
                          const std::string& compute_note) {
  std::ostringstream s;
  s << "Modelled: " << o.model_shape << " fp16, seed mix (short U[8,64], long U[200,512]); saturation = "
    << o.saturation_requests << " requests queued at t=0; latency = " << o.latency_requests
    << " Poisson arrivals at the stated load; timing-only.\n";
  if (!o.timing_only && o.computed_requests > 0)
    s << "Computed for real: " << o.computed_requests << " requests per row at the same load (" << compute_note
      << "), each answer's logits checked against the in-process fp32 reference forward (max "
      << error_name(o.compute_dtype) << " <= " << fmt("%.0e", logit_tolerance_of(o.compute_dtype))
      << "); their modelled times equal a timing-only replay.\n";
  s << "\n| long % | configuration | devices | batching | modelled req/s (saturation) | padding % | seqs/batch | load req/s | p50 ms | p99 ms | wall req/s (computed) |\n";
  s << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    s << "| " << fmt("%.0f", r.long_share * 100) << " | " << r.config << " | " << r.devices << " | " << r.batching
      << " | " << fmt("%.0f", r.saturation_rps) << " | " << fmt("%.0f", r.saturation_padding * 100) << " | "
      << fmt("%.1f", r.saturation_batch) << " | " << fmt("%.0f", r.load_rps) << " | " << fmt("%.2f", r.p50_s * 1e3)
      << " | " << fmt("%.2f", r.p99_s * 1e3) << (r.load_rps > r.saturation_rps ? " (overloaded)" : "") << " | "
      << (r.computed > 0 ? fmt("%.1f", r.wall_rps) + " (" + std::to_string(r.computed) + ")" : std::string("-"))
      << " |\n";
  }
  bool any_check = false;
  for (const auto& r : rows) any_check = any_check || !r.check.empty();
  if (any_check) {
    s << "\nChecks of the computed samples (what computed each device's answers, against what):\n\n"
         "| long % | configuration | check |\n|---|---|---|\n";
    for (const auto& r : rows)
      if (!r.check.empty()) s << "| " << fmt("%.0f", r.long_share * 100) << " | " << r.config << " | " << r.check << " |\n";
  }
  // The seed's headline ratios, for the reader.
  auto find = [&](const std::string& c, double share) -> const experiment_row* {
    for (const auto& r : rows)
      if (r.config == c && r.long_share == share) return &r;
    return nullptr;
  };
  s << "\n| long % | tiles-packed / gpu-static (seed: 580/320 = 1.81 at 0%, 510/280 = 1.82 at 40%) | tiles-packed / gpu-packed (architecture, best GPU batching) | gpu-packed / gpu-static (batching) | hybrid / gpu-static (2 devices vs 1) | hybrid / gpu-static per device |\n|---|---|---|---|---|---|\n";
  for (double share : o.long_shares) {
    auto tp = find("tiles-packed", share), gs = find("gpu-static", share), gp = find("gpu-packed", share),
         hy = find("hybrid", share);
    auto ratio = [](const experiment_row* a, const experiment_row* b, bool per_device = false) {
      if (!a || !b || b->saturation_rps <= 0) return std::string("-");
      double r = a->saturation_rps / b->saturation_rps;
      if (per_device) r *= double(b->device_count) / double(a->device_count);
      return fmt("%.2f", r);
    };
    s << "| " << fmt("%.0f", share * 100) << " | " << ratio(tp, gs) << " | " << ratio(tp, gp) << " | "
      << ratio(gp, gs) << " | " << ratio(hy, gs) << " | " << ratio(hy, gs, true) << " |\n";
  }
  // The service view: the highest load meeting a p99 target, and throughput per watt and per dollar.
  s << "\nService view: SLO req/s = the highest offered load on the curve (" << o.slo_points
    << " Poisson runs of " << o.latency_requests
    << " requests at k/" << o.slo_points << " of saturation) whose p99 meets the target; per kW uses the devices' TDP, per $1k their list "
       "price, $ per 1M requests = list price amortised over "
    << fmt("%.0f", o.amortization_years) << " years + TDP energy at $" << fmt("%.2f", o.energy_usd_per_kwh)
    << "/kWh, at saturation (assumptions; the presets cite each TDP and price). '-': the preset has no public figure.\n\n";
  s << "| long % | configuration | devices |";
  for (double t : o.slo_p99_ms) s << " SLO req/s p99<=" << fmt("%g", t) << " ms |";
  s << " TDP W | req/s per kW | req/s per $1k | $ per 1M req |\n|---|---|---|";
  for (size_t i = 0; i < o.slo_p99_ms.size(); ++i) s << "---|";
  s << "---|---|---|---|\n";
  std::string notes;
  for (const auto& r : rows) {
    s << "| " << fmt("%.0f", r.long_share * 100) << " | " << r.config << " | " << r.device_count << " |";
    for (size_t i = 0; i < o.slo_p99_ms.size(); ++i)
      s << " " << (i < r.slo_rps.size() && r.slo_rps[i] > 0 ? fmt("%.0f", r.slo_rps[i]) : std::string("none")) << " |";
    const double usd = usd_per_million(r, o);
    s << " " << (r.tdp_w > 0 ? fmt("%.0f", r.tdp_w) : std::string("-")) << " | "
      << (r.tdp_w > 0 ? fmt("%.0f", rps_per_kw(r)) : std::string("-")) << " | "
      << (r.price_usd > 0 ? fmt("%.1f", rps_per_kusd(r)) : std::string("-")) << " | "
      << (usd > 0 ? fmt("%.3f", usd) : std::string("-")) << " |\n";
    if (!r.cost_note.empty() && notes.find(r.cost_note) == std::string::npos) notes += (notes.empty() ? "" : "; ") + r.cost_note;
  }
  if (!notes.empty()) s << "\nMissing public figures: " << notes << ".\n";
  return s.str();
}

status write_rows_csv(const std::vector<experiment_row>& rows, const std::string& path, const experiment_options& o,
                      const std::string& header_comments) {
  std::ofstream f(path);
  if (!f) return status::invalid(path + ": cannot write");
  f << header_comments;
  f << "long_share,config,devices,batching,saturation_rps,saturation_padding_share,saturation_seqs_per_batch,"
       "load_rps,p50_s,p99_s,computed_requests,wall_rps,max_abs_logit_error,modelled_match,compute,device_count,"
       "tdp_w,price_usd,rps_per_kw,rps_per_kusd,usd_per_million";
  for (double t : o.slo_p99_ms) f << ",slo_rps_p99_" << fmt("%g", t) << "ms";
  f << ",check\n";
  char buf[768];
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%.3f,%s,%s,%s,%.6g,%.6g,%.6g,%.6g,%.9g,%.9g,%lld,%.6g,%.3g,%d,%s,%d,%.6g,%.6g,%.6g,%.6g,%.6g",
                  r.long_share, r.config.c_str(), r.devices.c_str(), r.batching.c_str(), r.saturation_rps,
                  r.saturation_padding, r.saturation_batch, r.load_rps, r.p50_s, r.p99_s, (long long)r.computed,
                  r.wall_rps, r.max_logit_error, r.modelled_match ? 1 : 0, r.compute_note.c_str(), r.device_count,
                  r.tdp_w, r.price_usd, rps_per_kw(r), rps_per_kusd(r), usd_per_million(r, o));
    f << buf;
    for (size_t i = 0; i < o.slo_p99_ms.size(); ++i) f << "," << fmt("%.6g", i < r.slo_rps.size() ? r.slo_rps[i] : 0.0);
    f << ",\"" << r.check << "\"\n";  // the text has commas, never quotes
  }
  return f ? ok_status() : status::internal(path + ": write failed");
}

status write_curves_csv(const std::vector<experiment_row>& rows, const std::string& path,
                        const std::string& header_comments) {
  std::ofstream f(path);
  if (!f) return status::invalid(path + ": cannot write");
  f << header_comments << "long_share,config,load_rps,throughput_rps,p50_s,p99_s\n";
  char buf[256];
  for (const auto& r : rows)
    for (const auto& pt : r.curve) {
      std::snprintf(buf, sizeof buf, "%.3f,%s,%.6g,%.6g,%.9g,%.9g\n", r.long_share, r.config.c_str(), pt.load_rps,
                    pt.throughput_rps, pt.p50_s, pt.p99_s);
      f << buf;
    }
  return f ? ok_status() : status::internal(path + ": write failed");
}

status write_requests_csv(const run_result& r, const std::string& path, const std::string& header_comments) {
  std::ofstream f(path);
  if (!f) return status::invalid(path + ": cannot write");
  f << header_comments << "id,length,arrival_s,dispatch_s,done_s,latency_s,backend,ok\n";
  char buf[256];
  for (const auto& q : r.requests) {
    std::snprintf(buf, sizeof buf, "%llu,%d,%.9f,%.9f,%.9f,%.9f,%s,%d\n", (unsigned long long)q.id, q.length,
                  q.arrival_s, q.dispatch_s, q.done_s, q.latency_s(), q.backend.c_str(), q.ok ? 1 : 0);
    f << buf;
  }
  return f ? ok_status() : status::internal(path + ": write failed");
}

}  // namespace tessera::experiment
