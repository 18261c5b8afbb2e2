// LLM serving systems from presets (their "llm" objects) and the cost of a million tokens.
#include "tessera/timing/llm_system.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>
#include <variant>

#include <nlohmann/json.hpp>

#include "report_text.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::timing {
namespace {

using json = nlohmann::json;

std::string fmt(double v) { return detail::num(v); }

// The preset file's "llm" object: numbers only, each required field named in the error.
class llm_fields {
 public:
  static result<llm_fields> load(const std::string& file) {
    std::ifstream in(file);
    if (!in) return status::not_found("preset file " + file + " cannot be opened");
    std::stringstream ss;
    ss << in.rdbuf();
    json root;
    try {
      root = json::parse(ss.str());
    } catch (const json::exception& e) {
      return status::invalid(file + ": not valid JSON: " + e.what());
    }
    auto it = root.find("llm");
    if (it == root.end() || !it->is_object())
      return status::invalid(file + ": field 'llm' is missing or not an object; the LLM step model needs it (see "
                                    "timing/presets/a100-40gb.json and ipu-mk2.json, documented in docs/timing.md)");
    llm_fields f;
    f.file_ = file;
    f.obj_ = *it;
    if (auto s = root.find("sources"); s != root.end() && s->is_object())
      for (auto& [k, v] : s->items()) f.sources_[k] = v.is_string() ? v.get<std::string>() : v.dump();
    return f;
  }
  result<double> number(const char* field) const {
    auto it = obj_.find(field);
    if (it == obj_.end() || !it->is_number() || !(it->get<double>() > 0))
      return status::invalid(file_ + ": field 'llm." + field + "' is missing or not a positive number");
    return it->get<double>();
  }
  std::string source(const std::string& key) const {
    auto it = sources_.find(key);
    return it == sources_.end() ? "(no source given)" : it->second;
  }

 private:
  std::string file_;
  json obj_;
  std::map<std::string, std::string> sources_;
};

struct spec_parts {
  std::string preset;
  std::map<std::string, std::string> keys;
};

result<spec_parts> split_spec(std::string_view spec) {
  spec_parts p;
  std::string s(spec);
  size_t at = s.find(':');
  p.preset = s.substr(0, at);
  if (p.preset.empty()) return status::invalid("empty system spec; pass e.g. a100-40gb or ipu-mk2:chips=64");
  while (at != std::string::npos) {
    size_t next = s.find(':', at + 1);
    std::string kv = s.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return status::invalid("system spec '" + s + "': '" + kv + "' is not key=value (keys: gpus, tp, pp for a GPU; chips, pipeline, weights, usable, hop_us for an IPU)");
    p.keys[kv.substr(0, eq)] = kv.substr(eq + 1);
    at = next;
  }
  return p;
}

result<int64_t> int_key(const spec_parts& p, const std::string& key, int64_t fallback) {
  auto it = p.keys.find(key);
  if (it == p.keys.end()) return fallback;
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used != it->second.size() || v <= 0) throw std::invalid_argument("x");
    return static_cast<int64_t>(v);
  } catch (const std::exception&) {
    return status::invalid("system spec: " + key + "=" + it->second + " is not a positive integer");
  }
}

status only_keys(const spec_parts& p, std::initializer_list<const char*> allowed, const std::string& kind) {
  for (const auto& [k, v] : p.keys) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || k == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      return status::invalid("system spec: key '" + k + "' does not apply to a " + kind + " system (keys: " + list + ")");
    }
  }
  return {};
}

