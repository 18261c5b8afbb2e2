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

sampler::sampler(sampling_params p) : p_(p), rng_(seed_of(p)) {}

double sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t sampler::argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

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
  token_logprob out;
  out.token = token;
  if (logits.empty()) return out;
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  if (token >= 0 && static_cast<size_t>(token) < logits.size())
    out.logprob = static_cast<double>(logits[static_cast<size_t>(token)]) - lse;
  const size_t k = std::min(static_cast<size_t>(std::max(top, 0)), logits.size());
  if (k > 0) {
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), [&](int32_t x, int32_t y) {
      const float a = logits[static_cast<size_t>(x)], b = logits[static_cast<size_t>(y)];
      return a > b || (a == b && x < y);
    });
    out.top.reserve(k);
    for (size_t i = 0; i < k; ++i)
      out.top.emplace_back(order[i], static_cast<double>(logits[static_cast<size_t>(order[i])]) - lse);
  }
  return out;
}

void sampler::adjust(std::vector<float>& logits, const std::vector<int32_t>& tokens, size_t prompt_length) const {
  const auto vocab = logits.size();
  auto in = [&](int32_t t) { return t >= 0 && static_cast<size_t>(t) < vocab; };
  if (p_.repetition_penalty != 1) {
    std::vector<bool> seen(vocab, false);
    for (int32_t t : tokens)
      if (in(t)) seen[static_cast<size_t>(t)] = true;
    const auto r = static_cast<float>(p_.repetition_penalty);
    for (size_t i = 0; i < vocab; ++i)
      if (seen[i]) logits[i] = logits[i] > 0 ? logits[i] / r : logits[i] * r;
  }
  if (p_.frequency_penalty != 0 || p_.presence_penalty != 0) {
    std::vector<int32_t> count(vocab, 0);
    for (size_t i = std::min(prompt_length, tokens.size()); i < tokens.size(); ++i)
      if (in(tokens[i])) ++count[static_cast<size_t>(tokens[i])];
    for (size_t i = 0; i < vocab; ++i)
      if (count[i] > 0)
        logits[i] -= static_cast<float>(count[i] * p_.frequency_penalty + p_.presence_penalty);
  }
  for (const auto& [t, b] : p_.logit_bias)
    if (in(t)) logits[static_cast<size_t>(t)] += b;
}

int32_t sampler::next(const std::vector<float>& logits) {
  const auto vocab = static_cast<int32_t>(logits.size());
  if (p_.temperature <= 0 || p_.top_k == 1) return argmax(logits);
  // Candidates, best first (ties by id) when a filter needs the order; all tokens otherwise.
  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  auto better = [&](int32_t x, int32_t y) {
    return logits[static_cast<size_t>(x)] > logits[static_cast<size_t>(y)] ||
           (logits[static_cast<size_t>(x)] == logits[static_cast<size_t>(y)] && x < y);
  };
  size_t keep = order_.size();
  if (p_.top_k > 0 && p_.top_k < vocab) {
    keep = static_cast<size_t>(p_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep), order_.end(), better);
  } else if (p_.top_p < 1.0) {
    std::sort(order_.begin(), order_.end(), better);
  }
  const double top = logits[static_cast<size_t>(argmax(logits))];
  weights_.resize(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    weights_[i] = std::exp((logits[static_cast<size_t>(order_[i])] - top) / p_.temperature);
    total += weights_[i];
  }
  if (p_.top_p < 1.0) {  // the smallest best-first prefix holding top_p of the probability
    double cum = 0;
    size_t cut = 0;
    while (cut < keep) {
      cum += weights_[cut++];
      if (cum >= p_.top_p * total) break;
    }
    keep = std::max<size_t>(cut, 1);
    total = cum;
  }
  double u = uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= weights_[i];
    if (u < 0) return order_[i];
  }
  return order_[keep - 1];
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
