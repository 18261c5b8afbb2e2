// OpenAI's n, best_of, logprobs, echo, penalties and logit_bias. See openai_choices.hpp.
#include "tessera/serving/openai_choices.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "tessera/serving/api.hpp"  // json_kind
#include "tessera/serving/utf8.hpp"

namespace tessera::serving {

using json = nlohmann::json;

namespace {

std::string kind(const json& v) { return std::string(detail::json_kind(v)); }

bool present(const json& j, const char* name) { return j.contains(name) && !j[name].is_null(); }

std::optional<openai_field_error> integer(const json& j, const char* name, int64_t lo, int64_t hi, int32_t& out) {
  if (!present(j, name)) return std::nullopt;
  const json& v = j[name];
  const bool whole = v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (!whole || v.is_boolean())
    return openai_field_error{name, std::string("'") + name + "' must be an integer, not " + kind(v)};
  const double d = v.get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    return openai_field_error{name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
                                        std::to_string(hi) + ", not " + v.dump()};
  out = static_cast<int32_t>(d);
  return std::nullopt;
}

std::optional<openai_field_error> number(const json& j, const char* name, double lo, double hi, bool lo_open, double& out) {
  if (!present(j, name)) return std::nullopt;
  const json& v = j[name];
  if (!v.is_number()) return openai_field_error{name, std::string("'") + name + "' must be a number, not " + kind(v)};
  const double d = v.get<double>();
  if (!(lo_open ? d > lo : d >= lo) || !(d <= hi))
    return openai_field_error{name, std::string("'") + name + "' must be " + (lo_open ? "above " : "between ") +
                                        nlohmann::json(lo).dump() + (lo_open ? " and at most " : " and ") +
                                        nlohmann::json(hi).dump() + ", not " + v.dump()};
  out = d;
  return std::nullopt;
}

std::string escaped_bytes(std::string_view b) {
  static const char* hex = "0123456789abcdef";
  std::string out = "bytes:";
  for (unsigned char c : b) {
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

json bytes_json(const std::string& b) {
  json a = json::array();
  for (unsigned char c : b) a.push_back(static_cast<int>(c));
  return a;
}

}  // namespace

std::optional<openai_field_error> read_openai_choices(const json& j, bool chat, int32_t vocab, bool stream,
                                                      llm_request& r, openai_choices& x) {
  if (auto e = integer(j, "n", 1, kMaxChoices, x.n)) return e;
  x.best_of = x.n;
  if (!chat) {
    if (auto e = integer(j, "best_of", 1, kMaxBestOf, x.best_of)) return e;
    if (present(j, "best_of") && x.best_of < x.n)
      return openai_field_error{"best_of", "'best_of' (" + std::to_string(x.best_of) + ") must be at least 'n' (" +
                                               std::to_string(x.n) + ")"};
    if (stream && x.best_of > x.n)
      return openai_field_error{"best_of", "'best_of' above 'n' cannot be streamed (the best are known only at the end)"};
    if (present(j, "logprobs")) {
      if (j["logprobs"].is_boolean())
        return openai_field_error{"logprobs", "'logprobs' on /v1/completions is the number of alternatives (0..20), not a boolean"};
      if (auto e = integer(j, "logprobs", 0, 20, x.logprobs)) return e;
    }
    if (present(j, "echo")) {
      if (!j["echo"].is_boolean()) return openai_field_error{"echo", "'echo' must be true or false, not " + kind(j["echo"])};
      x.echo = j["echo"].get<bool>();
    }
  } else {
    if (present(j, "logprobs")) {
      if (!j["logprobs"].is_boolean())
        return openai_field_error{"logprobs", "'logprobs' on /v1/chat/completions must be true or false, not " + kind(j["logprobs"])};
      x.chat_logprobs = j["logprobs"].get<bool>();
    }
    int32_t top = -1;
    if (auto e = integer(j, "top_logprobs", 0, 20, top)) return e;
    if (top >= 0 && !x.chat_logprobs)
      return openai_field_error{"top_logprobs", "'top_logprobs' needs 'logprobs': true"};
    if (x.chat_logprobs) x.logprobs = std::max(top, 0);
  }
  r.n = x.best_of;
  // best_of ranks the choices by their tokens' log-probabilities: computed even when not shown.
  r.logprobs = x.best_of > x.n ? std::max(x.logprobs, 0) : x.logprobs;
  // Echo with logprobs scores the prompt; echo with max_tokens 0 scores it too (nothing else runs).
  r.prompt_logprobs = x.echo && (x.logprobs >= 0 || r.max_tokens == 0);
  auto& s = r.sampling;
  if (auto e = number(j, "presence_penalty", -2, 2, false, s.presence_penalty)) return e;
  if (auto e = number(j, "frequency_penalty", -2, 2, false, s.frequency_penalty)) return e;
  if (auto e = number(j, "repetition_penalty", 0, 10, true, s.repetition_penalty)) return e;
  if (present(j, "logit_bias")) {
    const json& b = j["logit_bias"];
    if (!b.is_object())
      return openai_field_error{"logit_bias", "'logit_bias' must be an object of token id to bias, not " + kind(b)};
    if (b.size() > 1024) return openai_field_error{"logit_bias", "'logit_bias' holds more than 1024 tokens"};
    for (const auto& [key, value] : b.items()) {
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || key.empty())
        return openai_field_error{"logit_bias", "'logit_bias' keys are token ids; \"" + printable(key, 40) + "\" is not one"};
      if (id < 0 || id >= vocab)
        return openai_field_error{"logit_bias", "'logit_bias' names token id " + std::to_string(id) +
                                                    ", outside the vocabulary (0.." + std::to_string(vocab - 1) + ")"};
      if (!value.is_number())
        return openai_field_error{"logit_bias", "'logit_bias' values must be numbers, not " + kind(value) + " (token " + key + ")"};
      const double v = value.get<double>();
      if (!(v >= -100 && v <= 100))
        return openai_field_error{"logit_bias", "'logit_bias' values must be between -100 and 100, not " + value.dump() +
                                                    " (token " + key + ")"};
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(v));
    }
  }
  return std::nullopt;
}

std::string token_text(const llm_tokenizer& tok, int32_t id, std::string* bytes) {
  std::string b = tok.token_bytes(id);
  std::string out = find_invalid_utf8(b) ? escaped_bytes(b) : b;
  if (bytes) *bytes = std::move(b);
  return out;
}

json completion_logprobs_json(const llm_tokenizer& tok, const std::vector<token_logprob>& tokens, size_t offset) {
  json ts = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const auto& t : tokens) {
    std::string b;
    ts.push_back(token_text(tok, t.token, &b));
    offs.push_back(offset);
    offset += b.size();
    if (std::isnan(t.logprob)) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) {
      const std::string s = token_text(tok, id);
      if (!top.contains(s)) top[s] = lp;
    }
    tops.push_back(std::move(top));
  }
  return json{{"tokens", ts}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json chat_logprobs_json(const llm_tokenizer& tok, const std::vector<token_logprob>& tokens, int32_t top) {
  json content = json::array();
  for (const auto& t : tokens) {
    std::string b;
    const std::string s = token_text(tok, t.token, &b);
    json alts = json::array();
    for (size_t i = 0; i < t.top.size() && static_cast<int32_t>(i) < top; ++i) {
      std::string ab;
      const std::string as = token_text(tok, t.top[i].first, &ab);
      alts.push_back({{"token", as}, {"logprob", t.top[i].second}, {"bytes", bytes_json(ab)}});
    }
    content.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_json(b)}, {"top_logprobs", alts}});
  }
  return json{{"content", content}, {"refusal", nullptr}};
}