result<llm_system> make_gpu(const gpu_preset& g, const spec_parts& p, const decoder_dims& d, std::string spec) {
  TESSERA_RETURN_IF_ERROR(only_keys(p, {"gpus", "tp", "pp"}, "GPU"));
  auto tp = int_key(p, "tp", 1);
  if (!tp) return tp.error();
  auto pp = int_key(p, "pp", 1);
  if (!pp) return pp.error();
  const int64_t per_replica = *tp * *pp;
  auto gpus = int_key(p, "gpus", per_replica);
  if (!gpus) return gpus.error();
  if (*gpus % per_replica != 0)
    return status::invalid("system spec '" + spec + "': gpus=" + std::to_string(*gpus) + " is not a multiple of tp x pp = " +
                           std::to_string(per_replica) + " (a replica is tp x pp GPUs)");
  // As Vidur's replica: heads split evenly over the TP ranks, layers evenly over the stages.
  if (d.heads % *tp != 0)
    return status::invalid("system spec '" + spec + "': tp=" + std::to_string(*tp) + " does not divide " + d.name + "'s " +
                           std::to_string(d.heads) + " attention heads");
  if (d.layers % *pp != 0)
    return status::invalid("system spec '" + spec + "': pp=" + std::to_string(*pp) + " does not divide " + d.name + "'s " +
                           std::to_string(d.layers) + " layers (stages hold equal layer counts)");
  auto f = llm_fields::load(g.source_file);
  if (!f) return f.error();
  auto mem = f->number("memory_bytes");
  auto usable = f->number("usable_memory_fraction");
  auto launches = f->number("launches_per_layer");
  if (!mem) return mem.error();
  if (!usable) return usable.error();
  if (!launches) return launches.error();
  const bool multi = per_replica > 1;
  double link_bw = 0, base_lat = 0, hop_lat = 0;
  if (multi) {  // only a multi-GPU replica needs the NVLink figures
    auto bw = f->number("nvlink_bytes_per_s");
    auto base = f->number("collective_base_latency_s");
    auto hop = f->number("nvlink_hop_latency_s");
    for (const auto* r : {&bw, &base, &hop})
      if (!*r) return r->error().with_context("tp=" + std::to_string(*tp) + " pp=" + std::to_string(*pp));
    link_bw = *bw, base_lat = *base, hop_lat = *hop;
  }
  // Each GPU holds 1/(tp pp) of the weights and, of every layer it runs, ceil(kv_heads / tp) K/V heads:
  // with fewer K/V heads than ranks they are replicated, so the replica's KV rate and capacity shrink
  // by kv_heads / (tp ceil(kv_heads / tp)).
  const double T = double(*tp), S = double(*pp);
  const int64_t kv_per_rank = (d.kv_heads + *tp - 1) / *tp;
  const double kv_share = double(d.kv_heads) / (T * double(kv_per_rank));
  const double free_per_gpu = *mem * *usable - d.resident_bytes() / (T * S);
  llm_system s;
  s.spec = std::move(spec);
  s.preset = g.name;
  s.kind = "gpu";
  s.weights = weight_home::hbm;
  s.chips = *gpus;
  s.tensor_parallel = *tp;
  s.pipeline_stages = *pp;
  s.replicas = *gpus / *tp;  // gpus / (tp pp) pipelines of pp micro-batch replicas
  s.replicas_per_pool = *pp;
  s.flops_per_s = T * g.fp16_tensor_flops_per_s * g.calibration.tensor_core_efficiency;
  s.weight_bytes_per_s = T * g.hbm_bytes_per_s * g.calibration.hbm_efficiency;
  s.kv_bytes_per_s = s.weight_bytes_per_s * kv_share;
  if (free_per_gpu <= 0) {
    const double need = std::ceil(d.resident_bytes() / (*mem * *usable));
    return status::out_of_memory(d.name + " needs " + fmt(d.resident_bytes() / 1e9) + " GB of weights; " +
                                 std::to_string(per_replica) + " x " + g.name + " hold " + fmt(S * T * *mem * *usable / 1e9) +
                                 " GB usable; use tp x pp > " + fmt(need - 1) + " (e.g. tp=" +
                                 std::to_string(int64_t(std::pow(2, std::ceil(std::log2(need + 1))))) + ")");
  }
  s.kv_capacity_bytes = T * S * free_per_gpu * kv_share;
  s.per_layer_overhead_s = *launches * g.launch_overhead_s;
  s.per_step_overhead_s = 2 * g.launch_overhead_s;  // embedding gather, LM head
  if (*tp > 1) {
    s.collectives_per_layer = 2;  // after attention's O projection and after the MLP's down projection
    s.collective_bytes_per_s = link_bw;
    s.collective_base_latency_s = base_lat;
    s.collective_hop_latency_s = hop_lat;
  }
  if (*pp > 1) {  // one NVLink send per stage boundary: one ring step of a collective
    s.hops = *pp - 1;
    s.hop_bytes_per_s = link_bw;
    s.hop_latency_s = base_lat + hop_lat;
  }
  s.clock_hz = g.clock_hz;
  s.tdp_watts = double(*gpus) * g.published.tdp_watts.value_or(0);
  if (g.published.list_price_usd) s.price_usd = double(*gpus) * *g.published.list_price_usd;
  if (!multi)
    s.description = std::to_string(*gpus) + " x " + g.name + ", weights and KV cache in HBM, one replica per GPU";
  else
    s.description = std::to_string(*gpus) + " x " + g.name + ", " + std::to_string(*gpus / per_replica) + " replica(s) of " +
                    (*tp > 1 ? "tensor parallel " + std::to_string(*tp) : std::string("one GPU")) +
                    (*pp > 1 ? " x " + std::to_string(*pp) + " pipeline stages (" + std::to_string(*pp) + " micro-batches each)"
                             : std::string()) +
                    ", weights and KV cache split over the GPUs, activations over NVLink";
  s.figures = {
      {"dense fp16 " + fmt(g.fp16_tensor_flops_per_s / 1e12) + " TFLOP/s x tensor_core_efficiency " +
           fmt(g.calibration.tensor_core_efficiency),
       g.sources.count("fp16_tensor_flops_per_s") ? g.sources.at("fp16_tensor_flops_per_s") : "preset"},
      {"HBM " + fmt(g.hbm_bytes_per_s / 1e9) + " GB/s x hbm_efficiency " + fmt(g.calibration.hbm_efficiency),
       g.sources.count("hbm_bytes_per_s") ? g.sources.at("hbm_bytes_per_s") : "preset"},
      {"HBM capacity " + fmt(*mem / 1e9) + " GB x usable " + fmt(*usable), f->source("llm.memory_bytes") + "; " +
                                                                              f->source("llm.usable_memory_fraction")},
      {"launches per layer " + fmt(*launches) + " x " + fmt(g.launch_overhead_s * 1e6) + " us",
       f->source("llm.launches_per_layer")},
      {"TDP " + fmt(g.published.tdp_watts.value_or(0)) + " W per GPU",
       g.sources.count("published.tdp_watts") ? g.sources.at("published.tdp_watts") : "no figure in the preset"},
      {"price " + (g.published.list_price_usd ? "$" + std::to_string(int64_t(*g.published.list_price_usd)) : std::string("none")) +
           " per GPU",
       g.sources.count("published.list_price_usd") ? g.sources.at("published.list_price_usd") : "no public list price found"},
  };
  if (multi) {
    s.figures.push_back({"NVLink " + fmt(link_bw / 1e9) + " GB/s per GPU each way", f->source("llm.nvlink_bytes_per_s")});
    s.figures.push_back({"collective base latency " + fmt(base_lat * 1e6) + " us", f->source("llm.collective_base_latency_s")});
    s.figures.push_back({"NVLink ring step " + fmt(hop_lat * 1e6) + " us", f->source("llm.nvlink_hop_latency_s")});
  }
  return s;
}

