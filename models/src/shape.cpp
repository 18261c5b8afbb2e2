// Model shapes: validation, parameter count, the presets (the one list of them).
#include "tessera/models/shape.hpp"

namespace tessera::models {
namespace {

struct preset {
  const char* name;
  int layers, hidden, heads;
};
constexpr preset presets[] = {
    {"bert-tiny", 2, 128, 2},    {"bert-mini", 4, 256, 4},   {"bert-small", 4, 512, 8},
    {"bert-medium", 8, 512, 8}, {"bert-base", 12, 768, 12}, {"bert-large", 24, 1024, 16},
};

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
  // A BERT classifier has segment embeddings and a head; a decoder may have neither.
  const int needed = arch == architecture::bert ? 1 : 0;
  TESSERA_RETURN_IF_ERROR(at_least(type_vocab_size, needed, "type_vocab_size"));
  TESSERA_RETURN_IF_ERROR(at_least(num_labels, needed, "num_labels"));
  if (hidden_size % num_heads != 0)
    return status::invalid("hidden_size " + std::to_string(hidden_size) +
                           " is not a multiple of num_attention_heads " + std::to_string(num_heads));
  if (num_heads % num_kv_heads != 0)
    return status::invalid("num_attention_heads " + std::to_string(num_heads) +
                           " is not a multiple of num_key_value_heads " + std::to_string(num_kv_heads));
  if (!(norm_eps > 0.0f)) return status::invalid("layer_norm_eps must be positive, got " + std::to_string(norm_eps));
  return {};
}

int64_t model_shape::parameter_count() const {
  const int64_t h = hidden_size, f = intermediate_size, kv = int64_t{num_kv_heads} * head_dim();
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
    s.num_layers = p.layers;
    s.hidden_size = p.hidden;
    s.num_heads = s.num_kv_heads = p.heads;
    s.intermediate_size = 4 * p.hidden;
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
  return std::nullopt;
}

std::string_view activation_name(activation_kind a) {
  switch (a) {
    case activation_kind::gelu: return "gelu";
    case activation_kind::gelu_tanh: return "gelu_new";
    case activation_kind::relu: return "relu";
  }
  return "gelu";
}

}  // namespace tessera::models
