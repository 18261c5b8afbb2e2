// tessera/models/weights.hpp: BERT weights, fp32, in Hugging Face layout.
//
// Every tensor is addressed by its HF name without the "bert." prefix
// ("embeddings.word_embeddings.weight", "encoder.layer.3.attention.self.query.weight",
// "pooler.dense.weight", "classifier.weight"); Linear weights are [out, in] row-major. The same
// pointers are also reachable through typed structs (embeddings(), layer(i), head()).
// Storage is shared and immutable: copying a bert_weights is cheap and keeps it alive (it may be
// a memory-mapped safetensors file).
//
//   auto w = tessera::models::make_preset_weights(cfg, /*seed=*/0);
//   const float* wq = w->layer(3).query_w;                       // [hidden, hidden]
//   auto t = w->tensor("encoder.layer.3.attention.self.query.weight");   // same data, with shape
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/config.hpp"

namespace tessera::models {

/// A named, shaped, read-only view of fp32 data owned by a bert_weights.
struct tensor_view {
  std::vector<int64_t> shape;
  const float* data = nullptr;
  int64_t numel() const;
};

/// The name a Hugging Face checkpoint of cfg's family stores a canonical tensor under: "bert." +
/// name (the head's classifier.* as is), or RoBERTa's "roberta." + name with the head's
/// pooler.dense / classifier as classifier.dense / classifier.out_proj.
std::string stored_tensor_name(const bert_config& cfg, const std::string& canonical);

struct embedding_weights {
  const float* word = nullptr;        ///< [vocab_size, hidden]
  const float* position = nullptr;    ///< [max_position_embeddings, hidden]
  const float* token_type = nullptr;  ///< [type_vocab_size, hidden]
  const float* ln_gamma = nullptr;    ///< [hidden]
  const float* ln_beta = nullptr;     ///< [hidden]
};

/// One encoder layer; *_w are [out, in], *_b are [out].
struct layer_weights {
  const float *query_w = nullptr, *query_b = nullptr;        ///< [hidden, hidden]
  const float *key_w = nullptr, *key_b = nullptr;            ///< [hidden, hidden]
  const float *value_w = nullptr, *value_b = nullptr;        ///< [hidden, hidden]
  const float *attn_out_w = nullptr, *attn_out_b = nullptr;  ///< [hidden, hidden]
  const float *attn_ln_gamma = nullptr, *attn_ln_beta = nullptr;
  const float *ffn_in_w = nullptr, *ffn_in_b = nullptr;      ///< [intermediate, hidden]
  const float *ffn_out_w = nullptr, *ffn_out_b = nullptr;    ///< [hidden, intermediate]
  const float *out_ln_gamma = nullptr, *out_ln_beta = nullptr;
};

struct head_weights {
  const float *pooler_w = nullptr, *pooler_b = nullptr;          ///< [hidden, hidden]
  const float *classifier_w = nullptr, *classifier_b = nullptr;  ///< [num_labels, hidden]
};

/// Name and shape of one tensor a config needs.
struct tensor_spec {
  std::string name;
  std::vector<int64_t> shape;
};

/// Every spec present in `tensors` (canonical names) with its exact shape. Errors name `source`,
/// the tensor and the expected shape; `naming_note` is appended to a missing tensor's error
/// (e.g. ", with or without the \"bert.\" prefix"). Shared by the BERT and decoder binders.
status check_tensor_shapes(const std::vector<tensor_spec>& specs,
                           const std::map<std::string, tensor_view, std::less<>>& tensors, std::string_view source,
                           std::string_view naming_note);

/// Every tensor a BERT-for-sequence-classification of this config has, in HF order.
std::vector<tensor_spec> expected_tensors(const bert_config& cfg);

/// "[768, 3072]".
std::string shape_string(const std::vector<int64_t>& shape);

class bert_weights {
 public:
  bert_weights() = default;

