// Model shapes: validation, parameter count, the presets (the one list of them).
#include "tessera/models/shape.hpp"

namespace tessera::models {
namespace {

struct preset {
  const char* name;
  architecture arch;
  int layers, hidden, heads, kv_heads, ffn;  // ffn 0 = 4 x hidden
};
constexpr preset presets[] = {
    {"bert-tiny", architecture::bert, 2, 128, 2, 2, 0},
    {"bert-mini", architecture::bert, 4, 256, 4, 4, 0},
    {"bert-small", architecture::bert, 4, 512, 8, 8, 0},
    {"bert-medium", architecture::bert, 8, 512, 8, 8, 0},
    {"bert-base", architecture::bert, 12, 768, 12, 12, 0},
    {"bert-large", architecture::bert, 24, 1024, 16, 16, 0},
    {"gpt2-tiny", architecture::gpt2, 2, 128, 4, 4, 0},
    {"gpt2", architecture::gpt2, 12, 768, 12, 12, 0},
    {"gpt2-medium", architecture::gpt2, 24, 1024, 16, 16, 0},
    {"gpt2-xl", architecture::gpt2, 48, 1600, 25, 25, 0},  // timing shape: the IPU GPT2-XL anchors
    {"llama-tiny", architecture::llama, 2, 128, 4, 2, 352},
    {"llama-1b", architecture::llama, 22, 2048, 32, 4, 5632},
    {"llama-2-7b", architecture::llama, 32, 4096, 32, 32, 11008},
    {"llama-3-8b", architecture::llama, 32, 4096, 32, 8, 14336},
};

// The kinds and sizes an architecture implies (HF's defaults for GPT2Config / LlamaConfig).
void set_architecture_defaults(model_shape& s) {
  switch (s.arch) {
    case architecture::bert: return;
    case architecture::gpt2:
      s.vocab_size = 50257;
      s.max_position_embeddings = 1024;
      s.norm_eps = 1e-5f;
      s.activation = activation_kind::gelu_tanh;
      s.tie_word_embeddings = true;
      s.bos_token_id = s.eos_token_id = 50256;
      break;
    case architecture::llama:
      s.vocab_size = 32000;
      s.max_position_embeddings = 2048;
      s.norm = norm_kind::rms_norm;
      s.norm_eps = 1e-5f;
      s.activation = activation_kind::silu;
      s.positions = position_kind::rotary;
      s.gated_mlp = true;
      s.bos_token_id = 1;
      s.eos_token_id = 2;
      break;
  }
  s.type_vocab_size = 0;
  s.num_labels = 0;
}

}  // namespace

status model_shape::validate() const {
  auto at_least = [](int v, int min, const char* field) -> status {
    if (v < min)
      return status::invalid(std::string(field) + " must be " + (min > 0 ? "positive" : "zero or more") + ", got " +
                             std::to_string(v));
    return {};
  };
  TESSERA_RETURN_IF_ERROR(at_least(hidden_size, 1, "hidden_size"));
  TESSERA_RETURN_IF_ERROR(at_least(num_layers, 1, "num_hidden_layers"));
  TESSERA_RETURN_IF_ERROR(at_least(num_heads, 1, "num_attention_heads"));
  TESSERA_RETURN_IF_ERROR(at_least(num_kv_heads, 1, "num_key_value_heads"));
  TESSERA_RETURN_IF_ERROR(at_least(intermediate_size, 1, "intermediate_size"));
  TESSERA_RETURN_IF_ERROR(at_least(max_position_embeddings, 1, "max_position_embeddings"));
  TESSERA_RETURN_IF_ERROR(at_least(vocab_size, 1, "vocab_size"));
  // A BERT has segment embeddings (and a head unless it is an embedding model); a decoder may have neither.
  const int needed = arch == architecture::bert ? 1 : 0;
  TESSERA_RETURN_IF_ERROR(at_least(type_vocab_size, needed, "type_vocab_size"));
  TESSERA_RETURN_IF_ERROR(at_least(num_labels, 0, "num_labels"));  // 0: an encoder without a head
  TESSERA_RETURN_IF_ERROR(at_least(explicit_head_dim, 0, "head_dim"));
  if (explicit_head_dim == 0 && hidden_size % num_heads != 0)
    return status::invalid("hidden_size " + std::to_string(hidden_size) +
                           " is not a multiple of num_attention_heads " + std::to_string(num_heads) +
                           " (give head_dim explicitly)");
  if (arch != architecture::llama && head_dim() * num_heads != hidden_size)
    return status::invalid("head_dim " + std::to_string(head_dim()) + " x num_attention_heads " +
                           std::to_string(num_heads) + " must equal hidden_size for this architecture");
  if (arch != architecture::llama && num_kv_heads != num_heads)
    return status::invalid("num_key_value_heads " + std::to_string(num_kv_heads) + " must equal num_attention_heads " +
                           std::to_string(num_heads) + " for this architecture (grouped-query attention is LLaMA's)");
  if (num_heads % num_kv_heads != 0)
    return status::invalid("num_attention_heads " + std::to_string(num_heads) +
                           " is not a multiple of num_key_value_heads " + std::to_string(num_kv_heads));
  if (!(norm_eps > 0.0f))
    return status::invalid(std::string(norm == norm_kind::rms_norm ? "rms_norm_eps" : "layer_norm_eps") +
                           " must be positive, got " + std::to_string(norm_eps));
  if (positions == position_kind::rotary) {
    if (head_dim() % 2 != 0)
      return status::invalid("head_dim " + std::to_string(head_dim()) + " must be even for rotary embeddings");
    if (!(rope_theta > 1.0f)) return status::invalid("rope_theta must be > 1, got " + std::to_string(rope_theta));
    if (rope_scaling == rope_scaling_kind::linear && !(rope_scaling_factor > 0.0f))
      return status::invalid("rope_scaling.factor must be positive, got " + std::to_string(rope_scaling_factor));
  }
  if (is_decoder()) {
    if (bos_token_id >= vocab_size)
      return status::invalid("bos_token_id " + std::to_string(bos_token_id) + " is not below vocab_size " +
                             std::to_string(vocab_size));
    if (eos_token_id >= vocab_size)
      return status::invalid("eos_token_id " + std::to_string(eos_token_id) + " is not below vocab_size " +
                             std::to_string(vocab_size));
  }
  return {};
}

int64_t model_shape::parameter_count() const {
  const int64_t h = hidden_size, f = intermediate_size, kv = kv_width(), q = q_width(), V = vocab_size;
  if (arch == architecture::gpt2) {  // biases everywhere, LayerNorm gamma and beta, learned positions
    const int64_t layer = 2 * h + (h * (q + 2 * kv) + q + 2 * kv) + (q * h + h) + 2 * h + (h * f + f) + (f * h + h);
    return (V + max_position_embeddings) * h + num_layers * layer + 2 * h + (tie_word_embeddings ? 0 : V * h);
  }
  if (arch == architecture::llama) {  // no biases, RMSNorm gamma only, SwiGLU
    const int64_t layer = h + h * (q + 2 * kv) + q * h + h + 3 * h * f;
    return V * h + num_layers * layer + h + (tie_word_embeddings ? 0 : V * h);
  }
  const int64_t emb = (int64_t{vocab_size} + max_position_embeddings + type_vocab_size) * h + 2 * h;
  const int64_t attention = (h * h + h) + 2 * (h * kv + kv) + (h * h + h);  // Q, K, V, out (+ biases)
  const int64_t layer = attention + 2 * h + (h * f + f) + (f * h + h) + 2 * h;
  const int64_t head = num_labels > 0 ? (h * h + h) + (int64_t{num_labels} * h + num_labels) : 0;
  return emb + num_layers * layer + head;
}

result<model_shape> shape_preset(std::string_view name) {
  for (const auto& p : presets) {
    if (name != p.name) continue;
    model_shape s;
    s.name = p.name;
    s.arch = p.arch;
    s.num_layers = p.layers;
    s.hidden_size = p.hidden;
    s.num_heads = p.heads;
    s.num_kv_heads = p.kv_heads;
    s.intermediate_size = p.ffn > 0 ? p.ffn : 4 * p.hidden;
    set_architecture_defaults(s);
    if (name == "llama-2-7b") s.max_position_embeddings = 4096;
    if (name == "llama-3-8b") {
      s.vocab_size = 128256;
      s.max_position_embeddings = 8192;
      s.rope_theta = 500000.0f;
      s.bos_token_id = 128000;
      s.eos_token_id = 128001;
    }
    return s;
  }
  std::string known;
  for (const auto& p : presets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  return status::invalid("unknown model preset \"" + std::string(name) + "\"; known presets: " + known);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const auto& p : presets) v.emplace_back(p.name);
  return v;
}

std::optional<activation_kind> activation_from_name(std::string_view n) {
  if (n == "gelu") return activation_kind::gelu;
  if (n == "gelu_new" || n == "gelu_pytorch_tanh") return activation_kind::gelu_tanh;
  if (n == "relu") return activation_kind::relu;
  if (n == "silu" || n == "swish") return activation_kind::silu;
  return std::nullopt;
}

std::string_view activation_name(activation_kind a) {
  switch (a) {
    case activation_kind::gelu: return "gelu";
    case activation_kind::gelu_tanh: return "gelu_new";
    case activation_kind::relu: return "relu";
    case activation_kind::silu: return "silu";
  }
  return "gelu";
}

}  // namespace tessera::models
