// The reference backend and the tessera_models adapters. See reference_backend.hpp.
#include "tessera/serving/reference_backend.hpp"

#include <algorithm>
#include <mutex>

#include "tessera/models/forward.hpp"
#include "tessera/models/kernels.hpp"

namespace tessera::serving {

namespace {

// With serialize_forwards, forwards in this process take turns (models::reference_forward gave
// wrong logits now and then from two threads at once before its runtime-M matmul change).
std::mutex& forward_mutex() {
  static std::mutex mu;
  return mu;
}

models::packed_batch to_packed(const host::batch_request& req) {
  models::packed_batch b;
  for (const auto& s : req.sequences) b.append(s.token_ids, s.token_type_ids);
  return b;
}

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

std::shared_ptr<thread_pool_backend> make_reference_backend(
    std::shared_ptr<const models::bert_model> model, reference_backend_options opts) {
  host::backend_info info;
  info.name = opts.name;
  info.kind = opts.kind;
  info.max_sequence_length = model->config.max_position_embeddings;
  info.token_budget = opts.token_budget;
  info.max_batch_sequences = opts.max_batch_sequences;
  info.num_labels = model->config.num_labels;
  int omp = std::max(1, opts.omp_threads);
  const bool serialize = opts.serialize_forwards;
  forward_fn fwd = [model, omp, serialize](const host::batch_request& req)
      -> result<std::vector<float>> {
    models::set_num_threads(omp);  // per calling thread (OpenMP ICV)
    models::packed_batch b = to_packed(req);
    const int n = b.num_seqs();
    if (n == 0) return std::vector<float>{};
    if (auto st = models::validate_batch(model->config, b); !st) return st;
    std::unique_lock lock(forward_mutex(), std::defer_lock);
    if (serialize) lock.lock();
    if (req.layout == host::batch_layout::padded) {
      if (req.padded_length > b.max_seq_len()) {
        // Widen the rectangle to padded_length with a dummy row; its logits are dropped.
        std::vector<int32_t> dummy(static_cast<size_t>(req.padded_length), 0);
        dummy[0] = 101;
        b.append(dummy);
        auto logits = models::padded_forward(*model, b, 0);
        logits.resize(static_cast<size_t>(n) * model->config.num_labels);
        return logits;
      }
      return models::padded_forward(*model, b, 0);
    }
    return models::reference_forward(*model, b);
  };
  return std::make_shared<thread_pool_backend>(std::move(info), std::max(1, opts.threads),
                                               std::move(fwd));
}

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
  info.max_input_length = model.config.max_position_embeddings;
  info.vocab_size = model.config.vocab_size;
  return info;
}

std::vector<float> reference_logits(const models::bert_model& model, const host::sequence_input& s) {
  models::packed_batch b;
  b.append(s.token_ids, s.token_type_ids);
  return models::reference_forward(model, b);
}

}  // namespace tessera::serving