bool choice_collector::add(const llm_event& ev) {
  if (ev.index < 0 || static_cast<size_t>(ev.index) >= choices_.size()) return finished_ == choices_.size();
  auto& c = choices_[static_cast<size_t>(ev.index)];
  c.text += ev.text;
  c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
  c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
  if (!ev.prompt_logprobs.empty()) c.prompt_logprobs = ev.prompt_logprobs;
  prompt_tokens_ = ev.prompt_tokens;
  c.completion_tokens = ev.completion_tokens;
  if (ev.finished && !c.finished) {
    c.finished = true;
    c.finish_reason = ev.finish_reason;
    c.error = ev.error;
    ++finished_;
  }
  return finished_ == choices_.size();
}

const choice_collector::choice* choice_collector::failed() const {
  for (const auto& c : choices_)
    if (c.finish_reason == "error" || c.finish_reason == "cancelled") return &c;
  return nullptr;
}

std::vector<size_t> choice_collector::best(int32_t n) const {
  std::vector<size_t> order(choices_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (n >= static_cast<int32_t>(order.size())) return order;
  auto cumulative = [&](size_t i) {  // max_tokens 0: 0 for every choice (the prompt alone)
    double s = 0;
    for (const auto& t : choices_[i].logprobs) s += t.logprob;
    return s;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cumulative(a) > cumulative(b); });
  order.resize(static_cast<size_t>(std::max(n, 0)));
  std::sort(order.begin(), order.end());
  return order;
}

int32_t choice_collector::completion_tokens() const {
  int32_t s = 0;
  for (const auto& c : choices_) s += c.completion_tokens;
  return s;
}

}  // namespace tessera::serving
