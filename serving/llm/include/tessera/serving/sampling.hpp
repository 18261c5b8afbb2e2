// tessera/serving/sampling.hpp: choosing the next token from a sequence's logits, and the text
// side of stopping.
//
// Penalties and logit_bias change a copy of the logits the sampler draws from; log-probabilities
// (logprob_of) are always those of the raw logits, before any penalty or bias, as OpenAI
// documents.
//
// sampler: greedy (temperature 0), or temperature with top-k and top-p (nucleus) filtering, drawn
// from the request's own generator (std::mt19937_64, whose sequence the C++ standard fixes)
// seeded by the request's `seed`: a request's draws never depend on what else shares its batch.
// Ties go to the lowest token id.
//
// stop_text: the text a request has produced, with stop strings matched on the text (a stop
// string may span tokens): push() returns what may be sent now, holding back any tail that could
// still become a stop string; a matched stop string and everything after it are never sent.
//
//   sampler s({.temperature = 0.8, .top_k = 40, .top_p = 0.95, .seed = 7});
//   int32_t token = s.next(logits);
//   stop_text out({"\n\n", "User:"});
//   std::string send = out.push(decoded_piece);   // "" while a stop string may be starting
//   if (out.stopped()) ...                         // finish_reason "stop"
#pragma once

#include <cstdint>
#include <limits>
#include <utility>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/models/token_sampling.hpp"

namespace tessera::serving {

struct sampling_params {
  double temperature = 1.0;  ///< 0: greedy
  int32_t top_k = 0;         ///< 0: every token
  double top_p = 1.0;        ///< 1: every token
  std::optional<uint64_t> seed;  ///< none: a seed from std::random_device
  /// OpenAI's: subtracted from the logit of every token the output holds (once, presence) or per
  /// occurrence (frequency).
  double presence_penalty = 0, frequency_penalty = 0;
  /// vLLM's: a token of the prompt or the output has a positive logit divided by it, a negative
  /// one multiplied (1: off).
  double repetition_penalty = 1;
  /// (token id, bias) added to the logits before sampling (ids checked by the caller).
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool adjusts() const {
    return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1 || !logit_bias.empty();
  }
};

/// A token's log-probability under a logits row (log-softmax in double precision), and the
/// `top` most likely tokens of that row with theirs (best first, ties to the lowest id).
/// logprob is NaN for a position with none (the first token of an echoed prompt). The same
/// function the LM-head tile runs (models/token_sampling.hpp).
using models::token_logprob;
token_logprob logprob_of(const std::vector<float>& logits, int32_t token, int32_t top);

class sampler {
 public:
  explicit sampler(sampling_params p);
  /// The next token; logits must not be empty. Draws one uniform unless the sampler is greedy.
  int32_t next(const std::vector<float>& logits);
  /// The same with a uniform drawn before (draw()): models::sample_row, as the LM-head tile runs it.
  int32_t next(const std::vector<float>& logits, double u);
  /// The uniform next() would draw now (none for a greedy sampler: 0).
  double draw() { return greedy() ? 0.0 : uniform(); }
  bool greedy() const { return p_.temperature <= 0 || p_.top_k == 1; }
  /// This row's parameters for models::sample_row / the tile: the request's sampling, `u`, the
  /// penalties' history of `prompt_and_output`, and `logprobs` (-1: none).
  models::sample_params row_params(double u, const std::vector<int32_t>& prompt_and_output, size_t prompt_length,
                                   int32_t logprobs, int64_t vocab) const;
  /// Applies the penalties and logit_bias to `logits` in this order: repetition (prompt and
  /// output tokens), frequency and presence (output tokens), bias. Ids outside the row are ignored.
  void adjust(std::vector<float>& logits, const std::vector<int32_t>& prompt_and_output,
              size_t prompt_length) const;
  const sampling_params& params() const { return p_; }

  /// The highest logit's token (lowest id among equals).
  static int32_t argmax(const std::vector<float>& logits);
  /// Highest minus second-highest logit (infinity with fewer than two).
  static float top2_margin(const std::vector<float>& logits);

 private:
  double uniform();  // [0, 1) from 53 bits of the generator
  sampling_params p_;
  std::mt19937_64 rng_;
  models::sample_params row_;    // the request's part of the row parameters
  models::sample_params plain_;  // row_ without the biases: what next() draws with
  models::sample_scratch scratch_;
};

class stop_text {
 public:
  explicit stop_text(std::vector<std::string> stops);
  /// Appends decoded text; returns the text that may be sent now (possibly empty).
  std::string push(std::string_view piece);
  /// At the end without a stop string: the text held back.
  std::string flush();
  bool stopped() const { return stopped_; }
  /// All text sent or to be sent (the output without the stop string).
  const std::string& text() const { return text_; }

 private:
  std::vector<std::string> stops_;
  std::string text_;  // everything pushed (cut at the stop string once stopped)
  size_t sent_ = 0;
  bool stopped_ = false;
};

}  // namespace tessera::serving
