// Token sampling and stop strings. See sampling.hpp.
#include "tessera/serving/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tessera::serving {

namespace {
uint64_t seed_of(const sampling_params& p) {
  if (p.seed) return *p.seed;
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}
}  // namespace

sampler::sampler(sampling_params p) : p_(p), rng_(seed_of(p)) {
  row_.temperature = p_.temperature;
  row_.top_k = p_.top_k;
  row_.top_p = p_.top_p;
  row_.presence_penalty = p_.presence_penalty;
  row_.frequency_penalty = p_.frequency_penalty;
  row_.repetition_penalty = p_.repetition_penalty;
  row_.logit_bias = p_.logit_bias;
  plain_ = row_;
  plain_.logit_bias.clear();  // adjust() applies them; sample_row does not read them
}

double sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t sampler::argmax(const std::vector<float>& logits) { return models::argmax_row(logits.data(), static_cast<int64_t>(logits.size())); }

float sampler::top2_margin(const std::vector<float>& logits) {
  if (logits.size() < 2) return std::numeric_limits<float>::infinity();
  float a = -std::numeric_limits<float>::infinity(), b = a;
  for (float v : logits) {
    if (v > a) {
      b = a;
      a = v;
    } else if (v > b) {
      b = v;
    }
  }
  return a - b;
}

token_logprob logprob_of(const std::vector<float>& logits, int32_t token, int32_t top) {
  return models::logprob_of(logits.data(), static_cast<int64_t>(logits.size()), token, top);
}

models::sample_params sampler::row_params(double u, const std::vector<int32_t>& tokens, size_t prompt_length,
                                          int32_t logprobs, int64_t vocab) const {
  models::sample_params r = row_;
  r.u = u;
  r.logprobs = logprobs;
  if (r.penalized()) r.history = models::history_of(tokens, prompt_length, vocab);
  return r;
}

void sampler::adjust(std::vector<float>& logits, const std::vector<int32_t>& tokens, size_t prompt_length) const {
  const auto vocab = static_cast<int64_t>(logits.size());
  models::adjust_row(logits.data(), vocab, row_params(0, tokens, prompt_length, -1, vocab));
}

int32_t sampler::next(const std::vector<float>& logits) { return next(logits, draw()); }

int32_t sampler::next(const std::vector<float>& logits, double u) {
  plain_.u = u;
  return models::sample_row(logits.data(), static_cast<int64_t>(logits.size()), plain_, scratch_);
}

stop_text::stop_text(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string stop_text::push(std::string_view piece) {
  if (stopped_) return {};
  text_.append(piece);
  // The earliest stop string that now appears (searched from where it could first start).
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    // Text before sent_ holds no stop string nor the start of one (held back below).
    size_t at = text_.find(s, sent_);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    text_.resize(cut);
    std::string out = text_.substr(sent_);
    sent_ = text_.size();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, text_.size()); len > hold; --len)
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  }
  size_t until = std::max(sent_, text_.size() - hold);
  std::string out = text_.substr(sent_, until - sent_);
  sent_ = until;
  return out;
}

std::string stop_text::flush() {
  std::string out = text_.substr(sent_);
  sent_ = text_.size();
  return out;
}

}  // namespace tessera::serving
