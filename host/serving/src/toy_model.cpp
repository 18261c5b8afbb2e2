// The toy tokenizer and model. See toy_model.hpp.
#include "tessera/serving/toy_model.hpp"

#include <cctype>
#include <cmath>

namespace tessera::serving {

void truncate_sequence(host::sequence_input& s, int32_t max_length, int32_t sep_id) {
  if (max_length < 2 || static_cast<int32_t>(s.token_ids.size()) <= max_length) return;
  s.token_ids.resize(static_cast<size_t>(max_length));
  s.token_ids.back() = sep_id;
  if (!s.token_type_ids.empty()) s.token_type_ids.resize(static_cast<size_t>(max_length));
}

namespace {

constexpr int32_t cls_id = 101;
constexpr int32_t sep = 102;

int32_t word_id(std::string_view w) {
  uint32_t h = 2166136261u;
  for (unsigned char c : w) h = (h ^ c) * 16777619u;
  return 1000 + static_cast<int32_t>(h % (30522u - 1000u));
}

void append_words(std::string_view text, std::vector<int32_t>& out) {
  std::string word;
  auto flush = [&] {
    if (!word.empty()) out.push_back(word_id(word));
    word.clear();
  };
  for (unsigned char c : text) {
    if (std::isspace(c)) {
      flush();
    } else if (std::ispunct(c)) {
      flush();
      out.push_back(word_id(std::string_view(reinterpret_cast<const char*>(&c), 1)));
    } else {
      word.push_back(static_cast<char>(std::tolower(c)));
    }
  }
  flush();
}

class toy_tokenizer final : public tokenizer {
 public:
  result<host::sequence_input> encode(std::string_view text, int32_t max_length) const override {
    host::sequence_input s;
    s.token_ids.push_back(cls_id);
    append_words(text, s.token_ids);
    s.token_ids.push_back(sep);
    s.token_type_ids.assign(s.token_ids.size(), 0);
    truncate_sequence(s, max_length, sep);
    return s;
  }
  result<host::sequence_input> encode_pair(std::string_view a, std::string_view b,
                                           int32_t max_length) const override {
    auto s = encode(a, 0);
    append_words(b, s->token_ids);
    s->token_ids.push_back(sep);
    s->token_type_ids.resize(s->token_ids.size(), 1);
    truncate_sequence(*s, max_length, sep);
    return s;
  }
};

}  // namespace

std::shared_ptr<const tokenizer> make_toy_tokenizer() { return std::make_shared<toy_tokenizer>(); }

std::vector<float> toy_logits(const host::sequence_input& s, int32_t num_labels) {
  std::vector<float> out(static_cast<size_t>(num_labels), 0.0f);
  for (size_t i = 0; i < s.token_ids.size(); ++i) {
    int32_t type = i < s.token_type_ids.size() ? s.token_type_ids[i] : 0;
    for (int32_t j = 0; j < num_labels; ++j) {
      uint32_t h = static_cast<uint32_t>(s.token_ids[i]) * 2654435761u ^
                   static_cast<uint32_t>(i * 97 + j * 131 + type * 7919);
      out[static_cast<size_t>(j)] += static_cast<float>(h % 1000u) / 1000.0f - 0.5f;
    }
  }
  for (auto& v : out) v /= std::sqrt(static_cast<float>(std::max<size_t>(1, s.token_ids.size())));
  return out;
}

std::shared_ptr<thread_pool_backend> make_toy_backend(host::backend_info info, int threads,
                                                      std::chrono::nanoseconds per_token) {
  int32_t labels = info.num_labels;
  forward_fn fwd = [labels, per_token](const host::batch_request& req)
      -> result<std::vector<float>> {
    std::vector<float> logits;
    logits.reserve(req.sequences.size() * static_cast<size_t>(labels));
    int64_t computed = 0;
    for (const auto& s : req.sequences) {
      if (req.layout == host::batch_layout::padded &&
          req.padded_length < static_cast<int32_t>(s.token_ids.size()))
        return status::invalid("padded_length " + std::to_string(req.padded_length) +
                               " is shorter than a sequence of " +
                               std::to_string(s.token_ids.size()));
      computed += req.layout == host::batch_layout::padded
                      ? req.padded_length
                      : static_cast<int64_t>(s.token_ids.size());
      auto row = toy_logits(s, labels);
      logits.insert(logits.end(), row.begin(), row.end());
    }
    if (per_token.count() > 0) {
      auto until = std::chrono::steady_clock::now() + per_token * computed;
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    return logits;
  };
  return std::make_shared<thread_pool_backend>(std::move(info), threads, std::move(fwd));
}

}  // namespace tessera::serving
