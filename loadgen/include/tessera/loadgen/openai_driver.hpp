// tessera/loadgen/openai_driver.hpp: load for an OpenAI-compatible streaming server
// (tessera-serve with a decoder, vLLM, TGI's Messages API): requests with prompt and output
// lengths drawn from distributions, open loop (Poisson arrivals; latency counts from the planned
// arrival) or closed loop (N clients), every answer streamed (`stream: true`, server-sent
// events) so that the time to first token, the time per output token and the end-to-end time
// are measured per request; output lengths are exact (`max_tokens` with `ignore_eos`). The
// requests come from the length distributions or from a trace file (tessera/common/llm_trace.hpp:
// tessera's CSV, Azure's LLM inference trace, BurstGPT), its arrivals kept or scaled. Goodput at an
// SLO as vLLM's benchmark_serving and genai-perf define it: the requests whose TTFT and TPOT are
// both within their bounds (a bound left at 0 is not checked), per second of the run.
//
//   llm_load_config cfg{.port = 8080, .mode = loop_mode::closed, .concurrency = 64,
//                       .requests = 64, .prompt = {.kind = length_dist::uniform, .lo = 32, .hi = 512},
//                       .output = {.kind = length_dist::uniform, .lo = 16, .hi = 256}};
//   auto report = run_llm_load(cfg);     // TTFT/TPOT/e2e percentiles, tokens/s
//   std::cout << to_table(*report);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/llm_trace.hpp"
#include "tessera/common/status.hpp"
#include "tessera/loadgen/http_driver.hpp"
#include "tessera/loadgen/workload.hpp"

namespace tessera::loadgen {

struct length_dist {
  enum kind_t { fixed, uniform } kind = fixed;
  int32_t lo = 128, hi = 128;  ///< fixed: lo
  /// "N" (fixed) or "U[lo,hi]" / "lo-hi" (uniform). Errors say the accepted forms.
  static result<length_dist> parse(std::string_view text);
  std::string describe() const;
  int32_t draw(splitmix64& rng) const { return kind == fixed ? lo : static_cast<int32_t>(rng.uniform(lo, hi)); }
};

struct llm_load_config {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  std::string api = "chat";   ///< "chat" (/v1/chat/completions) or "completions"
  std::string model;          ///< "model" in every request ("" = left out)
  loop_mode mode = loop_mode::closed;
  int concurrency = 16;       ///< closed loop: clients
  double rate = 0;            ///< open loop: Poisson arrivals per second
  int64_t requests = 64;      ///< 0: the whole trace, or as many as duration_seconds allows
  double duration_seconds = 0; ///< stop sending after this (0: when the requests are sent); closed
                               ///< loop with requests = 0 cycles the plan until then
  std::vector<llm_trace_row> trace;  ///< replayed instead of the distributions when not empty
  std::string trace_name;     ///< copied into the report
  double time_scale = 1;      ///< open loop: trace arrivals multiplied by this
  double slo_ttft_ms = 0, slo_tpot_ms = 0;  ///< goodput bounds (0: not checked; both 0: no goodput)
  length_dist prompt{length_dist::uniform, 32, 512};
  length_dist output{length_dist::uniform, 16, 256};
  int32_t shared_prefix_tokens = 0;  ///< a system prompt of this many tokens shared by all
  bool prompt_ids = false;    ///< completions: prompts as token ids (exact lengths)
  int32_t id_lo = 100, id_hi = 1000;  ///< range of random prompt ids
  uint64_t seed = 1;
  double temperature = 0;
  double request_timeout_seconds = 600;
  bool progress = true;
};

struct llm_report {
  std::string api, mode, prompt, output;
  std::string workload;       ///< "distributions" or "trace:<file> (<format>)"
  double time_scale = 1;
  int concurrency = 0;
  double rate = 0;
  int32_t shared_prefix_tokens = 0;
  double duration_seconds = 0;
  int64_t sent = 0, ok = 0, errors = 0;
  std::map<std::string, int64_t> errors_by_kind;
  std::string first_error;  ///< the body of the first error answer (cut)
  int64_t prompt_tokens = 0, output_tokens = 0;  ///< from the answers' usage
  double requests_per_second = 0, output_tokens_per_second = 0, total_tokens_per_second = 0;
  /// Milliseconds: p50, p90, p99, mean.
  struct pct {
    double p50 = 0, p90 = 0, p99 = 0, mean = 0;
  } ttft, tpot, itl, e2e;
  double slo_ttft_ms = 0, slo_tpot_ms = 0;  ///< 0: not checked
  int64_t good = 0;              ///< ok requests within both bounds
  double goodput_rps = 0;        ///< good / duration_seconds
  bool has_slo() const { return slo_ttft_ms > 0 || slo_tpot_ms > 0; }
  /// Every request sent, in order: its planned arrival (closed loop: when it left), prompt and
  /// output tokens as the server counted them (the plan's when it failed).
  std::vector<llm_trace_row> requests;
};

/// Runs the load. Fails only on setup errors; request failures are counted.
result<llm_report> run_llm_load(const llm_load_config& cfg);

std::string to_table(const llm_report& r);
std::string llm_csv_header();
std::string to_csv_row(const llm_report& r);
std::string to_json(const llm_report& r);

}  // namespace tessera::loadgen
