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
    {"llama-2-70b", architecture::llama, 80, 8192, 64, 8, 28672},  // timing shape: the multi-GPU anchors
};

using ak = activation_kind;
constexpr architecture_traits traits_table[] = {
    // arch, model_type, hf_class, gguf_arch, tokenizer, chat_format,
    // qkv_bias, o_bias, mlp_bias, norm, activation, gated_mlp, positions, tied, gqa, qk_norm, window, conv1d
    {architecture::bert, "bert", "BertForSequenceClassification", "", "", "plain",
     true, true, true, norm_kind::layer_norm, ak::gelu, false, position_kind::learned, false, false, false, false, false},
    {architecture::gpt2, "gpt2", "GPT2LMHeadModel", "gpt2", "gpt2", "plain",
     true, true, true, norm_kind::layer_norm, ak::gelu_tanh, false, position_kind::learned, true, false, false, false, true},
    {architecture::llama, "llama", "LlamaForCausalLM", "llama", "llama", "plain",
     false, false, false, norm_kind::rms_norm, ak::silu, true, position_kind::rotary, false, true, false, false, false},
    {architecture::qwen2, "qwen2", "Qwen2ForCausalLM", "qwen2", "qwen2", "chatml",
     true, false, false, norm_kind::rms_norm, ak::silu, true, position_kind::rotary, false, true, false, false, false},
    {architecture::mistral, "mistral", "MistralForCausalLM", "llama", "llama", "llama2",
     false, false, false, norm_kind::rms_norm, ak::silu, true, position_kind::rotary, false, true, false, true, false},
};

// The kinds and sizes an architecture implies (HF's defaults for its config class).
void set_architecture_defaults(model_shape& s) {
  if (s.arch == architecture::bert) return;
  const architecture_traits& t = traits_of(s.arch);
  s.norm = t.norm;
  s.activation = t.activation;
  s.positions = t.positions;
  s.gated_mlp = t.gated_mlp;
  s.tie_word_embeddings = t.tied_embeddings;
  s.norm_eps = 1e-5f;
  if (s.arch == architecture::gpt2) {
    s.vocab_size = 50257;
    s.max_position_embeddings = 1024;
    s.bos_token_id = s.eos_token_id = 50256;
  } else {  // LLaMA's vocabulary and specials; a config.json names its own
    s.vocab_size = 32000;
    s.max_position_embeddings = 2048;
    s.bos_token_id = 1;
    s.eos_token_id = 2;
  }
  s.type_vocab_size = 0;
  s.num_labels = 0;
}

}  // namespace

const architecture_traits& traits_of(architecture a) {
  for (const auto& t : traits_table)
    if (t.arch == a) return t;
  return traits_table[0];
}

const architecture_traits& model_shape::traits() const { return traits_of(arch); }

const architecture_traits* traits_of_model_type(std::string_view model_type) {
  for (const auto& t : traits_table)
    if (t.model_type == model_type) return &t;
  return nullptr;
}

std::string decoder_model_types() {
  std::string v;
  for (const auto& t : traits_table)
    if (t.arch != architecture::bert) v += (v.empty() ? "\"" : ", \"") + std::string(t.model_type) + "\"";
  return v;
}

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
  const bool gqa = traits().grouped_query;
  if (!gqa && head_dim() * num_heads != hidden_size)
    return status::invalid("head_dim " + std::to_string(head_dim()) + " x num_attention_heads " +
                           std::to_string(num_heads) + " must equal hidden_size for this architecture");
  if (!gqa && num_kv_heads != num_heads)
    return status::invalid("num_key_value_heads " + std::to_string(num_kv_heads) + " must equal num_attention_heads " +
                           std::to_string(num_heads) + " for this architecture (grouped-query attention is LLaMA's)");
  if (sliding_window < 0) return status::invalid("sliding_window must be zero or more, got " + std::to_string(sliding_window));
  if (sliding_window > 0 && !traits().sliding_window)
    return status::unsupported("sliding_window is not supported for " + std::string(traits().model_type));
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
    if (rope_scaling != rope_scaling_kind::none && !(rope_scaling_factor > 0.0f))
      return status::invalid("rope_scaling.factor must be positive, got " + std::to_string(rope_scaling_factor));
    if (rope_scaling == rope_scaling_kind::llama3 &&
        !(rope_low_freq_factor > 0.0f && rope_high_freq_factor > rope_low_freq_factor && rope_original_max_positions > 0.0f))
      return status::invalid("rope_scaling (llama3) needs 0 < low_freq_factor < high_freq_factor and "
                             "original_max_position_embeddings > 0");
    if (rope_scaling == rope_scaling_kind::yarn &&
        !(rope_beta_fast > rope_beta_slow && rope_beta_slow > 0.0f && rope_original_max_positions > 0.0f &&
          rope_attention_factor > 0.0f))
      return status::invalid("rope_scaling (yarn) needs beta_fast > beta_slow > 0, original_max_position_embeddings > 0 "
                             "and attention_factor > 0");
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
  if (is_decoder()) {  // the biases, norm betas, MLP projections and positions the traits name
    const auto& t = traits();
    const int64_t norm = t.norm == norm_kind::layer_norm ? 2 * h : h;
    const int64_t layer = 2 * norm + h * (q + 2 * kv) + (t.qkv_bias ? q + 2 * kv : 0) + q * h + (t.o_bias ? h : 0) +
                          (t.gated_mlp ? 3 : 2) * h * f + (t.mlp_bias ? f + h : 0);
    const int64_t pos = t.positions == position_kind::learned ? int64_t{max_position_embeddings} * h : 0;
    return V * h + pos + num_layers * layer + norm + (tie_word_embeddings ? 0 : V * h);
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
    if (name == "llama-2-7b" || name == "llama-2-70b") s.max_position_embeddings = 4096;
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
