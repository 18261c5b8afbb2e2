// tessera/models/token_sampling.hpp: choosing the next token from one logits row, written once
// for the host (serving's sampler, llm_engine) and the tile that holds the LM head (the
// dec_sample kernel), so both draw the same token from the same row bit for bit.
//
// A row's sample_params carry the request's sampling (temperature, top-k, top-p, the penalties and
// logit_bias) and `u`, the row's one uniform draw in [0, 1): the host draws it from the request's
// own generator before the step, exactly where the host sampler would draw it (none for a greedy
// row), so the random sequence a seed gives does not depend on where the row is sampled.
// Penalties need the tokens so far: `history` holds every distinct token of the prompt and the
// output with its count in the output (history_of builds it).
//
// The step protocol (host/src/tile_decoder.cpp): the host sends a sample tensor (sample_writer)
// with the step; the LM-head tile answers one sample_record per logits row (token, its
// log-probability, up to kMaxTopLogprobs alternatives) in place of the row's logits. A row whose
// parameters do not fit the tensor is sent in `logits` mode and sampled on the host.
//
//   sample_params p{.temperature = 0.8, .top_k = 40, .u = 0.25};
//   int32_t t = sample_row(row, vocab, p, scratch);
//   token_logprob lp = logprob_of(row, vocab, t, 5);
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::models {

/// Alternatives a row may ask for (OpenAI's limit; more are sampled on the host).
inline constexpr int32_t kMaxTopLogprobs = 20;

struct sample_params {
  double temperature = 1.0;  ///< 0: greedy
  int32_t top_k = 0;         ///< 0: every token
  double top_p = 1.0;        ///< 1: every token
  double u = 0;              ///< the row's uniform draw in [0, 1) (unused by a greedy row)
  int32_t logprobs = -1;     ///< -1: none; else the chosen token's and this many alternatives
  double presence_penalty = 0, frequency_penalty = 0, repetition_penalty = 1;
  /// (token, count in the output) for every distinct token of the prompt and output (penalties).
  std::vector<std::pair<int32_t, int32_t>> history;
  std::vector<std::pair<int32_t, float>> logit_bias;  ///< added in this order

  bool greedy() const { return temperature <= 0 || top_k == 1; }
  bool penalized() const { return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1; }
  bool adjusts() const { return penalized() || !logit_bias.empty(); }
};

/// invalid_argument naming the field for parameters no sampler can use: a temperature, top_p,
/// penalty or bias that is not finite, a negative temperature or top_k, top_p outside (0, 1],
/// repetition_penalty <= 0, u outside [0, 1), logprobs outside -1..kMaxTopLogprobs, a history or
/// bias token outside [0, vocab), a negative count.
status check_sample_params(const sample_params& p, int64_t vocab);

/// A token's log-probability under a logits row (log-softmax in double precision), and the `top`
/// most likely tokens with theirs (best first, ties to the lowest id). NaN: no such position.
struct token_logprob {
  int32_t token = -1;
  double logprob = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<int32_t, double>> top;
};
token_logprob logprob_of(const float* logits, int64_t vocab, int32_t token, int32_t top);

/// The highest logit's token (lowest id among equals).
int32_t argmax_row(const float* logits, int64_t vocab);

/// The history penalties need: every distinct token of `tokens` (prompt then output) with its
/// count among tokens[prompt_length..]; ids outside [0, vocab) are left out.
std::vector<std::pair<int32_t, int32_t>> history_of(std::span<const int32_t> tokens, size_t prompt_length, int64_t vocab);

/// Applies the penalties and logit_bias in place, per token in this order: repetition (a positive
/// logit divided, a negative one multiplied), frequency and presence (subtracted, output tokens),
/// then the biases. Ids outside the row are ignored.
void adjust_row(float* logits, int64_t vocab, const sample_params& p);

/// Reused buffers of sample_row.
struct sample_scratch {
  std::vector<int32_t> order;
  std::vector<double> weights;
};
/// The token drawn with p.u from a row (already adjusted): greedy, or temperature with top-k and
/// top-p (nucleus) filtering; candidates best first with ties to the lowest id.
int32_t sample_row(const float* logits, int64_t vocab, const sample_params& p, sample_scratch& s);

/// adjust_row on the ids [begin, begin + n) of a row cut by vocabulary (`logits` holds those n):
/// each id gets exactly the adjustments adjust_row gives it.
void adjust_slice(float* logits, int64_t begin, int64_t n, const sample_params& p);

// ---- A row cut by vocabulary over several LM-head slices (a vocab-parallel LM head) ----
//
// Each slice tile holds LM-head rows [begin, begin + n) and answers a slice record per row:
// its adjusted argmax, the (max, sum of exp) of its raw logits, its top-N raw logits (N = the
// row's logprobs) and, with top_k, its top-k adjusted candidates. merge_slice_records takes the
// records in slice (= id) order and gives the token and log-probabilities of the unsplit row:
//  - greedy: the highest adjusted logit, ties to the lowest id (argmax_row's rule);
//  - top_k <= kMaxSplitTopK: the global top-k is the best k of the slices' top-k lists, and the
//    draw runs on them exactly as sample_row does (the same floats, the same double sums), so a
//    seeded row draws the same token;
//  - logprobs: log-sum-exp from the slices' (max, sum exp) pairs (within 1e-15 relative of
//    logprob_of's), the top-N the best N of the slices' top-N lists.
// Rows that sample over the whole vocabulary (temperature with top_k 0, alone or with top_p, or
// top_k over kMaxSplitTopK) need every weight in one order for an exact draw: split_samplable
// says false and the host takes those rows' logits (gathered from the slices) and samples them.

/// Top-k candidates a slice sends per row.
inline constexpr int32_t kMaxSplitTopK = 64;
/// Whether a row merges exactly from slice records (see above).
bool split_samplable(const sample_params& p, int64_t vocab);
/// One slice record: [written, best id, best adjusted, best raw, raw max (float bits), sum exp
/// (double; these two only for a row that asks logprobs), n top, n candidates, then n top x (id,
/// raw), then n candidates x (id, adjusted, raw)].
inline constexpr int64_t kSliceRecord = 9 + 2 * kMaxTopLogprobs + 3 * kMaxSplitTopK;
/// The record of ids [begin, begin + n): `raw` the slice's logits, `adjusted` after adjust_slice
/// (== raw when the row adjusts nothing). Reuses `s`.
void write_slice_record(int32_t* out, const float* raw, const float* adjusted, int64_t begin, int64_t n,
                        const sample_params& p, sample_scratch& s);
/// A row whose logits go to the host: no record.
void write_empty_slice_record(int32_t* out);
/// The row's answer from its slices' records (in id order); invalid_argument for a record not
/// written, or one whose ids or counts are outside the vocabulary or the record.
result<token_logprob> merge_slice_records(std::span<const int32_t* const> records, const sample_params& p, int64_t vocab,
                                          sample_scratch& s);

// ---- The wire form (int32 tensors) ----

/// The sample tensor: [rows, then per logits row: mode (0 logits, 1 sample), top_k, logprobs,
/// history entries, bias entries, temperature, top_p, u, presence, frequency, repetition (each a
/// double in two int32), then history pairs (token, count), then bias pairs (token, float bits)].
inline constexpr int64_t kSampleHeader = 17;
/// One answered row: [token (-1: not sampled), alternatives n, logprob (double), then n x (token,
/// double)] padded to kSampleRecord int32.
inline constexpr int64_t kSampleRecord = 4 + 3 * kMaxTopLogprobs;

class sample_writer {
 public:
  /// At most `capacity` int32 in all (the tile's tensor).
  explicit sample_writer(int64_t capacity) : capacity_(capacity), d_{0} {}
  /// A row sampled on the tile; false (and the row is written in logits mode) when its
  /// parameters do not fit the rest of the tensor or ask for more than kMaxTopLogprobs.
  bool add(const sample_params& p);
  /// A row whose logits the host takes.
  void add_logits();
  const std::vector<int32_t>& data() const { return d_; }
  int32_t rows() const { return d_[0]; }

 private:
  int64_t capacity_;
  std::vector<int32_t> d_;
};

/// One row of a parsed sample tensor.
struct sample_row_view {
  bool sample = false;
  sample_params params;
};
/// Checks `d` names exactly `rows` rows that lie within it, and every row's parameters
/// (check_sample_params against `vocab`): a tile never reads outside the tensor or samples with
/// parameters the host would refuse.
result<std::vector<sample_row_view>> parse_sample_tensor(std::span<const int32_t> d, int64_t rows, int64_t vocab);

/// The answer of one row (token -1: its logits were sent instead).
void write_sample_record(int32_t* out, int32_t token, const token_logprob* lp);
token_logprob read_sample_record(const int32_t* in);

}  // namespace tessera::models
