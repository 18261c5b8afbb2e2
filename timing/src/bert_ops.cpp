#include "tessera/timing/bert_ops.hpp"

#include <algorithm>
#include <numeric>

namespace tessera::timing {

int64_t bert_shape::parameters() const {
  const int64_t h = hidden;
  int64_t p = (vocab + max_positions + 2) * h + 2 * h;                // embeddings + layer norm
  p += layers * (4 * h * h + 4 * h + 2 * h * ffn + ffn + h + 4 * h);  // attention, ffn, 2 layer norms
  p += h * h + h + h * labels + labels;                               // pooler + classifier
  return p;
}

status bert_shape::validate() const {
  if (layers <= 0 || hidden <= 0 || heads <= 0 || ffn <= 0 || labels <= 0 || vocab <= 0 || max_positions <= 0)
    return status::invalid("BERT shape '" + name + "': every size must be > 0");
  if (hidden % heads != 0)
    return status::invalid("BERT shape '" + name + "': hidden (" + std::to_string(hidden) +
                           ") must be a multiple of heads (" + std::to_string(heads) + ")");
  return status::ok();
}

namespace {
struct named_shape {
  const char* name;
  int64_t layers, hidden, heads, ffn;
};
constexpr named_shape known_shapes[] = {
    {"bert-tiny", 2, 128, 2, 512},     {"bert-mini", 4, 256, 4, 1024},   {"bert-small", 4, 512, 8, 2048},
    {"bert-medium", 8, 512, 8, 2048},  {"bert-base", 12, 768, 12, 3072}, {"bert-large", 24, 1024, 16, 4096},
};
}  // namespace

result<bert_shape> bert_shape_by_name(std::string_view name) {
  for (const auto& s : known_shapes) {
    if (name == s.name) {
      bert_shape b;
      b.name = s.name;
      b.layers = s.layers, b.hidden = s.hidden, b.heads = s.heads, b.ffn = s.ffn;
      return b;
    }
  }
  std::string known;
  for (const auto& s : known_shapes) known += (known.empty() ? "" : ", ") + std::string(s.name);
  return status::not_found("unknown model shape '" + std::string(name) + "'; known: " + known);
}

std::vector<std::string> bert_shape_names() {
  std::vector<std::string> out;
  for (const auto& s : known_shapes) out.emplace_back(s.name);
  return out;
}

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
  return status::ok();
}

result<bert_forward_parts> bert_forward_split(const bert_shape& s, const bert_batch& batch, dtype t) {
  TESSERA_RETURN_IF_ERROR(s.validate());
  TESSERA_RETURN_IF_ERROR(batch.validate());
  const std::vector<int64_t> lens = batch.computed_lens();
  for (int64_t l : lens)
    if (l > s.max_positions)
      return status::invalid("sequence length " + std::to_string(l) + " exceeds max_positions " +
                             std::to_string(s.max_positions) + " of " + s.name);
  const int64_t tokens = std::accumulate(lens.begin(), lens.end(), int64_t{0}), h = s.hidden;
  bert_forward_parts f;
  f.layers = s.layers;
  f.head.push_back(kernel_query("embed", {{"tokens", tokens}, {"hidden", h}}, t));
  f.head.push_back(kernel_query("layer_norm", {{"tokens", tokens}, {"hidden", h}}, t));
  f.layer.reserve(10);
  f.layer.push_back(kernel_query("linear", {{"tokens", tokens}, {"in", h}, {"out", 3 * h}}, t));
  f.layer.push_back(kernel_query("attention", {{"heads", s.heads}, {"head_dim", s.head_dim()}}, t).with_seq_lens(lens));
  f.layer.push_back(kernel_query("linear", {{"tokens", tokens}, {"in", h}, {"out", h}}, t));
  f.layer.push_back(kernel_query("add", {{"elements", tokens * h}}, t));
  f.layer.push_back(kernel_query("layer_norm", {{"tokens", tokens}, {"hidden", h}}, t));
  f.layer.push_back(kernel_query("linear", {{"tokens", tokens}, {"in", h}, {"out", s.ffn}}, t));
  f.layer.push_back(kernel_query("gelu", {{"elements", tokens * s.ffn}}, t));
  f.layer.push_back(kernel_query("linear", {{"tokens", tokens}, {"in", s.ffn}, {"out", h}}, t));
  f.layer.push_back(kernel_query("add", {{"elements", tokens * h}}, t));
  f.layer.push_back(kernel_query("layer_norm", {{"tokens", tokens}, {"hidden", h}}, t));
  f.tail.push_back(kernel_query(
      "classifier", {{"seqs", static_cast<int64_t>(batch.seq_lens.size())}, {"hidden", h}, {"labels", s.labels}}, t));
  return f;
}

result<std::vector<kernel_query>> bert_forward_ops(const bert_shape& s, const bert_batch& batch, dtype t) {
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