result<llm_system> make_ipu(const ipu_preset& ipu, const spec_parts& p, const decoder_dims& d, std::string spec) {
  TESSERA_RETURN_IF_ERROR(only_keys(p, {"chips", "pipeline", "weights", "usable", "hop_us"}, "IPU"));
  const std::string home = p.keys.count("weights") ? p.keys.at("weights") : "sram";
  if (home != "sram" && home != "streaming")
    return status::invalid("system spec: weights=" + home + "; use weights=sram or weights=streaming");
  const bool streaming = home == "streaming";
  auto chips = int_key(p, "chips", streaming ? 4 : 0);
  if (!chips) return chips.error();
  if (*chips == 0) return status::invalid("system spec '" + spec + "': pass chips=N (IPUs holding the weights in SRAM)");
  auto f = llm_fields::load(ipu.source_file);
  if (!f) return f.error();
  auto sram_bw = f->number("sram_bytes_per_s");
  auto usable = f->number("usable_sram_fraction");
  auto link_bw = f->number("ipu_link_bytes_per_s");
  auto hop_lat = f->number("link_hop_latency_s");
  auto supersteps = f->number("supersteps_per_layer");
  for (const auto* r : {&sram_bw, &usable, &link_bw, &hop_lat, &supersteps})
    if (!*r) return r->error();
  // Sensitivity overrides of the two assumptions that move the LLM results most (docs/timing.md).
  for (auto [key, dst, lo, hi, scale] : {std::tuple{"usable", &*usable, 0.05, 1.0, 1.0}, {"hop_us", &*hop_lat, 0.0, 1000.0, 1e-6}}) {
    auto it = p.keys.find(key);
    if (it == p.keys.end()) continue;
    try {
      size_t used = 0;
      double v = std::stod(it->second, &used);
      if (used != it->second.size() || !(v > lo && v <= hi)) throw std::invalid_argument(key);
      *dst = v * scale;
    } catch (const std::exception&) {
      return status::invalid("system spec: " + std::string(key) + "=" + it->second + " must be a number in (" + fmt(lo) +
                             ", " + fmt(hi) + "]");
    }
  }
  const double chip_flops = ipu.peak_flops_per_s(dtype::fp16) * ipu.calibration.amp_efficiency;
  const double chip_usable = double(ipu.memory_bytes()) * *usable;
  const double resident = d.resident_bytes();
  llm_system s;
  s.spec = std::move(spec);
  s.preset = ipu.name;
  s.kind = "ipu";
  s.chips = *chips;
  s.clock_hz = ipu.clock_hz;
  s.hop_bytes_per_s = *link_bw;
  s.hop_latency_s = *hop_lat;
  s.per_layer_overhead_s =
      *supersteps * (double(ipu.global_sync_cycles) + ipu.calibration.compute_set_overhead_cycles) / ipu.clock_hz;
  s.per_step_overhead_s = 2 * (double(ipu.global_sync_cycles) + ipu.calibration.compute_set_overhead_cycles) / ipu.clock_hz;
  s.tdp_watts = double(*chips) * ipu.published.tdp_watts.value_or(0);
  if (ipu.published.list_price_usd) s.price_usd = double(*chips) * *ipu.published.list_price_usd;
  if (!streaming) {
    auto pipeline = int_key(p, "pipeline", *chips);
    if (!pipeline) return pipeline.error();
    const int64_t S = *pipeline;
    if (*chips % S != 0)
      return status::invalid("system spec: pipeline=" + std::to_string(S) + " does not divide chips=" + std::to_string(*chips));
    // S > layers: a stage holds part of a layer (its matrices split over chips); still S - 1 hops.
    const double kv_per_pipeline = double(S) * chip_usable - resident;
    if (kv_per_pipeline <= 0)
      return status::out_of_memory(
          d.name + " needs " + fmt(resident / 1e9) + " GB of weights in SRAM; " + std::to_string(S) + " x " + ipu.name +
          " hold " + fmt(double(S) * chip_usable / 1e9) + " GB usable (" + fmt(*usable * 100) + "% of " +
          fmt(double(ipu.memory_bytes()) / 1e6) + " MB per chip); use at least pipeline=" +
          std::to_string(int64_t(std::ceil(resident / chip_usable)) + 1) + " or weights=streaming");
    s.weights = weight_home::sram;
    s.replicas = *chips;  // chips / S pipelines, S micro-batches each
    s.flops_per_s = chip_flops;
    s.weight_bytes_per_s = s.kv_bytes_per_s = *sram_bw;
    s.kv_capacity_bytes = kv_per_pipeline;
    s.replicas_per_pool = S;
    s.hops = S - 1;
    s.description = std::to_string(*chips) + " x " + ipu.name + ", weights in tile SRAM, " + std::to_string(*chips / S) +
                    " pipeline(s) of " + std::to_string(S) + " chips over IPU-Links (" + std::to_string(*chips) +
                    " micro-batch replicas)";
  } else {
    auto stream_bw = f->number("streaming_bytes_per_s");
    auto stream_mem = f->number("streaming_memory_bytes");
    if (!stream_bw) return stream_bw.error();
    if (!stream_mem) return stream_mem.error();
    if (p.keys.count("pipeline")) return status::invalid("system spec: pipeline= applies to weights=sram only");
    if (resident > double(*chips) * *stream_mem)
      return status::out_of_memory(d.name + " needs " + fmt(resident / 1e9) + " GB; Streaming Memory of " +
                                   std::to_string(*chips) + " IPUs holds " + fmt(double(*chips) * *stream_mem / 1e9) + " GB");
    s.weights = weight_home::streaming;
    s.replicas = 1;
    s.flops_per_s = double(*chips) * chip_flops;
    s.weight_bytes_per_s = double(*chips) * *stream_bw;
    s.kv_bytes_per_s = double(*chips) * *sram_bw;
    // SRAM keeps the KV cache and a double buffer of one layer's streamed weights.
    s.kv_capacity_bytes = double(*chips) * chip_usable - 2 * double(d.layer_linear_params()) * d.element_bytes;
    s.collectives_per_layer = *chips > 1 ? 2 : 0;
    s.tensor_parallel = *chips;  // a ring over the chips' IPU-Links, no fixed cost beyond the hops
    s.collective_bytes_per_s = s.hop_bytes_per_s;
    s.collective_hop_latency_s = s.hop_latency_s;
    s.description = std::to_string(*chips) + " x " + ipu.name + ", weights in Streaming Memory streamed every step, " +
                    "tensor parallel over IPU-Links, KV cache in tile SRAM";
    s.figures.push_back({"Streaming Memory " + fmt(*stream_bw / 1e9) + " GB/s per IPU",
                         f->source("llm.streaming_bytes_per_s")});
    s.figures.push_back({"Streaming Memory capacity " + fmt(*stream_mem / 1e9) + " GB per IPU",
                         f->source("llm.streaming_memory_bytes")});
  }
  if (s.kv_capacity_bytes <= 0)
    return status::out_of_memory(s.spec + ": no SRAM left for the KV cache");
  s.figures.insert(
      s.figures.begin(),
      {{"dense fp16 " + fmt(ipu.peak_flops_per_s(dtype::fp16) / 1e12) + " TFLOP/s per IPU x amp_efficiency " +
            fmt(ipu.calibration.amp_efficiency),
        ipu.sources.count("calibration.amp_efficiency") ? ipu.sources.at("calibration.amp_efficiency") : "preset"},
       {"SRAM " + fmt(*sram_bw / 1e12) + " TB/s per IPU", f->source("llm.sram_bytes_per_s")},
       {"usable SRAM " + fmt(*usable * 100) + "% of " + fmt(double(ipu.memory_bytes()) / 1e6) + " MB",
        f->source("llm.usable_sram_fraction")},
       {"IPU-Link " + fmt(*link_bw / 1e9) + " GB/s per IPU", f->source("llm.ipu_link_bytes_per_s")},
       {"hop latency " + fmt(*hop_lat * 1e6) + " us", f->source("llm.link_hop_latency_s")},
       {"supersteps per layer " + fmt(*supersteps) + " x (" + std::to_string(ipu.global_sync_cycles) + " sync + " +
            fmt(ipu.calibration.compute_set_overhead_cycles) + " overhead cycles)",
        f->source("llm.supersteps_per_layer")},
       {"TDP " + fmt(ipu.published.tdp_watts.value_or(0)) + " W per IPU",
        ipu.sources.count("published.tdp_watts") ? ipu.sources.at("published.tdp_watts") : "no figure in the preset"},
       {"price " + (ipu.published.list_price_usd ? "$" + std::to_string(int64_t(*ipu.published.list_price_usd)) : std::string("none")) +
            " per IPU",
        ipu.sources.count("published.list_price_usd") ? ipu.sources.at("published.list_price_usd")
                                                       : "no public list price found (see docs/timing.md)"}});
  return s;
}

}  // namespace

