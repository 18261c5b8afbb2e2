// Sampling one logits row, and its wire form. See token_sampling.hpp.
#include "tessera/models/token_sampling.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace tessera::models {

namespace {
void put_double(int32_t* at, double v) { std::memcpy(at, &v, sizeof v); }
double get_double(const int32_t* at) {
  double v;
  std::memcpy(&v, at, sizeof v);
  return v;
}
std::string num(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
}  // namespace

status check_sample_params(const sample_params& p, int64_t vocab) {
  auto bad = [](const std::string& m) { return status::invalid("sampling: " + m); };
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return bad("temperature must be a finite number >= 0, not " + num(p.temperature));
  if (p.top_k < 0) return bad("top_k must be >= 0 (0: every token), not " + std::to_string(p.top_k));
  if (!(p.top_p > 0 && p.top_p <= 1)) return bad("top_p must be in (0, 1], not " + num(p.top_p));
  if (!(p.u >= 0 && p.u < 1)) return bad("the row's uniform draw must be in [0, 1), not " + num(p.u));
  if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs)
    return bad("logprobs must be -1 (none) or 0.." + std::to_string(kMaxTopLogprobs) + ", not " + std::to_string(p.logprobs));
  if (!std::isfinite(p.presence_penalty)) return bad("presence_penalty must be finite, not " + num(p.presence_penalty));
  if (!std::isfinite(p.frequency_penalty)) return bad("frequency_penalty must be finite, not " + num(p.frequency_penalty));
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0)
    return bad("repetition_penalty must be a finite number > 0, not " + num(p.repetition_penalty));
  for (const auto& [t, c] : p.history) {
    if (t < 0 || t >= vocab)
      return bad("history token " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    if (c < 0) return bad("history token " + std::to_string(t) + " has a negative count " + std::to_string(c));
  }
  for (const auto& [t, b] : p.logit_bias) {
    if (t < 0 || t >= vocab)
      return bad("logit_bias names token id " + std::to_string(t) + ", outside the vocabulary [0, " + std::to_string(vocab) + ")");
    if (!std::isfinite(b)) return bad("logit_bias of token " + std::to_string(t) + " must be finite");
  }
  return ok_status();
}

int32_t argmax_row(const float* logits, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
}

token_logprob logprob_of(const float* logits, int64_t vocab, int32_t token, int32_t top) {
  token_logprob out;
  out.token = token;
  if (vocab <= 0) return out;
  const double mx = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  if (token >= 0 && token < vocab) out.logprob = static_cast<double>(logits[token]) - lse;
  const auto k = std::min<int64_t>(std::max(top, 0), vocab);
  if (k > 0) {
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t x, int32_t y) {
      const float a = logits[x], b = logits[y];
      return a > b || (a == b && x < y);
    });
    out.top.reserve(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) out.top.emplace_back(order[static_cast<size_t>(i)], static_cast<double>(logits[order[static_cast<size_t>(i)]]) - lse);
  }
  return out;
}

std::vector<std::pair<int32_t, int32_t>> history_of(std::span<const int32_t> tokens, size_t prompt_length, int64_t vocab) {
  std::vector<std::pair<int32_t, int32_t>> out;
  std::vector<int32_t> slot(static_cast<size_t>(std::max<int64_t>(vocab, 0)), -1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || t >= vocab) continue;
    auto& s = slot[static_cast<size_t>(t)];
    if (s < 0) {
      s = static_cast<int32_t>(out.size());
      out.emplace_back(t, 0);
    }
    if (i >= prompt_length) ++out[static_cast<size_t>(s)].second;
  }
  return out;
}

void adjust_row(float* logits, int64_t vocab, const sample_params& p) { adjust_slice(logits, 0, vocab, p); }

namespace {
// sample_row's draw over candidates best first (value(i): the i-th's adjusted logit as a float;
// top: the row's highest): temperature weights, the top_p prefix, then the inverse CDF at p.u.
// The merge of slice records (merge_slice_records) draws with this same code.
template <class Value>
size_t draw_ordered(Value value, size_t keep, double top, const sample_params& p, std::vector<double>& weights) {
  weights.resize(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    weights[i] = std::exp((value(i) - top) / p.temperature);
    total += weights[i];
  }
  if (p.top_p < 1.0) {  // the smallest best-first prefix holding top_p of the probability
    double cum = 0;
    size_t cut = 0;
    while (cut < keep) {
      cum += weights[cut++];
      if (cum >= p.top_p * total) break;
    }
    keep = std::max<size_t>(cut, 1);
    total = cum;
  }
  double u = p.u * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= weights[i];
    if (u < 0) return i;
  }
  return keep - 1;
}
}  // namespace

