// The tessera_models adapters of the serving interfaces. See model_adapters.hpp.
#include "tessera/serving/model_adapters.hpp"

#include <nlohmann/json.hpp>

#include "tessera/common/text.hpp"
#include "tessera/models/unigram_tokenizer.hpp"

namespace tessera::serving {

namespace {

// The pieces of a models tokenizer with offsets (WordPiece, Unigram), as the serving interface has them.
template <class Tokenizer>
result<std::vector<text_piece>> pieces_of(const Tokenizer& t, std::string_view text) {
  auto p = t.tokenize_with_offsets(text);
  if (!p) return p.error();
  std::vector<text_piece> out;
  out.reserve(p->size());
  for (const auto& w : *p) out.push_back({w.id, w.start, w.stop});
  return out;
}

class model_tokenizer final : public tokenizer {
 public:
  explicit model_tokenizer(models::wordpiece_tokenizer wordpiece) : wordpiece_(std::move(wordpiece)) {}

  result<std::vector<text_piece>> pieces(std::string_view text) const override { return pieces_of(wordpiece_, text); }
  int32_t cls_id() const override { return wordpiece_.cls_id(); }
  int32_t sep_id() const override { return wordpiece_.sep_id(); }
  std::string special_text(int32_t id) const override { return wordpiece_.vocab().token(id); }

 private:
  models::wordpiece_tokenizer wordpiece_;  // untruncated: tokenizer truncates (both sides)
};

// RoBERTa's and XLM-R's specials over a models tokenizer: <s> ... </s>, pairs <s> a </s></s> b </s>.
template <class Tokenizer>
class roberta_specials : public tokenizer {
 public:
  explicit roberta_specials(Tokenizer t) : t_(std::move(t)) {}
  int32_t cls_id() const override { return t_.bos_id(); }
  int32_t sep_id() const override { return t_.eos_id(); }
  std::string special_text(int32_t id) const override {
    auto t = t_.token_text(id);
    return t ? *t : std::string();
  }
  bool roberta_pairs() const override { return true; }

