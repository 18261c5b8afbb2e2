// The reference backend: the reference forward on worker threads. See reference_backend.hpp.
#include "tessera/backends/reference_backend.hpp"

#include <algorithm>
#include <mutex>

#include "tessera/models/embedding.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/kernels.hpp"

namespace tessera::backends {

namespace {

// With serialize_forwards, forwards in this process take turns (models::reference_forward gave
// wrong logits now and then from two threads at once before its runtime-M matmul change).
std::mutex& forward_mutex() {
  static std::mutex mu;
  return mu;
}

models::packed_batch to_packed(const batch_request& req) {
  models::packed_batch b;
  for (const auto& s : req.sequences) b.append(s.token_ids, s.token_type_ids);
  return b;
}

/// An embedding model's batch: each sequence's pooled vector (the model's pooling, before any
/// normalization), or every token's final hidden state for a sequence asking every_token.
/// Without every_token, a padded batch runs the padded path, as a classifier's does.
std::vector<float> embed_batch(const models::bert_model& m, const batch_request& req, models::packed_batch& b) {
  const int n = b.num_seqs();
  const int64_t h = m.config.hidden_size;
  const bool any_tokens = std::any_of(req.sequences.begin(), req.sequences.end(),
                                      [](const sequence_input& s) { return s.every_token; });
  if (!any_tokens) {
    if (req.layout == batch_layout::padded) {
      if (req.padded_length > b.max_seq_len()) {  // the rectangle the policy asked for; dummy row dropped
        std::vector<int32_t> dummy(static_cast<size_t>(req.padded_length), 0);
        dummy[0] = 101;
        b.append(dummy);
      }
      auto v = models::padded_embed(m, b, 0);
      v.resize(static_cast<size_t>(n * h));
      return v;
    }
    return models::reference_embed(m, b);
  }
  const std::vector<float> x = models::reference_encoder(m, b);
  std::vector<float> out;
  for (int s = 0; s < n; ++s) {
    const int32_t start = b.seq_offsets[static_cast<size_t>(s)];
    const int32_t len = b.seq_len(s);
    if (req.sequences[static_cast<size_t>(s)].every_token) {
      out.insert(out.end(), x.begin() + start * h, x.begin() + (start + len) * h);
    } else {
      const size_t at = out.size();
      out.resize(at + static_cast<size_t>(h));
      const int32_t zero = 0;
      models::pool_rows(x.data() + start * h, h, h, &zero, &len, 1, m.embedding.pooling, out.data() + at);
    }
  }
  return out;
}

}  // namespace

std::shared_ptr<thread_pool_backend> make_reference_backend(
    std::shared_ptr<const models::bert_model> model, reference_backend_options opts) {
  backend_info info;
  info.name = opts.name;
  info.kind = opts.kind;
  info.max_sequence_length = model->config.max_sequence_length();
  info.token_budget = opts.token_budget;
  info.max_batch_sequences = opts.max_batch_sequences;
  const bool embedding = model->task == models::encoder_task::embedding;
  info.num_labels = embedding ? model->config.hidden_size : model->config.num_labels;
  int omp = std::max(1, opts.omp_threads);
  const bool serialize = opts.serialize_forwards;
  forward_fn fwd = [model, omp, serialize, embedding](const batch_request& req)
      -> result<std::vector<float>> {
    models::set_num_threads(omp);  // per calling thread (OpenMP ICV)
    models::packed_batch b = to_packed(req);
    const int n = b.num_seqs();
    if (n == 0) return std::vector<float>{};
    if (auto st = models::validate_batch(model->config, b); !st.ok()) return st;
    std::unique_lock lock(forward_mutex(), std::defer_lock);
    if (serialize) lock.lock();
    if (embedding) return embed_batch(*model, req, b);
    if (std::any_of(req.sequences.begin(), req.sequences.end(), [](const sequence_input& s) { return s.every_token; }))
      return status::invalid("every token's vector is for embedding models; " + model->source + " is a " +
                             std::string(models::task_name(model->task)));
    if (req.layout == batch_layout::padded) {
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

std::vector<float> reference_logits(const models::bert_model& model, const sequence_input& s) {
  models::packed_batch b;
  b.append(s.token_ids, s.token_type_ids);
  return models::reference_forward(model, b);
}

}  // namespace tessera::backends