int32_t sample_row(const float* logits, int64_t vocab, const sample_params& p, sample_scratch& s) {
  if (p.greedy()) return argmax_row(logits, vocab);
  auto& order = s.order;
  order.resize(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  auto better = [&](int32_t x, int32_t y) { return logits[x] > logits[y] || (logits[x] == logits[y] && x < y); };
  size_t keep = order.size();
  if (p.top_k > 0 && p.top_k < vocab) {
    keep = static_cast<size_t>(p.top_k);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), better);
  } else if (p.top_p < 1.0) {
    std::sort(order.begin(), order.end(), better);
  }
  const double top = logits[argmax_row(logits, vocab)];
  return order[draw_ordered([&](size_t i) { return logits[order[i]]; }, keep, top, p, s.weights)];
}

void adjust_slice(float* logits, int64_t begin, int64_t n, const sample_params& p) {
  auto in = [&](int32_t t) { return t >= begin && t - begin < n; };
  // Per token, the order serving's sampler always used: repetition, frequency + presence, bias.
  if (p.penalized()) {
    const auto r = static_cast<float>(p.repetition_penalty);
    for (const auto& [t, count] : p.history) {
      if (!in(t)) continue;
      float& v = logits[t - begin];
      if (p.repetition_penalty != 1) v = v > 0 ? v / r : v * r;
      if ((p.frequency_penalty != 0 || p.presence_penalty != 0) && count > 0)
        v -= static_cast<float>(count * p.frequency_penalty + p.presence_penalty);
    }
  }
  for (const auto& [t, b] : p.logit_bias)
    if (in(t)) logits[t - begin] += b;
}

bool split_samplable(const sample_params& p, int64_t vocab) {
  return p.greedy() || (p.top_k > 0 && p.top_k < vocab && p.top_k <= kMaxSplitTopK);
}

namespace {
void put_float(int32_t* at, float v) { std::memcpy(at, &v, sizeof v); }
float get_float(const int32_t* at) {
  float v;
  std::memcpy(&v, at, sizeof v);
  return v;
}
constexpr int64_t kTopAt = 9, kCandAt = 9 + 2 * kMaxTopLogprobs;
}  // namespace

void write_empty_slice_record(int32_t* out) { std::fill_n(out, kSliceRecord, 0); }

void write_slice_record(int32_t* out, const float* raw, const float* adjusted, int64_t begin, int64_t n,
                        const sample_params& p, sample_scratch& s) {
  std::fill_n(out, kSliceRecord, 0);
  out[0] = 1;
  out[1] = -1;
  if (n <= 0) return;
  const int64_t b = argmax_row(adjusted, n);
  out[1] = static_cast<int32_t>(begin + b);
  put_float(out + 2, adjusted[b]);
  put_float(out + 3, raw[b]);
  if (p.logprobs >= 0) {  // as logprob_of: exp of (logit - max) in double; only rows that ask
    const double mx = *std::max_element(raw, raw + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(raw[i]) - mx);
    put_float(out + 4, static_cast<float>(mx));
    put_double(out + 5, sum);
  }
  auto& order = s.order;
  auto best_k = [&](const float* v, int64_t k) {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t x, int32_t y) { return v[x] > v[y] || (v[x] == v[y] && x < y); });
  };
  const int64_t top = std::min<int64_t>(std::clamp(p.logprobs, 0, kMaxTopLogprobs), n);
  out[7] = static_cast<int32_t>(top);
  if (top > 0) {
    best_k(raw, top);
    for (int64_t i = 0; i < top; ++i) {
      const int32_t id = order[static_cast<size_t>(i)];
      out[kTopAt + 2 * i] = static_cast<int32_t>(begin + id);
      put_float(out + kTopAt + 2 * i + 1, raw[id]);
    }
  }
  if (!p.greedy() && p.top_k > 0) {
    const int64_t k = std::min<int64_t>(std::min(p.top_k, kMaxSplitTopK), n);
    out[8] = static_cast<int32_t>(k);
    best_k(adjusted, k);
    for (int64_t i = 0; i < k; ++i) {
      const int32_t id = order[static_cast<size_t>(i)];
      out[kCandAt + 3 * i] = static_cast<int32_t>(begin + id);
      put_float(out + kCandAt + 3 * i + 1, adjusted[id]);
      put_float(out + kCandAt + 3 * i + 2, raw[id]);
    }
  }
}

