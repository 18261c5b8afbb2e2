// Binding named tensors to the typed BERT structs, and seeded preset weights.
#include "tessera/models/weights.hpp"

#include <cstring>

#include "tessera/models/batch.hpp"

namespace tessera::models {

int64_t tensor_view::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<tensor_spec> expected_tensors(const bert_config& c) {
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  std::vector<tensor_spec> v = {
      {"embeddings.word_embeddings.weight", {c.vocab_size, h}},
      {"embeddings.position_embeddings.weight", {c.max_position_embeddings, h}},
      {"embeddings.token_type_embeddings.weight", {c.type_vocab_size, h}},
      {"embeddings.LayerNorm.weight", {h}},
      {"embeddings.LayerNorm.bias", {h}},
  };
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* n : {"attention.self.query", "attention.self.key", "attention.self.value",
                          "attention.output.dense"}) {
      v.push_back({p + n + ".weight", {h, h}});
      v.push_back({p + n + ".bias", {h}});
    }
    v.push_back({p + "attention.output.LayerNorm.weight", {h}});
    v.push_back({p + "attention.output.LayerNorm.bias", {h}});
    v.push_back({p + "intermediate.dense.weight", {f, h}});
    v.push_back({p + "intermediate.dense.bias", {f}});
    v.push_back({p + "output.dense.weight", {h, f}});
    v.push_back({p + "output.dense.bias", {h}});
    v.push_back({p + "output.LayerNorm.weight", {h}});
    v.push_back({p + "output.LayerNorm.bias", {h}});
  }
  v.push_back({"pooler.dense.weight", {h, h}});
  v.push_back({"pooler.dense.bias", {h}});
  v.push_back({"classifier.weight", {c.num_labels, h}});
  v.push_back({"classifier.bias", {c.num_labels}});
  return v;
}

namespace {

// Canonical name: without "bert."; old TF-converted checkpoints say LayerNorm.gamma/beta.
std::string canonical_name(std::string_view name) {
  std::string s(name);
  if (s.rfind("bert.", 0) == 0) s = s.substr(5);
  auto ends_with = [&](std::string_view suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
  };
  if (ends_with("LayerNorm.gamma")) s = s.substr(0, s.size() - 5) + "weight";
  else if (ends_with("LayerNorm.beta")) s = s.substr(0, s.size() - 4) + "bias";
  return s;
}

}  // namespace

result<bert_weights> bert_weights::bind(const bert_config& cfg, std::map<std::string, tensor_view> tensors,
                                        std::shared_ptr<const void> storage, std::string_view source) {
  TESSERA_RETURN_IF_ERROR(cfg.validate());
  bert_weights w;
  w.storage_ = std::move(storage);
  for (auto& [name, view] : tensors) w.tensors_[canonical_name(name)] = view;
  const std::string src(source);
  for (const auto& spec : expected_tensors(cfg)) {
    auto it = w.tensors_.find(spec.name);
    if (it == w.tensors_.end())
      return status::invalid(src + ": missing tensor \"" + spec.name + "\" (expected shape " +
                             shape_string(spec.shape) + ", with or without the \"bert.\" prefix)");
    if (it->second.shape != spec.shape)
      return status::invalid(src + ": tensor \"" + spec.name + "\" has shape " + shape_string(it->second.shape) +
                             ", expected " + shape_string(spec.shape) + " from config.json");
  }
  auto p = [&](const std::string& n) { return w.tensors_.at(n).data; };
  w.embeddings_ = {p("embeddings.word_embeddings.weight"), p("embeddings.position_embeddings.weight"),
                   p("embeddings.token_type_embeddings.weight"), p("embeddings.LayerNorm.weight"),
                   p("embeddings.LayerNorm.bias")};
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string pre = "encoder.layer." + std::to_string(l) + ".";
    layer_weights lw;
    lw.query_w = p(pre + "attention.self.query.weight");
    lw.query_b = p(pre + "attention.self.query.bias");
    lw.key_w = p(pre + "attention.self.key.weight");
    lw.key_b = p(pre + "attention.self.key.bias");
    lw.value_w = p(pre + "attention.self.value.weight");
    lw.value_b = p(pre + "attention.self.value.bias");
    lw.attn_out_w = p(pre + "attention.output.dense.weight");
    lw.attn_out_b = p(pre + "attention.output.dense.bias");
    lw.attn_ln_gamma = p(pre + "attention.output.LayerNorm.weight");
    lw.attn_ln_beta = p(pre + "attention.output.LayerNorm.bias");
    lw.ffn_in_w = p(pre + "intermediate.dense.weight");
    lw.ffn_in_b = p(pre + "intermediate.dense.bias");
    lw.ffn_out_w = p(pre + "output.dense.weight");
    lw.ffn_out_b = p(pre + "output.dense.bias");
    lw.out_ln_gamma = p(pre + "output.LayerNorm.weight");
    lw.out_ln_beta = p(pre + "output.LayerNorm.bias");
    w.layers_.push_back(lw);
  }
  w.head_ = {p("pooler.dense.weight"), p("pooler.dense.bias"), p("classifier.weight"), p("classifier.bias")};
  return w;
}

const tensor_view* bert_weights::find(std::string_view hf_name) const {
  auto it = tensors_.find(canonical_name(hf_name));
  return it == tensors_.end() ? nullptr : &it->second;
}

result<tensor_view> bert_weights::tensor(std::string_view hf_name) const {
  if (const tensor_view* t = find(hf_name)) return *t;
  return status::not_found("no tensor named \"" + std::string(hf_name) + "\"");
}

std::vector<std::string> bert_weights::names() const {
  std::vector<std::string> v;
  for (const auto& [n, t] : tensors_) v.push_back(n);
  return v;
}

namespace {

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

}  // namespace

void fill_preset_tensor(const tensor_spec& spec, uint64_t seed, float* out) {
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  splitmix64 rng(seed * 0x9E3779B97F4A7C15ull ^ fnv1a(spec.name));
  // u in [0,1) with 24 bits; (2u - 1) * a is computed in float, exactly rounded: portable.
  float base = 0.0f, amp = 0.0346f;
  const bool is_ln = spec.name.find("LayerNorm") != std::string::npos;
  if (is_ln && ends_with(spec.name, ".weight")) { base = 1.0f; amp = 0.05f; }
  else if (is_ln) amp = 0.02f;
  else if (ends_with(spec.name, ".bias")) amp = 0.01f;
  for (int64_t i = 0; i < n; ++i) {
    const float u = rng.next_unit_float();
    out[i] = base + (2.0f * u - 1.0f) * amp;
  }
}

result<bert_weights> make_preset_weights(const bert_config& cfg, uint64_t seed) {
  TESSERA_RETURN_IF_ERROR(cfg.validate());
  const auto specs = expected_tensors(cfg);
  int64_t total = 0;
  for (const auto& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    total += (n + 15) / 16 * 16;  // 64-byte aligned starts
  }
  auto buffer = std::make_shared<std::vector<float>>(static_cast<size_t>(total));
  std::map<std::string, tensor_view> views;
  int64_t off = 0;
  for (const auto& s : specs) {
    float* dst = buffer->data() + off;
    fill_preset_tensor(s, seed, dst);
    views[s.name] = tensor_view{s.shape, dst};
    off += (tensor_view{s.shape, dst}.numel() + 15) / 16 * 16;
  }
  return bert_weights::bind(cfg, std::move(views), std::shared_ptr<const void>(buffer, buffer.get()),
                            "preset weights");
}

}  // namespace tessera::models