result<llm_system> make_llm_system(std::string_view spec, const decoder_dims& d) {
  auto parts = split_spec(spec);
  if (!parts) return parts.error();
  auto preset = load_preset(parts->preset);
  if (!preset) return preset.error();
  if (const auto* g = std::get_if<gpu_preset>(&*preset)) return make_gpu(*g, *parts, d, std::string(spec));
  return make_ipu(std::get<ipu_preset>(*preset), *parts, d, std::string(spec));
}

double allreduce_seconds(const llm_system& sys, double bytes) {
  const double n = double(sys.tensor_parallel);
  if (n <= 1 || !(sys.collective_bytes_per_s > 0)) return 0;
  return sys.collective_base_latency_s + 2 * (n - 1) * sys.collective_hop_latency_s +
         2 * (n - 1) / n * bytes / sys.collective_bytes_per_s;
}

double pipeline_pass_seconds(double one_pass_s, int64_t stages, int64_t micro_batches) {
  if (stages < 1 || micro_batches < 1) return 0;
  return double(micro_batches + stages - 1) * one_pass_s / double(stages);
}

double pipeline_bubble_fraction(int64_t stages, int64_t micro_batches) {
  if (stages < 1 || micro_batches < 1) return 0;
  return double(stages - 1) / double(micro_batches + stages - 1);
}