result<token_logprob> merge_slice_records(std::span<const int32_t* const> records, const sample_params& p, int64_t vocab,
                                          sample_scratch& s) {
  if (records.empty()) return status::invalid("no slice records to merge");
  if (!p.greedy() && !split_samplable(p, vocab))
    return status::invalid("a row sampled over the whole vocabulary (top_k " + std::to_string(p.top_k) +
                           ") does not merge from slices: its logits go to the host");
  auto id_ok = [&](int32_t t) { return t >= 0 && t < vocab; };
  for (size_t j = 0; j < records.size(); ++j) {
    const int32_t* r = records[j];
    const std::string where = "slice record " + std::to_string(j);
    if (r[0] != 1) return status::invalid(where + " was not written (its tile sampled nothing for the row)");
    if (r[1] != -1 && !id_ok(r[1])) return status::invalid(where + ": best token " + std::to_string(r[1]) + " outside the vocabulary");
    if (r[7] < 0 || r[7] > kMaxTopLogprobs || r[8] < 0 || r[8] > kMaxSplitTopK)
      return status::invalid(where + ": " + std::to_string(r[7]) + " top and " + std::to_string(r[8]) + " candidates overrun the record");
    for (int32_t i = 0; i < r[7]; ++i)
      if (!id_ok(r[kTopAt + 2 * i])) return status::invalid(where + ": a top token outside the vocabulary");
    for (int32_t i = 0; i < r[8]; ++i)
      if (!id_ok(r[kCandAt + 3 * i])) return status::invalid(where + ": a candidate outside the vocabulary");
  }
  int32_t token = -1;
  float chosen_raw = 0;
  if (p.greedy()) {  // slices in id order: a later slice wins only with a strictly higher logit
    float best = 0;
    for (const int32_t* r : records) {
      if (r[1] < 0) continue;
      const float v = get_float(r + 2);
      if (token < 0 || v > best) token = r[1], best = v, chosen_raw = get_float(r + 3);
    }
    if (token < 0) return status::invalid("the slice records hold no token");
  } else {
    struct cand {
      int32_t id;
      float adjusted, raw;
    };
    std::vector<cand> c;
    for (const int32_t* r : records)
      for (int32_t i = 0; i < r[8]; ++i) c.push_back({r[kCandAt + 3 * i], get_float(r + kCandAt + 3 * i + 1), get_float(r + kCandAt + 3 * i + 2)});
    const auto k = static_cast<size_t>(p.top_k);
    if (c.size() < k)
      return status::invalid("the slices sent " + std::to_string(c.size()) + " candidates for top_k " + std::to_string(k));
    std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k), c.end(), [](const cand& x, const cand& y) {
      return x.adjusted > y.adjusted || (x.adjusted == y.adjusted && x.id < y.id);
    });
    const size_t i = draw_ordered([&](size_t q) { return c[q].adjusted; }, k, c[0].adjusted, p, s.weights);
    token = c[i].id, chosen_raw = c[i].raw;
  }
  token_logprob out;
  out.token = token;
  if (p.logprobs < 0) return out;
  double mx = -std::numeric_limits<double>::infinity();
  for (const int32_t* r : records)
    if (r[1] >= 0) mx = std::max(mx, static_cast<double>(get_float(r + 4)));
  double sum = 0;
  for (const int32_t* r : records)
    if (r[1] >= 0) sum += get_double(r + 5) * std::exp(static_cast<double>(get_float(r + 4)) - mx);
  const double lse = mx + std::log(sum);
  out.logprob = static_cast<double>(chosen_raw) - lse;
  std::vector<std::pair<int32_t, float>> top;
  for (const int32_t* r : records)
    for (int32_t i = 0; i < r[7]; ++i) top.emplace_back(r[kTopAt + 2 * i], get_float(r + kTopAt + 2 * i + 1));
  const auto k = std::min<size_t>(std::min<int64_t>(p.logprobs, vocab), top.size());
  std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(k), top.end(),
                    [](const auto& x, const auto& y) { return x.second > y.second || (x.second == y.second && x.first < y.first); });
  for (size_t i = 0; i < k; ++i) out.top.emplace_back(top[i].first, static_cast<double>(top[i].second) - lse);
  return out;
}

