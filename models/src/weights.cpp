// Binding named tensors to the typed BERT structs, and seeded preset weights.
#include "tessera/models/weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "tessera/models/batch.hpp"
#include "tessera/models/huge_pages.hpp"

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
  if (c.num_labels == 0) return v;  // an embedding model: no head (a stored pooler is ignored)
  v.push_back({"pooler.dense.weight", {h, h}});
  v.push_back({"pooler.dense.bias", {h}});
  v.push_back({"classifier.weight", {c.num_labels, h}});
  v.push_back({"classifier.bias", {c.num_labels}});
  return v;
}

namespace {

// Canonical name: without "bert." (or "roberta."); old TF-converted checkpoints say
// LayerNorm.gamma/beta; RoBERTa's head (classifier.dense, classifier.out_proj) is BERT's pooler and
// classifier: the same dense + tanh + linear on the first token.
std::string canonical_name(std::string_view name) {
  std::string s(name);
  if (s.rfind("bert.", 0) == 0) s = s.substr(5);
  else if (s.rfind("roberta.", 0) == 0) s = s.substr(8);
  if (s.rfind("classifier.dense.", 0) == 0) s = "pooler.dense." + s.substr(17);
  else if (s.rfind("classifier.out_proj.", 0) == 0) s = "classifier." + s.substr(20);
  auto ends_with = [&](std::string_view suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
  };
  if (ends_with("LayerNorm.gamma")) s = s.substr(0, s.size() - 5) + "weight";
  else if (ends_with("LayerNorm.beta")) s = s.substr(0, s.size() - 4) + "bias";
  return s;
}

// A pooler stored beside RoBERTa's head ("roberta.pooler.dense.*", as some checkpoints keep from
// pre-training): the head does not read it, and its canonical name is the head's dense layer.
bool is_stored_pooler(std::string_view name) {
  if (name.rfind("roberta.", 0) == 0) name.remove_prefix(8);
  return name.rfind("pooler.", 0) == 0;
}

// The name a RoBERTa checkpoint stores a canonical tensor under (for errors and save_model).
std::string roberta_name(const std::string& canonical) {
  if (canonical.rfind("pooler.dense.", 0) == 0) return "classifier.dense." + canonical.substr(13);
  if (canonical.rfind("classifier.", 0) == 0) return "classifier.out_proj." + canonical.substr(11);
  return "roberta." + canonical;
}

}  // namespace

std::string stored_tensor_name(const bert_config& cfg, const std::string& canonical) {
  if (cfg.family != encoder_family::bert) return roberta_name(canonical);
  return canonical.rfind("classifier", 0) == 0 ? canonical : "bert." + canonical;
}

status check_tensor_shapes(const std::vector<tensor_spec>& specs,
                           const std::map<std::string, tensor_view, std::less<>>& tensors, std::string_view source,
                           std::string_view naming_note) {
  const std::string src(source);
  for (const auto& spec : specs) {
    auto it = tensors.find(spec.name);
    if (it == tensors.end())
      return status::invalid(src + ": missing tensor \"" + spec.name + "\" (expected shape " +
                             shape_string(spec.shape) + std::string(naming_note) + ")");
    if (it->second.shape != spec.shape)
      return status::invalid(src + ": tensor \"" + spec.name + "\" has shape " + shape_string(it->second.shape) +
                             ", expected " + shape_string(spec.shape) + " from config.json");
  }
  return {};
}

