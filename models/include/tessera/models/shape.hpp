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
#include "tessera/models/kernel_params.hpp"

namespace tessera::models {

/// The layer stack and its head.
enum class architecture : uint8_t {
  bert,   ///< post-LN encoder, token-type embeddings, tanh pooler + linear classifier
  gpt2,   ///< pre-LN causal decoder, learned positions, biases everywhere, HF Conv1D ([in, out]) weights
  llama,  ///< pre-RMSNorm causal decoder, rotary positions, SwiGLU MLP, no biases, grouped-query attention
  qwen2,  ///< LLaMA's layer with biases on the q, k and v projections (Qwen2, Qwen2.5)
  mistral,  ///< LLaMA's layer with sliding-window attention (Mistral 7B v0.1)
};

enum class norm_kind : uint8_t {
  layer_norm,  ///< mean and variance, gamma and beta
  rms_norm,    ///< x / sqrt(mean(x^2) + eps) * gamma, no beta (LLaMA)
};

enum class activation_kind : uint8_t {
  gelu,       ///< exact (erf); HF "gelu"
  gelu_tanh,  ///< tanh approximation; HF "gelu_new", "gelu_pytorch_tanh"
  relu,       ///< HF "relu"
  silu,       ///< x * sigmoid(x); HF "silu" (LLaMA's SwiGLU gate)
};

enum class position_kind : uint8_t {
  learned,  ///< an absolute position embedding table of max_position_embeddings rows
  rotary,   ///< rotary embeddings on q and k (Su et al. 2021), HF's rotate_half pairing (i, i + d/2)
};

/// HF rope_scaling's rope_type (kernel_params.hpp, rope_kind, says what each does).
using rope_scaling_kind = rope_kind;

/// Sizes and kinds of a transformer. Defaults are bert-base with a 2-label head.
/// Decoders (gpt2, llama) have type_vocab_size 0 and num_labels 0; their logits are over vocab_size.
struct model_shape {
  std::string name = "bert-base";  ///< a preset name, or where the shape came from
  architecture arch = architecture::bert;
  int num_layers = 12;               ///< HF num_hidden_layers
  int hidden_size = 768;             ///< width of the residual stream
  int num_heads = 12;                ///< HF num_attention_heads; divides hidden_size unless explicit_head_dim
  int num_kv_heads = 12;             ///< key/value heads (HF num_key_value_heads); divides num_heads
  int explicit_head_dim = 0;         ///< HF head_dim when given (may differ from hidden/heads); 0 = hidden/heads
  int intermediate_size = 3072;      ///< FFN width
  int vocab_size = 30522;
  int max_position_embeddings = 512; ///< longest sequence in tokens (special tokens included)
  int type_vocab_size = 2;           ///< token-type (segment) embeddings; 0 = none
  int num_labels = 2;                ///< classifier outputs; 0 = no classification head
  norm_kind norm = norm_kind::layer_norm;
  float norm_eps = 1e-12f;           ///< HF layer_norm_eps
  activation_kind activation = activation_kind::gelu;  ///< of the FFN; HF hidden_act
  position_kind positions = position_kind::learned;
  bool gated_mlp = false;            ///< down(act(gate(x)) * up(x)) (SwiGLU with silu) instead of out(act(in(x)))
  float rope_theta = 10000.0f;       ///< HF rope_theta (rotary only)
  rope_scaling_kind rope_scaling = rope_scaling_kind::none;
  float rope_scaling_factor = 1.0f;  ///< HF rope_scaling.factor
  /// HF rope_scaling's other fields (llama3: low/high_freq_factor, original_max_position_embeddings;
  /// yarn: beta_fast, beta_slow, attention_factor, original_max_position_embeddings).
  float rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f, rope_original_max_positions = 8192.0f;
  float rope_beta_fast = 32.0f, rope_beta_slow = 1.0f, rope_attention_factor = 1.0f;
  /// The rotary parameters the kernels take.
  rope_params rope() const {
    return {rope_scaling, rope_theta, rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor,
            rope_original_max_positions, rope_beta_fast, rope_beta_slow, rope_attention_factor};
  }
  bool tie_word_embeddings = false;  ///< decoders: the LM head is the token embedding matrix
  int bos_token_id = -1;             ///< -1 = none
  int eos_token_id = -1;             ///< -1 = none
  int sliding_window = 0;            ///< HF sliding_window: a position attends to the last this many (itself included); 0 = all

