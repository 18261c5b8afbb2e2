// tessera/timing/llm_system.hpp: the devices an LLM is served on, as the step model sees them, and
// the cost and energy of a million tokens on them.
//
// A system is built from a preset (timing/presets/*.json) and a spec string:
//   "a100-40gb"                          one GPU: weights and KV cache in HBM
//   "a100-40gb:gpus=4"                   four independent replicas, one per GPU
//   "h100-sxm:tp=8"                      one replica over 8 GPUs, tensor parallel (Megatron-style, as
//                                        Vidur models a replica): each GPU holds 1/8 of every layer's
//                                        weights and ceil(kv_heads / 8) of its K/V heads, and every
//                                        layer all-reduces its activations twice (after attention and
//                                        after the MLP) over NVLink, a ring: base + 2(n-1) hop latencies
//                                        + 2(n-1)/n x bytes / NVLink bandwidth (the preset's llm.nvlink_*,
//                                        llm.collective_base_latency_s)
//   "a100-80gb:tp=2:pp=4"                a pipeline of 4 stages (layers split evenly, as Vidur's
//                                        num_pipeline_stages; layers % pp == 0), each stage a TP group
//                                        of 2: pp micro-batch replicas sharing the pipeline's KV pool,
//                                        each stepping through all layers plus pp-1 NVLink sends
//   "h100-sxm:gpus=16:tp=8"              two such replicas (gpus = replicas x tp x pp)
//   "ipu-mk2:chips=64"                   64 IPUs holding the weights in tile SRAM (weights=sram, the
//                                        default): one pipeline of 64 stages (layers split over the
//                                        chips, activations passed over IPU-Links)
//   "ipu-mk2:chips=64:pipeline=32"       two 32-stage pipelines, each with a copy of the weights
//   "ipu-mk2:chips=4:weights=streaming"  one IPU-M2000: weights in Streaming Memory (the IPU's
//                                        external DRAM), streamed every step over the 4 chips'
//                                        links, tensor parallel; KV cache in tile SRAM
//   IPU sensitivity keys: usable=F (fraction of SRAM for weights + KV, preset: 0.75), hop_us=X
//   (chip-to-chip hop latency, preset: 2)
// The LLM figures of a preset (HBM capacity, SRAM and Streaming Memory bandwidth, IPU-Link bandwidth
// and hop latency, usable memory fraction, launches or supersteps per layer) are its "llm" object,
// each with a "sources" entry "llm.<field>"; TDP and price are "published.tdp_watts" and
// "published.list_price_usd" (per device; an IPU's is its share of the IPU-Machine and Pod).
//
// Replicas: a GPU is one replica with its own KV pool. A pipeline of S chips runs S micro-batches
// at once (each chip works on a different one), so it is modelled as S replicas, each stepping
// through all layers at one chip's rates plus S-1 chip-to-chip hops, sharing the pipeline's KV
// memory (one pool per pipeline; an ideal pipeline: no bubbles while every replica has work).
//
// Cost per million tokens (the formula, utilisation applied to the throughput):
//   usd/Mtok = (price / amortisation_s + TDP x usd_per_kwh / 3.6e6 [per J]) / (utilisation x tokens/s) x 1e6
//   kWh/Mtok = TDP / (utilisation x tokens/s) x 1e6 / 3.6e6
// (the system draws its TDP all the time; idle power is not distinguished).
//
// Usage:
//   auto dims = *tessera::timing::decoder_dims_of(*tessera::models::shape_preset("llama-2-7b"));
//   auto pod = tessera::timing::make_llm_system("ipu-mk2:chips=64", dims);
//   auto c = tessera::timing::cost_per_million_tokens(pod->price_usd.value_or(0), pod->tdp_watts, 5e4, {});
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/llm_step.hpp"