 protected:
  Tokenizer t_;
};

// XLM-R: SentencePiece Unigram from tokenizer.json.
class unigram_model_tokenizer final : public roberta_specials<models::unigram_tokenizer> {
 public:
  using roberta_specials::roberta_specials;
  result<std::vector<text_piece>> pieces(std::string_view text) const override { return pieces_of(t_, text); }
};

// RoBERTa: byte-level BPE from tokenizer.json. The bytes of its tokens spell the text (no
// normalizer), so a piece's offsets are where its bytes are found, in order.
class bpe_model_tokenizer final : public roberta_specials<models::bpe_tokenizer> {
 public:
  using roberta_specials::roberta_specials;
  result<std::vector<text_piece>> pieces(std::string_view text) const override {
    auto ids = t_.encode(text, /*add_special=*/false);
    if (!ids) return ids.error();
    std::vector<text_piece> out;
    out.reserve(ids->size());
    size_t at = 0;
    for (int32_t id : *ids) {
      auto b = t_.is_special(id) ? t_.token_text(id) : t_.token_bytes(id);
      if (!b) return b.error();
      size_t start = text.find(*b, at);
      if (start == std::string_view::npos) start = at;  // not spelled verbatim: an empty span here
      const size_t stop = std::min(text.size(), start + b->size());
      out.push_back({id, start, stop});
      at = stop;
    }
    return out;
  }
};

result<std::shared_ptr<const tokenizer>> roberta_tokenizer(const models::bert_model& model) {
  const std::string family(models::family_model_type(model.config.family));
  if (model.tokenizer_json.empty())
    return status::invalid("model " + model.source + " (" + family +
                           ") has no tokenizer.json; the server needs one to tokenize text (RoBERTa's byte-level BPE "
                           "or XLM-R's SentencePiece Unigram)");
  auto text = read_text_file(model.tokenizer_json);
  if (!text) return text.error();
  std::shared_ptr<const tokenizer> out;
  std::string type;
  try {
    const auto j = nlohmann::json::parse(*text);
    if (j.is_object() && j.contains("model") && j["model"].is_object()) type = j["model"].value("type", "BPE");
  } catch (const nlohmann::json::exception& e) {
    return status::invalid(model.tokenizer_json + ": not valid JSON: " + e.what());
  }
  if (type == "Unigram") {
    auto u = models::unigram_tokenizer::from_tokenizer_json(*text, model.tokenizer_json);
    if (!u) return u.error();
    out = std::make_shared<unigram_model_tokenizer>(std::move(*u));
  } else {
    auto b = models::bpe_tokenizer::from_tokenizer_json(*text, model.tokenizer_json);
    if (!b) return b.error();
    out = std::make_shared<bpe_model_tokenizer>(std::move(*b));
  }
  if (out->cls_id() < 0 || out->sep_id() < 0)
    return status::invalid(model.tokenizer_json + ": no <s> / </s> post-processor tokens to wrap a sequence in");
  return out;
}

}  // namespace

result<std::shared_ptr<const tokenizer>> make_model_tokenizer(const models::bert_model& model) {
  if (model.config.family != models::encoder_family::bert) return roberta_tokenizer(model);
  if (!model.vocab)
    return status::invalid("model " + model.source +
                           " has no vocab.txt; the server needs one to tokenize text");
  models::tokenizer_options opts;
  opts.lower_case = model.lower_case;
  opts.max_length = 1 << 30;
  auto wordpiece = models::wordpiece_tokenizer::create(model.vocab, opts);
  if (!wordpiece) return wordpiece.error();
  return std::shared_ptr<const tokenizer>(std::make_shared<model_tokenizer>(std::move(*wordpiece)));
}

model_info model_info_of(const models::bert_model& model, std::string model_id) {
  model_info info;
  info.model_id = std::move(model_id);
  info.labels = model.config.id2label;
  info.max_input_length = model.config.max_sequence_length();
  info.vocab_size = model.config.vocab_size;
  info.dtype = model.compute == models::dtype::bf16   ? "bfloat16"
               : model.compute == models::dtype::int8 ? "int8"
                                                      : "float32";
  info.task = std::string(models::task_name(model.task));
  if (model.task == models::encoder_task::embedding) {
    info.pooling = std::string(models::pooling_name(model.embedding.pooling));
    info.hidden_size = model.config.hidden_size;
    info.normalize = model.embedding.normalize;
    info.prompts = model.embedding.prompts;
    info.default_prompt_name = model.embedding.default_prompt_name;
  }
  return info;
}

namespace {

class bpe_stream : public token_stream {
 public:
  explicit bpe_stream(const models::bpe_tokenizer& t) : d_(t) {}
  std::string push(int32_t id) override {
    auto text = d_.push(id);
    return text ? std::move(*text) : std::string();  // an id outside the vocab has no text
  }
  std::string flush() override { return d_.flush(); }

 private:
  models::stream_decoder d_;
};

class bpe_llm_tokenizer : public llm_tokenizer {
 public:
  explicit bpe_llm_tokenizer(models::bpe_tokenizer t) : t_(std::move(t)) {}
  result<std::vector<int32_t>> encode(std::string_view text, bool add_special) const override {
    return t_.encode(text, add_special);
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    auto text = t_.decode(ids, true);
    return text ? std::move(*text) : std::string();
  }
  std::unique_ptr<token_stream> stream() const override { return std::make_unique<bpe_stream>(t_); }
  int32_t bos_id() const override { return t_.bos_id(); }
  int32_t eos_id() const override { return t_.eos_id(); }
  int32_t vocab_size() const override { return t_.vocab_size(); }
  std::string chat_template() const override { return t_.chat_template(); }

 private:
  models::bpe_tokenizer t_;
};

}  // namespace

std::shared_ptr<const llm_tokenizer> make_bpe_llm_tokenizer(models::bpe_tokenizer tok) {
  return std::make_shared<bpe_llm_tokenizer>(std::move(tok));
}

}  // namespace tessera::serving
