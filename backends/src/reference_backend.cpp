// The reference backend: the reference forward on worker threads. See reference_backend.hpp.
#include "tessera/backends/reference_backend.hpp"

#include <algorithm>
#include <mutex>

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

}  // namespace

std::shared_ptr<thread_pool_backend> make_reference_backend(
    std::shared_ptr<const models::bert_model> model, reference_backend_options opts) {
  backend_info info;
  info.name = opts.name;
  info.kind = opts.kind;
  info.max_sequence_length = model->config.max_position_embeddings;
  info.token_budget = opts.token_budget;
  info.max_batch_sequences = opts.max_batch_sequences;
  info.num_labels = model->config.num_labels;
  int omp = std::max(1, opts.omp_threads);
  const bool serialize = opts.serialize_forwards;
  forward_fn fwd = [model, omp, serialize](const batch_request& req)
      -> result<std::vector<float>> {
    models::set_num_threads(omp);  // per calling thread (OpenMP ICV)
    models::packed_batch b = to_packed(req);
    const int n = b.num_seqs();
    if (n == 0) return std::vector<float>{};
    if (auto st = models::validate_batch(model->config, b); !st.ok()) return st;
    std::unique_lock lock(forward_mutex(), std::defer_lock);
    if (serialize) lock.lock();
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
