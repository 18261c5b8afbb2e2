// Hugging Face config.json of the decoders (GPT-2; LLaMA, Qwen2, Mistral), in and out.
#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tessera/models/decoder_config.hpp"

#include <filesystem>

#include "tessera/common/text.hpp"

namespace tessera::models {
namespace {

using json = nlohmann::json;

// Reads an optional field of the config; absent and null leave `out` as it is.
class fields {
 public:
  explicit fields(const json& j) : j_(j) {}
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  status get_int(const char* key, int& out, bool required = false) const {
    if (!has(key)) return required ? status::invalid(std::string("missing field \"") + key + "\"") : status{};
    if (!j_[key].is_number_integer())
      return status::invalid(std::string("field \"") + key + "\" must be an integer, got " + j_[key].dump());
    const auto v = j_[key].get<int64_t>();
    if (v < INT32_MIN || v > INT32_MAX) return status::invalid(std::string("field \"") + key + "\" is out of range");
    out = static_cast<int>(v);
    return {};
  }
  status get_float(const char* key, float& out) const {
    if (!has(key)) return {};
    if (!j_[key].is_number()) return status::invalid(std::string("field \"") + key + "\" must be a number, got " + j_[key].dump());
    out = j_[key].get<float>();
    return {};
  }
  status get_bool(const char* key, bool& out) const {
    if (!has(key)) return {};
    if (!j_[key].is_boolean())
      return status::invalid(std::string("field \"") + key + "\" must be true or false, got " + j_[key].dump());
    out = j_[key].get<bool>();
    return {};
  }
  // A token id, or a list of them (LLaMA 3 lists several eos ids): the first one.
  status get_token(const char* key, int& out) const {
    if (has(key) && j_[key].is_array()) {
      if (j_[key].empty() || !j_[key][0].is_number_integer())
        return status::invalid(std::string("field \"") + key + "\" must be a token id or a non-empty list of them");
      out = j_[key][0].get<int>();
      return {};
    }
    return get_int(key, out);
  }
  status refuse_true(const char* key, const char* why) const {
    bool v = false;
    TESSERA_RETURN_IF_ERROR(get_bool(key, v));
    if (v) return status::unsupported(std::string("field \"") + key + "\" true is not supported: " + why);
    return {};
  }

