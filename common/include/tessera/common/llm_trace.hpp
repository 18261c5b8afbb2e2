// tessera/common/llm_trace.hpp: LLM request traces as files, for tessera-loadgen --openai and the
// timing-only engine (tessera-llm-timing simulate --trace). One request per row: an arrival time,
// the prompt's tokens (or its text) and the output's tokens. Formats, told apart by the header:
//
//   * tessera's: `arrival_seconds,prompt_tokens,output_tokens` (header optional); or the
//     request-trace CSV of trace_csv.hpp, `arrival_seconds,text_or_length` (its lengths taken as
//     prompt tokens; output lengths left to the caller: output_tokens 0). Arrivals as written.
//   * Azure LLM inference trace (AzurePublicDataset, 2023 and 2024): `TIMESTAMP,ContextTokens,
//     GeneratedTokens`, TIMESTAMP a date and time `YYYY-MM-DD HH:MM:SS[.fraction][Z|+HH:MM]`.
//   * BurstGPT: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`, Timestamp in
//     seconds.
// The public formats' arrivals are made relative to their earliest row (their clocks start at a
// date or wherever the sample was cut); their rows with 0 request or response tokens (failed
// requests in BurstGPT) cannot be replayed and are skipped, counted in `skipped`. Rows are sorted
// by arrival (stable). Anything else (a missing column, a field that is not a decimal number, a
// time outside 0..1e9 s or a trace spanning more, a count outside 0..1e6, an unknown header, an
// unterminated quote) is an error naming the line (tests/serving/llm_trace_test.cpp mutates the
// samples in tests/data/traces to check that every refusal names the line it broke).
//
//   auto t = tessera::read_llm_trace("burstgpt_sample.csv");   // errors: "FILE: trace line N: ..."
//   for (auto& r : t->rows) send(r.arrival_seconds * scale, r.prompt_tokens, r.output_tokens);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera {

struct llm_trace_row {
  double arrival_seconds = 0;
  int32_t prompt_tokens = 0;   ///< 0 when prompt_text is given
  int32_t output_tokens = 0;   ///< 0: the trace gives none (the caller's default applies)
  std::string prompt_text;
  int line = 0;                ///< 1-based line in the file
};

struct llm_trace {
  std::string format;          ///< "tessera", "tessera-text" (arrival_seconds,text_or_length), "azure", "burstgpt"
  std::vector<llm_trace_row> rows;
  int64_t skipped = 0;         ///< rows with 0 prompt or output tokens (public formats)
  int first_skipped_line = 0;
  /// Whether every row carries its output length (all formats but "tessera-text").
  bool has_output() const { return format != "tessera-text"; }
};

result<llm_trace> parse_llm_trace(std::string_view csv);
/// parse_llm_trace of a file; errors carry the path ("PATH: trace line N: ...").
result<llm_trace> read_llm_trace(const std::string& path);
/// tessera's three-column format, arrivals with 17 significant digits (texts written as lengths:
/// rows that carry a text need prompt_tokens set).
std::string format_llm_trace(const std::vector<llm_trace_row>& rows);

/// Seconds since 1970-01-01 UTC of `YYYY-MM-DD[ T]HH:MM:SS[.fraction][Z|+HH:MM|-HH:MM]`; false
/// when `text` is not one.
bool parse_utc_timestamp(std::string_view text, double& seconds);

}  // namespace tessera
