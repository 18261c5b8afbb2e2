// The toy tokenizer and model. See toy_model.hpp.
#include "tessera/toys/toy_model.hpp"

#include <cctype>
#include <cmath>

namespace tessera::toys {

using namespace tessera::serving;

namespace {

constexpr int32_t toy_cls = 101;
constexpr int32_t toy_sep = 102;

int32_t word_id(std::string_view w) {
  uint32_t h = 2166136261u;
  for (unsigned char c : w) h = (h ^ c) * 16777619u;
  return 1000 + static_cast<int32_t>(h % (30522u - 1000u));
}

class toy_tokenizer final : public tokenizer {
 public:
  // Words split at spaces and punctuation (each punctuation byte a piece of its own).
  result<std::vector<text_piece>> pieces(std::string_view text) const override {
    std::vector<text_piece> out;
    std::string word;
    size_t word_start = 0;
    auto flush = [&](size_t stop) {
      if (!word.empty()) out.push_back({word_id(word), word_start, stop});
      word.clear();
    };
    for (size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (std::isspace(c)) {
        flush(i);
      } else if (std::ispunct(c)) {
        flush(i);
        out.push_back({word_id(text.substr(i, 1)), i, i + 1});
      } else {
        if (word.empty()) word_start = i;
        word.push_back(static_cast<char>(std::tolower(c)));
      }
    }
    flush(text.size());
    return out;
  }
  std::string special_text(int32_t id) const override {
    return id == toy_cls ? "[CLS]" : id == toy_sep ? "[SEP]" : "[UNK]";
  }
};

}  // namespace

std::shared_ptr<const tokenizer> make_toy_tokenizer() { return std::make_shared<toy_tokenizer>(); }

std::vector<float> toy_logits(const backends::sequence_input& s, int32_t num_labels) {
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

std::shared_ptr<backends::thread_pool_backend> make_toy_backend(backends::backend_info info, int threads,
                                                      std::chrono::nanoseconds per_token) {
  int32_t labels = info.num_labels;
  backends::forward_fn fwd = [labels, per_token](const backends::batch_request& req)
      -> result<std::vector<float>> {
    std::vector<float> logits;
    logits.reserve(req.sequences.size() * static_cast<size_t>(labels));
    int64_t computed = 0;
    for (const auto& s : req.sequences) {
      if (req.layout == backends::batch_layout::padded &&
          req.padded_length < static_cast<int32_t>(s.token_ids.size()))
        return status::invalid("padded_length " + std::to_string(req.padded_length) +
                               " is shorter than a sequence of " +
                               std::to_string(s.token_ids.size()));
      computed += req.layout == backends::batch_layout::padded
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
  return std::make_shared<backends::thread_pool_backend>(std::move(info), threads, std::move(fwd));
}

}  // namespace tessera::toys