 private:
  const json& j_;
};

status parse_gpt2(const fields& f, model_shape& s) {
  TESSERA_RETURN_IF_ERROR(f.get_int("n_embd", s.hidden_size, true));
  TESSERA_RETURN_IF_ERROR(f.get_int("n_layer", s.num_layers, true));
  TESSERA_RETURN_IF_ERROR(f.get_int("n_head", s.num_heads, true));
  TESSERA_RETURN_IF_ERROR(f.get_int("vocab_size", s.vocab_size, true));
  TESSERA_RETURN_IF_ERROR(f.get_int("n_positions", s.max_position_embeddings));
  s.num_kv_heads = s.num_heads;
  if (s.hidden_size > std::numeric_limits<int>::max() / 4)  // 4 x n_embd must be an int (hostile files)
    return status::invalid("field \"n_embd\" " + std::to_string(s.hidden_size) + " is too large");
  s.intermediate_size = 4 * s.hidden_size;  // n_inner null = 4 x n_embd
  TESSERA_RETURN_IF_ERROR(f.get_int("n_inner", s.intermediate_size));
  TESSERA_RETURN_IF_ERROR(f.get_float("layer_norm_epsilon", s.norm_eps));
  bool scale = true;
  TESSERA_RETURN_IF_ERROR(f.get_bool("scale_attn_weights", scale));
  if (!scale) return status::unsupported("field \"scale_attn_weights\" false is not supported (scores are scaled by 1/sqrt(head_dim))");
  TESSERA_RETURN_IF_ERROR(f.refuse_true("scale_attn_by_inverse_layer_idx", "scores are scaled by 1/sqrt(head_dim) only"));
  return {};
}

// HF's rope_scaling: {rope_type (or type): default | linear | llama3 | yarn, factor, ...}.
status parse_rope_scaling(const json& r, model_shape& s) {
  if (!r.is_object()) return status::invalid("field \"rope_scaling\" must be an object or null, got " + r.dump());
  static const char* const known[] = {"rope_type", "type", "factor", "low_freq_factor", "high_freq_factor",
                                      "original_max_position_embeddings", "beta_fast", "beta_slow",
                                      "attention_factor", "mscale", "mscale_all_dim", "truncate"};
  for (const auto& [k, v] : r.items())
    if (std::find(std::begin(known), std::end(known), k) == std::end(known))
      return status::unsupported("field \"rope_scaling." + k + "\" is not supported");
  std::string kind = "default";
  for (const char* k : {"type", "rope_type"})
    if (r.contains(k) && r[k].is_string()) kind = r[k].get<std::string>();
  auto number = [&](const char* k, float& out, bool required) -> status {
    if (!r.contains(k) || r[k].is_null()) {
      if (required) return status::invalid("field \"rope_scaling." + std::string(k) + "\" is required for " + kind + " scaling");
      return ok_status();
    }
    if (!r[k].is_number()) return status::invalid("field \"rope_scaling." + std::string(k) + "\" must be a number, got " + r[k].dump());
    out = r[k].get<float>();
    return ok_status();
  };
  if (kind == "default") return ok_status();
  if (kind == "dynamic")
    return status::unsupported("rope_scaling type \"dynamic\" is not supported: its frequencies change with each "
                               "sequence's length, so keys cached at one length would be rotated unlike those computed at "
                               "another; supported: linear, llama3, yarn");
  TESSERA_RETURN_IF_ERROR(number("factor", s.rope_scaling_factor, true));
  if (kind == "linear") {
    s.rope_scaling = rope_scaling_kind::linear;
  } else if (kind == "llama3") {
    s.rope_scaling = rope_scaling_kind::llama3;
    TESSERA_RETURN_IF_ERROR(number("low_freq_factor", s.rope_low_freq_factor, true));
    TESSERA_RETURN_IF_ERROR(number("high_freq_factor", s.rope_high_freq_factor, true));
    TESSERA_RETURN_IF_ERROR(number("original_max_position_embeddings", s.rope_original_max_positions, true));
  } else if (kind == "yarn") {
    s.rope_scaling = rope_scaling_kind::yarn;
    for (const char* k : {"mscale", "mscale_all_dim"})
      if (r.contains(k) && !r[k].is_null())
        return status::unsupported("field \"rope_scaling." + std::string(k) + "\" (DeepSeek's yarn) is not supported");
    if (r.contains("truncate") && r["truncate"] != true)
      return status::unsupported("field \"rope_scaling.truncate\" false is not supported");
    s.rope_original_max_positions = static_cast<float>(s.max_position_embeddings);
    TESSERA_RETURN_IF_ERROR(number("original_max_position_embeddings", s.rope_original_max_positions, false));
    TESSERA_RETURN_IF_ERROR(number("beta_fast", s.rope_beta_fast, false));
    TESSERA_RETURN_IF_ERROR(number("beta_slow", s.rope_beta_slow, false));
    // HF's default: 0.1 ln(factor) + 1 (1 when factor <= 1).
    s.rope_attention_factor = s.rope_scaling_factor > 1 ? 0.1f * std::log(s.rope_scaling_factor) + 1.0f : 1.0f;
    TESSERA_RETURN_IF_ERROR(number("attention_factor", s.rope_attention_factor, false));
  } else {
    return status::unsupported("rope_scaling type \"" + kind + "\" is not supported; supported: linear, llama3, yarn or null");
  }
  return ok_status();
}

// LLaMA's fields, which Qwen2 and Mistral share; what differs is in the traits row.
status parse_llama(const json& j, const fields& f, model_shape& s) {
  TESSERA_RETURN_IF_ERROR(f.get_int("hidden_size", s.hidden_size, true));
  TESSERA_RETURN_IF_ERROR(f.get_int("num_hidden_layers", s.num_layers, true));
  TESSERA_RETURN_IF_ERROR(f.get_int("num_attention_heads", s.num_heads, true));
  TESSERA_RETURN_IF_ERROR(f.get_int("intermediate_size", s.intermediate_size, true));
  TESSERA_RETURN_IF_ERROR(f.get_int("vocab_size", s.vocab_size, true));
  TESSERA_RETURN_IF_ERROR(f.get_int("max_position_embeddings", s.max_position_embeddings));
  s.num_kv_heads = s.num_heads;
  TESSERA_RETURN_IF_ERROR(f.get_int("num_key_value_heads", s.num_kv_heads));
  TESSERA_RETURN_IF_ERROR(f.get_int("head_dim", s.explicit_head_dim));
  if (s.explicit_head_dim > 0 && s.num_heads > 0 && int64_t{s.explicit_head_dim} * s.num_heads == s.hidden_size)
    s.explicit_head_dim = 0;  // the default spelled out
  TESSERA_RETURN_IF_ERROR(f.get_float("rms_norm_eps", s.norm_eps));
  TESSERA_RETURN_IF_ERROR(f.get_float("rope_theta", s.rope_theta));
  const auto& t = s.traits();
  if (!t.qkv_bias) TESSERA_RETURN_IF_ERROR(f.refuse_true("attention_bias", "this architecture's projections have no biases here"));
  if (!t.mlp_bias) TESSERA_RETURN_IF_ERROR(f.refuse_true("mlp_bias", "this architecture's projections have no biases here"));
  // Qwen2 names a window but applies it only with use_sliding_window, and then to some layers.
  TESSERA_RETURN_IF_ERROR(f.refuse_true("use_sliding_window", "sliding-window attention on some layers only is not supported"));
  if (t.sliding_window) TESSERA_RETURN_IF_ERROR(f.get_int("sliding_window", s.sliding_window));
  if (f.has("rope_scaling")) TESSERA_RETURN_IF_ERROR(parse_rope_scaling(j["rope_scaling"], s));
  return {};
}

}  // namespace

result<model_shape> parse_decoder_config_json(std::string_view json_text) {
  model_shape s;
  s.name = "config.json";
  try {
    const auto j = json::parse(json_text);
    if (!j.is_object()) return status::invalid("config.json is not a JSON object");
    if (!j.contains("model_type") || !j["model_type"].is_string())
      return status::invalid("missing field \"model_type\" (" + decoder_model_types() + ")");
    const auto type = j["model_type"].get<std::string>();
    const architecture_traits* t = traits_of_model_type(type);
    if (!t || t->arch == architecture::bert)
      return status::unsupported("model_type \"" + type + "\" is not a supported decoder; use one of " + decoder_model_types());
    // The architecture's kinds and defaults; the sizes come from the fields.
    auto preset = shape_preset(t->conv1d_weights ? "gpt2-tiny" : "llama-tiny");
    if (!preset) return preset.error();
    s = *preset;
    s.arch = t->arch;
    s.name = "config.json";
    s.norm = t->norm;
    s.activation = t->activation;
    s.positions = t->positions;
    s.gated_mlp = t->gated_mlp;
    const fields f(j);
    if (t->conv1d_weights) TESSERA_RETURN_IF_ERROR(parse_gpt2(f, s));
    else TESSERA_RETURN_IF_ERROR(parse_llama(j, f, s));
    s.tie_word_embeddings = t->tied_embeddings;  // HF's per-architecture default
    TESSERA_RETURN_IF_ERROR(f.get_bool("tie_word_embeddings", s.tie_word_embeddings));
    s.bos_token_id = s.eos_token_id = -1;
    TESSERA_RETURN_IF_ERROR(f.get_token("bos_token_id", s.bos_token_id));
    TESSERA_RETURN_IF_ERROR(f.get_token("eos_token_id", s.eos_token_id));
    const char* act_key = t->conv1d_weights ? "activation_function" : "hidden_act";
    if (f.has(act_key)) {
      if (!j[act_key].is_string())
        return status::invalid(std::string("field \"") + act_key + "\" must be a string, got " + j[act_key].dump());
      const auto name = j[act_key].get<std::string>();
      const auto act = activation_from_name(name);
      if (!act || (t->gated_mlp && *act != activation_kind::silu))
        return status::unsupported(std::string(act_key) + " \"" + name + "\" is not supported for " + type +
                                   (t->gated_mlp ? " (SwiGLU needs silu)" : " (use gelu_new, gelu or relu)"));
      if (!t->gated_mlp && *act == activation_kind::silu)
        return status::unsupported(std::string(act_key) + " \"silu\" is not supported for gpt2");
      s.activation = *act;
    }
  } catch (const json::exception& e) {
    return status::invalid(std::string("not valid JSON: ") + e.what());
  }
  TESSERA_RETURN_IF_ERROR(s.validate());
  return s;
}

std::string decoder_config_json(const model_shape& s) {
  nlohmann::ordered_json j;
  const auto& t = s.traits();
  j["architectures"] = {std::string(t.hf_class)};
  j["model_type"] = std::string(t.model_type);
  if (t.conv1d_weights) {
    j["n_embd"] = s.hidden_size;
    j["n_layer"] = s.num_layers;
    j["n_head"] = s.num_heads;
    j["n_inner"] = s.intermediate_size;
    j["n_positions"] = s.max_position_embeddings;
    j["n_ctx"] = s.max_position_embeddings;
    j["vocab_size"] = s.vocab_size;
    j["layer_norm_epsilon"] = s.norm_eps;
    j["activation_function"] = activation_name(s.activation);
  } else {
    j["hidden_size"] = s.hidden_size;
    j["num_hidden_layers"] = s.num_layers;
    j["num_attention_heads"] = s.num_heads;
    j["num_key_value_heads"] = s.num_kv_heads;
    j["head_dim"] = s.head_dim();
    j["intermediate_size"] = s.intermediate_size;
    j["vocab_size"] = s.vocab_size;
    j["max_position_embeddings"] = s.max_position_embeddings;
    j["rms_norm_eps"] = s.norm_eps;
    j["rope_theta"] = s.rope_theta;
    switch (s.rope_scaling) {
      case rope_scaling_kind::none: j["rope_scaling"] = nullptr; break;
      case rope_scaling_kind::linear:
        j["rope_scaling"] = {{"type", "linear"}, {"rope_type", "linear"}, {"factor", s.rope_scaling_factor}};
        break;
      case rope_scaling_kind::llama3:
        j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", s.rope_scaling_factor},
                             {"low_freq_factor", s.rope_low_freq_factor}, {"high_freq_factor", s.rope_high_freq_factor},
                             {"original_max_position_embeddings", s.rope_original_max_positions}};
        break;
      case rope_scaling_kind::yarn:
        j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", s.rope_scaling_factor},
                             {"original_max_position_embeddings", s.rope_original_max_positions},
                             {"beta_fast", s.rope_beta_fast}, {"beta_slow", s.rope_beta_slow},
                             {"attention_factor", s.rope_attention_factor}};
        break;
    }
    j["hidden_act"] = "silu";
    if (s.arch == architecture::llama) {
      j["attention_bias"] = false;
      j["mlp_bias"] = false;
    }
    if (t.sliding_window) j["sliding_window"] = s.sliding_window > 0 ? nlohmann::ordered_json(s.sliding_window) : nullptr;
  }
  j["tie_word_embeddings"] = s.tie_word_embeddings;
  if (s.bos_token_id >= 0) j["bos_token_id"] = s.bos_token_id;
  if (s.eos_token_id >= 0) j["eos_token_id"] = s.eos_token_id;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

}  // namespace tessera::models

namespace tessera::models {

result<model_shape> load_decoder_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file{path};
  if (fs::is_directory(file, ec)) file /= "config.json";
  auto text = read_text_file(file);
  if (!text) return status::not_found(file.string() + ": cannot read a config.json there (pass a Hugging Face config.json or its folder)");
  auto shape = parse_decoder_config_json(*text);
  if (!shape) return shape.error().with_context(file.string());
  const fs::path named = file.filename() == "config.json" && file.has_parent_path() ? file.parent_path() : file;
  shape->name = named.filename().string().empty() ? file.string() : named.filename().string();
  return shape;
}

}  // namespace tessera::models
