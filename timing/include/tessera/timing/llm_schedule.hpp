// tessera/timing/llm_schedule.hpp: LLM serving on modelled time: request traces, a static- and a
// continuous-batching scheduler driving the step model, latency percentiles, throughput at an SLO.
//
// Traces: Poisson arrivals, prompt and output lengths from a ShareGPT-like fit (log-normal, means
// 161 and 338 tokens: the ShareGPT means in the vLLM paper, Kwon et al., SOSP 2023, section 6.1 and
// Fig. 11; the spreads are assumptions; see docs/timing.md), clipped to the model's context.
//
// Schedulers, one per replica of the system (llm_system.hpp); an arriving request goes to the
// replica with the fewest requests waiting or running:
//   * continuous (Orca / vLLM / Sarathi-Serve): every step decodes one token for every running
//     sequence and fills the rest of a token budget with prompt chunks (running prompts first, then
//     waiting requests in arrival order, admitted while running < max_seqs and their whole prompt fits
//     in the free KV blocks of 16 tokens); a decode that finds no free block preempts the newest
//     sequence (its KV is dropped and recomputed later: prompt + tokens generated so far);
//   * static (naive generate): an idle replica takes up to static_batch waiting requests (those
//     that fit its KV memory when padded), prefills them padded to the longest prompt in one step,
//     then decodes every row (finished ones too) until the longest output ends; tokens stream as
//     they are produced, but no request joins until the batch ends.
// A request's first output token comes with the step that ends its prompt. TTFT = that step's end
// - arrival; TPOT = (last token - first token) / (output - 1); e2e = last token - arrival.
//
// Usage:
//   auto trace = tessera::timing::poisson_trace(2000, 5.0, {}, 42);
//   auto rep = tessera::timing::simulate_llm_serving(*sys, dims, trace, {});
//   std::printf("%.0f tok/s, p99 TTFT %.3f s\n", rep->tokens_per_s, rep->ttft_p99_s);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/llm_step.hpp"
#include "tessera/timing/llm_system.hpp"

namespace tessera::timing {

struct llm_request {
  double arrival_s = 0;
  int64_t prompt = 0;   ///< prompt tokens (>= 1)
  int64_t output = 0;   ///< output tokens (>= 1)
};

/// A log-normal length distribution given by its mean and the sigma of its log, clipped to [lo, hi].
struct length_fit {
  double mean = 0;
  double sigma = 0;
  int64_t lo = 1, hi = 0;
};

/// ShareGPT-like chat traffic (see the header comment for the source of each number).
struct chat_traffic {
  length_fit prompt{161, 1.0, 4, 3072};
  length_fit output{338, 0.8, 1, 1024};
};

/// n requests with Poisson arrivals at `rate_per_s` (rate 0: all at t = 0) and lengths drawn from
/// `t`, seeded (the same seed gives the same trace).
std::vector<llm_request> poisson_trace(int64_t n, double rate_per_s, const chat_traffic& t, uint64_t seed);

enum class batching : uint8_t { continuous, static_batch };
std::string_view batching_name(batching b);

struct schedule_options {
  batching policy = batching::continuous;
  int64_t max_seqs = 256;        ///< continuous: running sequences per replica
  int64_t token_budget = 2048;   ///< continuous: new tokens per step (decodes first, prompt chunks fill the rest)
  int64_t static_batch = 16;     ///< static: requests admitted together
  int64_t block_tokens = 16;     ///< KV block size
  /// Goodput's bounds (vLLM's benchmark_serving --goodput, genai-perf): a request is good when its
  /// TTFT and its TPOT are both within them (0: not checked; a one-token output has TPOT 0).
  double goodput_ttft_s = 0, goodput_tpot_s = 0;
};

struct schedule_report {
  int64_t requests = 0;
  int64_t output_tokens = 0;
  double duration_s = 0;         ///< first arrival to last token
  double tokens_per_s = 0;       ///< output tokens / duration
  double ttft_p50_s = 0, ttft_p99_s = 0;
  double tpot_p50_s = 0, tpot_p99_s = 0;
  double e2e_p50_s = 0, e2e_p99_s = 0;
  int64_t steps = 0;
  double mean_step_tokens = 0;   ///< new tokens per step, averaged
  int64_t preemptions = 0;
  double memory_bound_fraction = 0;  ///< of steps
  int64_t good = 0;              ///< requests within both goodput bounds (all of them when none is set)
  double goodput_rps = 0;        ///< good per second from time 0 (the run's start) to the last token
};

/// Runs the trace through one scheduler per replica of `sys`. Errors: an empty trace, a request
/// whose prompt + output cannot fit one replica's KV memory (named), bad options.
result<schedule_report> simulate_llm_serving(const llm_system& sys, const decoder_dims& d,
                                             const std::vector<llm_request>& trace, const schedule_options& o);

/// Latency targets for "throughput at an SLO".
struct llm_slo {
  double ttft_p99_s = 2.0;
  double tpot_p99_s = 0.1;
};

struct slo_point {
  double rate_per_s = 0;       ///< the highest Poisson rate found that meets the SLO (0: none)
  schedule_report report;      ///< at that rate
  double max_tokens_per_s = 0; ///< all requests at t = 0 (the SLO ignored)
};

/// Bisects the arrival rate (n requests per run, seeded) for the highest rate whose run meets `slo`.
result<slo_point> throughput_at_slo(const llm_system& sys, const decoder_dims& d, const chat_traffic& t,
                                    const schedule_options& o, const llm_slo& slo, int64_t n, uint64_t seed);

}  // namespace tessera::timing
