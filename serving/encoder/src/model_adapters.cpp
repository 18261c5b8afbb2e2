// The tessera_models adapters of the serving interfaces. See model_adapters.hpp.
#include "tessera/serving/model_adapters.hpp"

namespace tessera::serving {

namespace {

class model_tokenizer final : public tokenizer {
 public:
  explicit model_tokenizer(models::wordpiece_tokenizer wordpiece) : wordpiece_(std::move(wordpiece)) {}

  result<std::vector<text_piece>> pieces(std::string_view text) const override {
    auto p = wordpiece_.tokenize_with_offsets(text);
    if (!p) return p.error();
    std::vector<text_piece> out;
    out.reserve(p->size());
    for (const auto& w : *p) out.push_back({w.id, w.start, w.stop});
    return out;
  }
  int32_t cls_id() const override { return wordpiece_.cls_id(); }
  int32_t sep_id() const override { return wordpiece_.sep_id(); }
  std::string special_text(int32_t id) const override { return wordpiece_.vocab().token(id); }

 private:
  models::wordpiece_tokenizer wordpiece_;  // untruncated: tokenizer truncates (both sides)
};

}  // namespace

result<std::shared_ptr<const tokenizer>> make_model_tokenizer(const models::bert_model& model) {
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
  info.dtype = model.compute == models::dtype::bf16 ? "bfloat16" : "float32";
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