bool sample_writer::add(const sample_params& p) {
  const int64_t need = kSampleHeader + 2 * static_cast<int64_t>(p.history.size() + p.logit_bias.size());
  if (p.logprobs > kMaxTopLogprobs || static_cast<int64_t>(d_.size()) + need > capacity_) {
    add_logits();
    return false;
  }
  const size_t at = d_.size();
  d_.resize(at + static_cast<size_t>(need), 0);
  int32_t* h = d_.data() + at;
  h[0] = 1;
  h[1] = p.top_k;
  h[2] = p.logprobs;
  h[3] = static_cast<int32_t>(p.history.size());
  h[4] = static_cast<int32_t>(p.logit_bias.size());
  put_double(h + 5, p.temperature);
  put_double(h + 7, p.top_p);
  put_double(h + 9, p.u);
  put_double(h + 11, p.presence_penalty);
  put_double(h + 13, p.frequency_penalty);
  put_double(h + 15, p.repetition_penalty);
  int32_t* e = h + kSampleHeader;
  for (const auto& [t, c] : p.history) *e++ = t, *e++ = c;
  for (const auto& [t, b] : p.logit_bias) {
    *e++ = t;
    std::memcpy(e++, &b, sizeof b);
  }
  ++d_[0];
  return true;
}

void sample_writer::add_logits() {
  // A logits-mode row is a header of zeros but for the mode (0) and the defaults' doubles.
  const size_t at = d_.size();
  d_.resize(at + static_cast<size_t>(kSampleHeader), 0);
  int32_t* h = d_.data() + at;
  put_double(h + 5, 1.0);
  put_double(h + 7, 1.0);
  put_double(h + 15, 1.0);
  h[2] = -1;
  ++d_[0];
}

result<std::vector<sample_row_view>> parse_sample_tensor(std::span<const int32_t> d, int64_t rows, int64_t vocab) {
  if (d.empty()) return status::invalid("the sample tensor is empty");
  if (d[0] != rows)
    return status::invalid("the sample tensor names " + std::to_string(d[0]) + " rows, the step has " + std::to_string(rows) +
                           " logits rows");
  std::vector<sample_row_view> out(static_cast<size_t>(rows));
  size_t at = 1;
  for (int64_t r = 0; r < rows; ++r) {
    const std::string where = "sample tensor row " + std::to_string(r);
    if (at + kSampleHeader > d.size()) return status::invalid(where + " overruns the tensor (" + std::to_string(d.size()) + " values)");
    const int32_t* h = d.data() + at;
    if (h[0] != 0 && h[0] != 1) return status::invalid(where + ": mode " + std::to_string(h[0]) + " is neither 0 (logits) nor 1 (sample)");
    if (h[3] < 0 || h[4] < 0) return status::invalid(where + ": negative entry counts");
    const uint64_t entries = 2 * (uint64_t(uint32_t(h[3])) + uint64_t(uint32_t(h[4])));
    if (at + kSampleHeader + entries > d.size())
      return status::invalid(where + ": " + std::to_string(h[3]) + " history and " + std::to_string(h[4]) +
                             " bias entries overrun the tensor (" + std::to_string(d.size()) + " values)");
    auto& v = out[static_cast<size_t>(r)];
    v.sample = h[0] == 1;
    auto& p = v.params;
    p.top_k = h[1];
    p.logprobs = h[2];
    p.temperature = get_double(h + 5);
    p.top_p = get_double(h + 7);
    p.u = get_double(h + 9);
    p.presence_penalty = get_double(h + 11);
    p.frequency_penalty = get_double(h + 13);
    p.repetition_penalty = get_double(h + 15);
    const int32_t* e = h + kSampleHeader;
    p.history.resize(static_cast<size_t>(h[3]));
    for (auto& [t, c] : p.history) t = *e++, c = *e++;
    p.logit_bias.resize(static_cast<size_t>(h[4]));
    for (auto& [t, b] : p.logit_bias) {
      t = *e++;
      std::memcpy(&b, e++, sizeof b);
    }
    if (v.sample)
      if (auto st = check_sample_params(p, vocab); !st.ok()) return st.with_context(where);
    at += kSampleHeader + entries;
  }
  return out;
}

void write_sample_record(int32_t* out, int32_t token, const token_logprob* lp) {
  std::fill_n(out, kSampleRecord, 0);
  out[0] = token;
  const size_t n = lp ? std::min<size_t>(lp->top.size(), kMaxTopLogprobs) : 0;
  out[1] = static_cast<int32_t>(n);
  put_double(out + 2, lp ? lp->logprob : std::numeric_limits<double>::quiet_NaN());
  for (size_t i = 0; i < n; ++i) {
    out[4 + 3 * i] = lp->top[i].first;
    put_double(out + 5 + 3 * i, lp->top[i].second);
  }
}

token_logprob read_sample_record(const int32_t* in) {
  token_logprob lp;
  lp.token = in[0];
  lp.logprob = get_double(in + 2);
  const int32_t n = std::clamp(in[1], 0, kMaxTopLogprobs);
  for (int32_t i = 0; i < n; ++i) lp.top.emplace_back(in[4 + 3 * i], get_double(in + 5 + 3 * i));
  return lp;
}

}  // namespace tessera::models