  /// explicit_head_dim when set, else hidden_size / num_heads.
  int head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : num_heads > 0 ? hidden_size / num_heads : 0;
  }
  /// Width of the query projection (num_heads * head_dim) and of the key or value projection.
  int q_width() const { return num_heads * head_dim(); }
  int kv_width() const { return num_kv_heads * head_dim(); }
  /// A causal language model (gpt2, llama, qwen2, mistral), not an encoder.
  bool is_decoder() const { return arch != architecture::bert; }
  /// What the architecture is made of (architecture_traits below).
  const struct architecture_traits& traits() const;
  /// Every size positive (type_vocab_size and num_labels may be 0 where the architecture has
  /// no segments or head), heads divide hidden (unless head_dim is explicit) and kv heads divide
  /// heads, norm_eps > 0, the kinds agree with the architecture, rotary head_dim even. Errors
  /// name the HF field.
  status validate() const;
  /// Weights of the whole model (embeddings, layers, head; a tied LM head counted once).
  int64_t parameter_count() const;
  /// Bytes of K and V one token occupies in every layer's cache, fp32.
  int64_t kv_bytes_per_token() const { return int64_t{2} * num_layers * kv_width() * 4; }
};

/// One row per architecture: everything outside models/ that differs between architectures asks
/// this table (placement, the tile kernels' parameters, timing, GGUF export, the serving defaults),
/// never the architecture's name. Adding an architecture is a row here plus its config.json and
/// tensor names in models/ (docs/architecture.md, "Adding a model architecture").
struct architecture_traits {
  architecture arch;
  std::string_view model_type;  ///< HF config.json model_type
  std::string_view hf_class;    ///< HF config.json architectures[0]
  std::string_view gguf_arch;   ///< GGUF general.architecture (llama.cpp's name); "" = no GGUF export
  std::string_view tokenizer;   ///< tokenizer preset when a folder has none ("" = none)
  std::string_view chat_format; ///< chat format (serving's names) when a checkpoint has no template
  bool qkv_bias = false;        ///< biases on the q, k, v projections
  bool o_bias = false;          ///< bias on the attention output projection
  bool mlp_bias = false;        ///< biases on the MLP projections
  norm_kind norm = norm_kind::layer_norm;
  activation_kind activation = activation_kind::gelu;  ///< the default; gpt2 configs may name another
  bool gated_mlp = false;
  position_kind positions = position_kind::learned;
  bool tied_embeddings = false;  ///< HF's default of tie_word_embeddings
  bool grouped_query = false;    ///< num_key_value_heads may be below num_attention_heads; head_dim may be explicit
  bool qk_norm = false;          ///< RMSNorm on q and k per head (none of these; Qwen3 would set it)
  bool sliding_window = false;   ///< config.json sliding_window is honoured
  bool conv1d_weights = false;   ///< GPT-2's Conv1D [in, out] weights and "transformer." names
};
/// The row of an architecture.
const architecture_traits& traits_of(architecture a);
/// The row whose model_type is this (config.json's), or nullptr.
const architecture_traits* traits_of_model_type(std::string_view model_type);
/// The decoders' model_type names, comma separated, for error messages.
std::string decoder_model_types();

/// A built-in shape by name: bert-tiny (2 layers, 128 hidden, 2 heads), bert-mini (4/256/4),
/// bert-small (4/512/8), bert-medium (8/512/8), bert-base (12/768/12), bert-large (24/1024/16);
/// FFN 4x hidden, vocab 30522, 512 positions, 2 labels (Turc et al. 2019, Devlin et al. 2018).
/// Decoders: gpt2-tiny (2/128/4), gpt2 (12/768/12, 124M), gpt2-medium (24/1024/16), gpt2-xl
/// (48/1600/25, a timing shape), all with
/// GPT-2's vocab 50257, 1024 positions, tied embeddings, gelu_new; llama-tiny (2 layers, 128
/// hidden, 4 heads, 2 kv heads, FFN 352), llama-1b (TinyLlama-1.1B: 22/2048/32 heads/4 kv heads,
/// FFN 5632), llama-2-7b (32/4096/32/32, FFN 11008) with LLaMA's vocab 32000, bos 1, eos 2;
/// llama-3-8b (32/4096/32/8, FFN 14336, vocab 128256, rope_theta 500000, 8192 positions).
/// Unknown name -> invalid_argument listing the known ones.
result<model_shape> shape_preset(std::string_view name);
/// Names shape_preset knows, smallest first.
std::vector<std::string> preset_names();

/// HF hidden_act names: "gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu" ("swish");
/// nullopt otherwise.
std::optional<activation_kind> activation_from_name(std::string_view hf_name);
/// The HF hidden_act name written for a kind ("gelu", "gelu_new", "relu", "silu").
std::string_view activation_name(activation_kind a);

}  // namespace tessera::models