  /// Binds named tensors (names with or without "bert.") to a config: every expected tensor must
  /// be present with its exact shape; extras are ignored. `storage` keeps the data alive.
  /// `source` names the file in error messages.
  static result<bert_weights> bind(const bert_config& cfg, std::map<std::string, tensor_view> tensors,
                                   std::shared_ptr<const void> storage, std::string_view source);

  /// The tensor of that HF name (with or without the "bert." prefix), or nullptr.
  const tensor_view* find(std::string_view hf_name) const;
  /// Same, as a status naming the tensor when absent.
  result<tensor_view> tensor(std::string_view hf_name) const;
  /// Canonical names (without "bert."), sorted.
  std::vector<std::string> names() const;

  const embedding_weights& embeddings() const { return embeddings_; }
  const layer_weights& layer(int i) const { return layers_.at(static_cast<size_t>(i)); }
  const head_weights& head() const { return head_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }

 private:
  std::shared_ptr<const void> storage_;
  std::map<std::string, tensor_view, std::less<>> tensors_;
  embedding_weights embeddings_;
  std::vector<layer_weights> layers_;
  head_weights head_;
};

/// Seeded random weights for any config, bit-identical on every machine (splitmix64 per tensor,
/// seeded from `seed` and the tensor name; 24-bit uniform integers mapped to floats with exact
/// IEEE float arithmetic, no std:: distributions). Linear weights ~U(-0.0346, 0.0346) (std 0.02, as HF's init),
/// biases ~U(-0.01, 0.01), LayerNorm gamma 1 + U(-0.05, 0.05), beta U(-0.02, 0.02).
result<bert_weights> make_preset_weights(const bert_config& cfg, uint64_t seed);

/// Fills `out` (numel of the spec) with the seeded values of one tensor; make_preset_weights uses
/// it for every tensor, so a tile can generate just its own slices' tensors.
void fill_preset_tensor(const tensor_spec& spec, uint64_t seed, float* out);

/// The seeded stream behind every preset: out[i] = base + (2u - 1) * amp for n 24-bit uniforms u
/// from splitmix64 seeded by `seed` and the tensor name (exact float arithmetic, portable).
void fill_uniform_tensor(std::string_view name, int64_t n, uint64_t seed, float base, float amp, float* out);
/// Values first .. first + n - 1 of that stream, drawn without the ones before (splitmix64 seeks):
/// equal bit for bit to the same elements of fill_uniform_tensor.
void fill_uniform_range(std::string_view name, int64_t first, int64_t n, uint64_t seed, float base, float amp,
                        float* out);

/// Seeded tensors of a list of specs in one buffer (64-byte aligned starts), each filled by `fill`.
struct seeded_tensors {
  std::map<std::string, tensor_view> views;
  std::shared_ptr<const void> storage;
};
seeded_tensors make_seeded_tensors(const std::vector<tensor_spec>& specs, uint64_t seed,
                                   const std::function<void(const tensor_spec&, uint64_t, float*)>& fill);

/// Seeded values of one decoder tensor (HF names of expected_decoder_tensors, decoder.hpp), scaled
/// so that random decoders generate varied text: token embeddings U(-0.3, 0.3) (GPT-2, tied) or
/// U(-0.35, 0.35) (LLaMA), positions U(-0.05, 0.05), Linear weights of unit gain
/// U(-sqrt(3/fan_in), +) (the LM head twice that, GPT-2's c_attn and LLaMA's q/k three times:
/// sharp attention), biases U(-0.1, 0.1), norm gains 1 + U(-0.2, 0.2), norm betas U(-0.1, 0.1).
void fill_decoder_preset_tensor(const tensor_spec& spec, uint64_t seed, float* out);
/// Elements first .. first + n - 1 (row-major) of fill_decoder_preset_tensor's values, generated
/// alone: a host streams a 7B model's shards from the seed without ever holding a whole tensor.
void fill_decoder_preset_range(const tensor_spec& spec, uint64_t seed, int64_t first, int64_t n, float* out);

}  // namespace tessera::models