namespace tessera::timing {

/// Where an IPU system keeps the weights.
enum class weight_home : uint8_t {
  hbm,        ///< GPU
  sram,       ///< IPU tile SRAM, spread over the chips of a pipeline
  streaming,  ///< IPU Streaming Memory (external DRAM), streamed every step
};

/// One serving system as the step model sees it (all rates per replica).
struct llm_system {
  std::string spec;              ///< what it was built from, e.g. "ipu-mk2:chips=64"
  std::string preset;            ///< the preset name
  std::string kind;              ///< "gpu" or "ipu"
  std::string description;       ///< how it is modelled, one line
  weight_home weights = weight_home::hbm;
  int64_t chips = 1;             ///< devices in the system (priced and powered)
  int64_t replicas = 1;          ///< independent step streams (see the header comment)
  double flops_per_s = 0;        ///< sustained dense fp16 per replica (peak x fitted efficiency)
  double weight_bytes_per_s = 0; ///< weights read rate per replica
  double kv_bytes_per_s = 0;     ///< KV read/write rate per replica
  double kv_capacity_bytes = 0;  ///< KV cache bytes per KV pool
  int64_t replicas_per_pool = 1; ///< replicas sharing one KV pool (the micro-batches of a pipeline)
  int64_t hops = 0;              ///< chip-to-chip activation transfers per step
  double hop_bytes_per_s = 0, hop_latency_s = 0;
  int64_t collectives_per_layer = 0;  ///< tensor-parallel all-reduces per layer (GPU tp > 1, streaming IPU)
  int64_t tensor_parallel = 1;        ///< ranks of one all-reduce (GPU: tp; streaming IPU: its chips)
  int64_t pipeline_stages = 1;        ///< GPU pp (an IPU pipeline's stages are its hops + 1)
  double collective_bytes_per_s = 0;  ///< per rank, each way (NVLink; IPU-Link)
  double collective_base_latency_s = 0, collective_hop_latency_s = 0;
  double per_layer_overhead_s = 0;
  double per_step_overhead_s = 0;     ///< LM head launch / host handover
  double clock_hz = 0;                ///< for reports
  double tdp_watts = 0;               ///< whole system
  std::optional<double> price_usd;    ///< whole system; absent when no public price was found
  std::vector<std::pair<std::string, std::string>> figures;  ///< "figure = value" -> its source
};

/// Builds a system from a spec (see the header comment). Errors: unknown preset, unknown key, a
/// weights=sram system whose chips cannot hold the weights (out_of_memory, naming the chips needed),
/// a preset without its "llm" object.
result<llm_system> make_llm_system(std::string_view spec, const decoder_dims& d);

/// One ring all-reduce of `bytes` over the system's tensor-parallel ranks:
///   base + 2(n-1) x hop latency + 2(n-1)/n x bytes / collective_bytes_per_s   (0 when n = 1)
double allreduce_seconds(const llm_system& sys, double bytes);

/// A pipeline of `stages` equal stages running `micro_batches` micro-batches through once (GPipe's
/// schedule): (micro_batches + stages - 1) x stage time, where one micro-batch through all stages
/// takes `one_pass_s` (stage time = one_pass_s / stages). The idle share of the stages, the bubble,
/// is (stages - 1) / (micro_batches + stages - 1).
double pipeline_pass_seconds(double one_pass_s, int64_t stages, int64_t micro_batches);
double pipeline_bubble_fraction(int64_t stages, int64_t micro_batches);

/// The cost assumptions, each changeable on the command line.
struct cost_assumptions {
  double amortisation_years = 3;
  double utilisation = 0.5;    ///< fraction of the time the system serves at the rate costed
  double usd_per_kwh = 0.10;
};

struct cost_result {
  double usd_per_million_tokens = 0;
  double kwh_per_million_tokens = 0;
  double capital_usd_per_s = 0;  ///< price / amortisation seconds
  double energy_usd_per_s = 0;   ///< TDP x energy price
};

/// The formula in the header comment. tokens_per_s is what the system delivers while serving.
result<cost_result> cost_per_million_tokens(double price_usd, double tdp_watts, double tokens_per_s,
                                            const cost_assumptions& a);
/// The price at which the system's cost per million tokens equals `target_usd_per_mtok` (negative:
/// its energy alone costs more than the target).
double break_even_price_usd(double target_usd_per_mtok, double tdp_watts, double tokens_per_s,
                            const cost_assumptions& a);

}  // namespace tessera::timing
