// tessera/models/shape.hpp: what a transformer is, in sizes and kinds, without functional code.
//
// One model_shape describes a network for every part that needs its sizes: the functional
// models (weights, forward, tokenizer limits), placement on tiles, and the timing model, which
// must not link the kernels. So this header and shape.cpp are a library of their own
// (tessera_model_shape: common only, no oneDNN). Field names are Hugging Face config.json's,
// which BERT, GPT-2 and LLaMA configs share; the kinds (architecture, norm, activation,
// positions) are what a decoder adds to, not new field names.
//
//   auto s = tessera::models::shape_preset("bert-base");
//   if (!s) { std::cerr << s.error().to_string(); return 2; }
//   int d = s->head_dim();                  // 64
//   int64_t p = s->parameter_count();       // 109483778 with the 2-label head
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::models {

/// The layer stack and its head. Decoders (GPT-2, LLaMA) add their kinds here.
enum class architecture : uint8_t {
  bert,  ///< post-LN encoder, token-type embeddings, tanh pooler + linear classifier
};

enum class norm_kind : uint8_t {
  layer_norm,  ///< mean and variance, gamma and beta
};

enum class activation_kind : uint8_t {
  gelu,       ///< exact (erf); HF "gelu"
  gelu_tanh,  ///< tanh approximation; HF "gelu_new", "gelu_pytorch_tanh"
  relu,       ///< HF "relu"
};

enum class position_kind : uint8_t {
  learned,  ///< an absolute position embedding table of max_position_embeddings rows
};

/// Sizes and kinds of a transformer. Defaults are bert-base with a 2-label head.
struct model_shape {
  std::string name = "bert-base";  ///< a preset name, or where the shape came from
  architecture arch = architecture::bert;
  int num_layers = 12;               ///< HF num_hidden_layers
  int hidden_size = 768;             ///< width of the residual stream
  int num_heads = 12;                ///< HF num_attention_heads; divides hidden_size
  int num_kv_heads = 12;             ///< key/value heads (HF num_key_value_heads); divides num_heads
  int intermediate_size = 3072;      ///< FFN width
  int vocab_size = 30522;
  int max_position_embeddings = 512; ///< longest sequence in tokens (special tokens included)
  int type_vocab_size = 2;           ///< token-type (segment) embeddings; 0 = none
  int num_labels = 2;                ///< classifier outputs; 0 = no classification head
  norm_kind norm = norm_kind::layer_norm;
  float norm_eps = 1e-12f;           ///< HF layer_norm_eps
  activation_kind activation = activation_kind::gelu;  ///< of the FFN; HF hidden_act
  position_kind positions = position_kind::learned;

  /// hidden_size / num_heads.
  int head_dim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
  /// Every size positive (type_vocab_size and num_labels may be 0 where the architecture has
  /// no segments or head), heads divide hidden and kv heads divide heads, norm_eps > 0. Errors
  /// name the HF field.
  status validate() const;
  /// Weights of the whole model (embeddings, layers, head).
  int64_t parameter_count() const;
};

/// A built-in shape by name: bert-tiny (2 layers, 128 hidden, 2 heads), bert-mini (4/256/4),
/// bert-small (4/512/8), bert-medium (8/512/8), bert-base (12/768/12), bert-large (24/1024/16);
/// FFN 4x hidden, vocab 30522, 512 positions, 2 labels (Turc et al. 2019, Devlin et al. 2018).
/// Unknown name -> invalid_argument listing the known ones.
result<model_shape> shape_preset(std::string_view name);
/// Names shape_preset knows, smallest first.
std::vector<std::string> preset_names();

/// HF hidden_act names: "gelu", "gelu_new", "gelu_pytorch_tanh", "relu"; nullopt otherwise.
std::optional<activation_kind> activation_from_name(std::string_view hf_name);
/// The HF hidden_act name written for a kind ("gelu", "gelu_new", "relu").
std::string_view activation_name(activation_kind a);

}  // namespace tessera::models