result<cost_result> cost_per_million_tokens(double price_usd, double tdp_watts, double tokens_per_s,
                                            const cost_assumptions& a) {
  if (!(a.amortisation_years > 0)) return status::invalid("amortisation years must be > 0");
  if (!(a.utilisation > 0 && a.utilisation <= 1)) return status::invalid("utilisation must be in (0, 1]");
  if (!(a.usd_per_kwh >= 0)) return status::invalid("energy price must be >= 0 $/kWh");
  if (!(tokens_per_s > 0)) return status::invalid("tokens per second must be > 0 to cost a million tokens");
  if (price_usd < 0 || tdp_watts < 0) return status::invalid("price and TDP must be >= 0");
  cost_result c;
  c.capital_usd_per_s = price_usd / (a.amortisation_years * 365.25 * 24 * 3600);
  c.energy_usd_per_s = tdp_watts * a.usd_per_kwh / 3.6e6;
  const double served = a.utilisation * tokens_per_s;
  c.usd_per_million_tokens = (c.capital_usd_per_s + c.energy_usd_per_s) / served * 1e6;
  c.kwh_per_million_tokens = tdp_watts / served * 1e6 / 3.6e6;
  return c;
}

double break_even_price_usd(double target_usd_per_mtok, double tdp_watts, double tokens_per_s, const cost_assumptions& a) {
  const double served = a.utilisation * tokens_per_s;
  const double budget_per_s = target_usd_per_mtok * served / 1e6;
  const double energy_per_s = tdp_watts * a.usd_per_kwh / 3.6e6;
  return (budget_per_s - energy_per_s) * a.amortisation_years * 365.25 * 24 * 3600;
}

}  // namespace tessera::timing