result<bert_weights> bert_weights::bind(const bert_config& cfg, std::map<std::string, tensor_view> tensors,
                                        std::shared_ptr<const void> storage, std::string_view source) {
  TESSERA_RETURN_IF_ERROR(cfg.validate());
  bert_weights w;
  const bool roberta = cfg.family != encoder_family::bert;
  for (auto& [name, view] : tensors)
    if (!(roberta && is_stored_pooler(name))) w.tensors_[canonical_name(name)] = view;
  // RoBERTa / XLM-R without token types (type_vocab_size 1 and no tensor): a zero row, which is
  // what a single type's embedding adds when HF's buffer is all zeros.
  const std::string types_name = "embeddings.token_type_embeddings.weight";
  std::shared_ptr<std::vector<float>> zero_types;
  if (roberta && cfg.type_vocab_size == 1 && !w.tensors_.count(types_name)) {
    zero_types = std::make_shared<std::vector<float>>(static_cast<size_t>(cfg.hidden_size), 0.0f);
    w.tensors_[types_name] = {{1, cfg.hidden_size}, zero_types->data()};
  }
  w.storage_ = zero_types ? std::shared_ptr<const void>(std::make_shared<std::pair<std::shared_ptr<const void>,
                                                                                   std::shared_ptr<std::vector<float>>>>(
                                std::move(storage), zero_types))
                          : std::move(storage);
  if (roberta) {
    for (const auto& spec : expected_tensors(cfg)) {
      auto it = w.tensors_.find(spec.name);
      const std::string hf = roberta_name(spec.name);
      if (it == w.tensors_.end())
        return status::invalid(std::string(source) + ": missing tensor \"" + hf + "\" (expected shape " +
                               shape_string(spec.shape) + ", with or without the \"roberta.\" prefix)");
      if (it->second.shape != spec.shape)
        return status::invalid(std::string(source) + ": tensor \"" + hf + "\" has shape " +
                               shape_string(it->second.shape) + ", expected " + shape_string(spec.shape) +
                               " from config.json");
    }
  } else {
    TESSERA_RETURN_IF_ERROR(check_tensor_shapes(expected_tensors(cfg), w.tensors_, source,
                                                ", with or without the \"bert.\" prefix"));
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
  if (cfg.num_labels > 0)
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

void fill_uniform_tensor(std::string_view name, int64_t n, uint64_t seed, float base, float amp, float* out) {
  fill_uniform_range(name, 0, n, seed, base, amp, out);
}

void fill_uniform_range(std::string_view name, int64_t first, int64_t n, uint64_t seed, float base, float amp,
                        float* out) {
  // splitmix64's state after i draws is its seed + i x its increment: value `first` is drawn
  // without the ones before it (unsigned arithmetic wraps as the generator's own does).
  const uint64_t start = (seed * 0x9E3779B97F4A7C15ull ^ fnv1a(name)) + static_cast<uint64_t>(first) * 0x9E3779B97F4A7C15ull;
  // Chunks of 1M values on the OpenMP threads: each seeks to its own start, so the values do not
  // depend on the thread count.
  constexpr int64_t chunk = int64_t{1} << 20;
  const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (int64_t k = 0; k < chunks; ++k) {
    splitmix64 rng(start + static_cast<uint64_t>(k * chunk) * 0x9E3779B97F4A7C15ull);
    const int64_t end = std::min(n, (k + 1) * chunk);
    // u in [0,1) with 24 bits; (2u - 1) * a is computed in float, exactly rounded: portable.
    for (int64_t i = k * chunk; i < end; ++i) {
      const float u = rng.unit_float();
      out[i] = base + (2.0f * u - 1.0f) * amp;
    }
  }
}

void fill_preset_tensor(const tensor_spec& spec, uint64_t seed, float* out) {
  float base = 0.0f, amp = 0.0346f;
  const bool is_ln = spec.name.find("LayerNorm") != std::string::npos;
  if (is_ln && ends_with(spec.name, ".weight")) { base = 1.0f; amp = 0.05f; }
  else if (is_ln) amp = 0.02f;
  else if (ends_with(spec.name, ".bias")) amp = 0.01f;
  fill_uniform_tensor(spec.name, tensor_view{spec.shape, nullptr}.numel(), seed, base, amp, out);
}

void fill_decoder_preset_range(const tensor_spec& spec, uint64_t seed, int64_t first, int64_t n, float* out) {
  const std::string& name = spec.name;
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  const bool is_norm = has("ln_") || has("norm");
  const bool conv1d = has(".c_attn.") || has(".c_proj.") || has(".c_fc.");  // GPT-2 Conv1D: [in, out]
  float base = 0.0f, amp;
  // Random decoders fall into repeating one token when the attention averages the context flat
  // (the current token then barely matters) or, with tied embeddings, when the token embedding
  // dominates the residual (logit of the input token wins). Sharp attention (q and k of gain 3)
  // and a modest tied embedding keep greedy generations varied (checked by the tests).
  if (name == "wte.weight") amp = 0.3f;
  else if (name == "model.embed_tokens.weight") amp = 0.35f;
  else if (name == "wpe.weight") amp = 0.05f;
  else if (is_norm && ends_with(name, ".weight")) { base = 1.0f; amp = 0.2f; }
  else if (ends_with(name, ".bias")) amp = 0.1f;  // norm betas and Linear biases alike
  else {
    const int64_t fan_in = conv1d ? spec.shape.front() : spec.shape.back();
    amp = std::sqrt(3.0f / static_cast<float>(fan_in));  // unit gain
    if (name == "lm_head.weight") amp = 2.0f * amp;
    if (has(".c_attn.weight") || has("q_proj.weight") || has("k_proj.weight")) amp = 3.0f * amp;
  }
  fill_uniform_range(name, first, n, seed, base, amp, out);
}

void fill_decoder_preset_tensor(const tensor_spec& spec, uint64_t seed, float* out) {
  fill_decoder_preset_range(spec, seed, 0, tensor_view{spec.shape, nullptr}.numel(), out);
}

seeded_tensors make_seeded_tensors(const std::vector<tensor_spec>& specs, uint64_t seed,
                                   const std::function<void(const tensor_spec&, uint64_t, float*)>& fill) {
  int64_t total = 0;
  for (const auto& s : specs) total += (tensor_view{s.shape, nullptr}.numel() + 15) / 16 * 16;  // 64-byte starts
  // On huge pages: a decoder's seeded matrices (the LM head, every matrix of a preset not in GPT-2's
  // Conv1D layout) are streamed once a decode step (tessera/models/huge_pages.hpp).
  auto buffer = std::make_shared<std::vector<float, huge_page_allocator<float>>>(static_cast<size_t>(total));
  seeded_tensors out;
  int64_t off = 0;
  for (const auto& s : specs) {
    float* dst = buffer->data() + off;
    fill(s, seed, dst);
    out.views[s.name] = tensor_view{s.shape, dst};
    off += (tensor_view{s.shape, dst}.numel() + 15) / 16 * 16;
  }
  out.storage = std::shared_ptr<const void>(buffer, buffer.get());
  return out;
}

result<bert_weights> make_preset_weights(const bert_config& cfg, uint64_t seed) {
  TESSERA_RETURN_IF_ERROR(cfg.validate());
  auto t = make_seeded_tensors(expected_tensors(cfg), seed, fill_preset_tensor);
  return bert_weights::bind(cfg, std::move(t.views), std::move(t.storage), "preset weights");
}

}  // namespace tessera::models
