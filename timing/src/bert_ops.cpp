#include "tessera/timing/bert_ops.hpp"

#include <algorithm>
#include <numeric>

namespace tessera::timing {

bert_batch bert_batch::uniform(int64_t batch, int64_t seq) {
  bert_batch b;
  b.seq_lens.assign(static_cast<size_t>(std::max<int64_t>(batch, 0)), seq);
  return b;
}

std::vector<int64_t> bert_batch::computed_lens() const {
  if (pad_to <= 0) return seq_lens;
  return std::vector<int64_t>(seq_lens.size(), pad_to);
}

int64_t bert_batch::computed_tokens() const {
  auto lens = computed_lens();
  return std::accumulate(lens.begin(), lens.end(), int64_t{0});
}

int64_t bert_batch::real_tokens() const { return std::accumulate(seq_lens.begin(), seq_lens.end(), int64_t{0}); }

bert_batch bert_batch::padded_to_longest() const {
  bert_batch b = *this;
  int64_t longest = seq_lens.empty() ? 0 : *std::max_element(seq_lens.begin(), seq_lens.end());
  b.pad_to = std::max(pad_to, longest);
  return b;
}

status bert_batch::validate() const {
  if (seq_lens.empty()) return status::invalid("the batch has no sequences");
  for (int64_t l : seq_lens) {
    if (l <= 0) return status::invalid("every sequence length must be > 0, got " + std::to_string(l));
    if (pad_to > 0 && l > pad_to)
      return status::invalid("a sequence of " + std::to_string(l) + " tokens exceeds pad_to " + std::to_string(pad_to));
  }
  return ok_status();
}

result<bert_forward_parts> bert_forward_split(const model_shape& s, const bert_batch& batch, dtype t) {
  TESSERA_RETURN_IF_ERROR(s.validate());
  if (s.arch != models::architecture::bert) return status::unsupported(s.name + " is not a BERT encoder");
  TESSERA_RETURN_IF_ERROR(batch.validate());
  const std::vector<int64_t> lens = batch.computed_lens();
  for (int64_t l : lens)
    if (l > s.max_position_embeddings)
      return status::invalid("sequence length " + std::to_string(l) + " exceeds max_position_embeddings " +
                             std::to_string(s.max_position_embeddings) + " of " + s.name);
  const int64_t tokens = std::accumulate(lens.begin(), lens.end(), int64_t{0}), h = s.hidden_size;
  bert_forward_parts f;
  f.layers = s.num_layers;
  using models::kernel_id;
  const rows_shape rows{.tokens = tokens, .hidden = h};
  const elements_shape residual{.elements = tokens * h};
  f.head.push_back(make_query(kernel_id::embed, rows, t));
  f.head.push_back(make_query(kernel_id::layer_norm, rows, t));
  f.layer.reserve(10);
  f.layer.push_back(make_query(kernel_id::linear, linear_shape{.tokens = tokens, .in = h, .out = 3 * h}, t));
  f.layer.push_back(make_query(
      kernel_id::attention, attention_shape{.heads = s.num_heads, .head_dim = s.head_dim(), .seq_lens = lens}, t));
  f.layer.push_back(make_query(kernel_id::linear, linear_shape{.tokens = tokens, .in = h, .out = h}, t));
  f.layer.push_back(make_query(kernel_id::add, residual, t));
  f.layer.push_back(make_query(kernel_id::layer_norm, rows, t));
  f.layer.push_back(
      make_query(kernel_id::linear, linear_shape{.tokens = tokens, .in = h, .out = s.intermediate_size}, t));
  f.layer.push_back(make_query(kernel_id::gelu, elements_shape{.elements = tokens * s.intermediate_size}, t));
  f.layer.push_back(
      make_query(kernel_id::linear, linear_shape{.tokens = tokens, .in = s.intermediate_size, .out = h}, t));
  f.layer.push_back(make_query(kernel_id::add, residual, t));
  f.layer.push_back(make_query(kernel_id::layer_norm, rows, t));
  const int64_t seqs = static_cast<int64_t>(batch.seq_lens.size());
  f.tail.push_back(
      make_query(kernel_id::classifier, classifier_shape{.seqs = seqs, .hidden = h, .labels = s.num_labels}, t));
  return f;
}

result<std::vector<kernel_query>> bert_forward_ops(const model_shape& s, const bert_batch& batch, dtype t) {
  auto f = bert_forward_split(s, batch, t);
  if (!f) return f.error();
  std::vector<kernel_query> ops;
  ops.reserve(f->head.size() + f->layer.size() * static_cast<size_t>(f->layers) + f->tail.size());
  ops.insert(ops.end(), f->head.begin(), f->head.end());
  for (int64_t layer = 0; layer < f->layers; ++layer) ops.insert(ops.end(), f->layer.begin(), f->layer.end());
  ops.insert(ops.end(), f->tail.begin(), f->tail.end());
  return ops;
}

}  // namespace tessera::timing
