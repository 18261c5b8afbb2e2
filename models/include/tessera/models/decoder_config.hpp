// tessera/models/decoder_config.hpp: a decoder's Hugging Face config.json, in and out, as a
// model_shape. Part of tessera_model_shape (no kernels): the functional decoders (decoder.hpp) and
// the timing model (tessera-llm-timing --model path/to/config.json) read configs through it.
//
//   auto s = tessera::models::load_decoder_config("models/llama-2-70b");   // a folder or a file
//   if (!s) { std::cerr << s.error().to_string(); return 2; }   // names the file and the field
#pragma once

#include <string>
#include <string_view>

#include "tessera/common/status.hpp"
#include "tessera/models/shape.hpp"

namespace tessera::models {

/// Parses a Hugging Face config.json of model_type "gpt2" (n_embd, n_layer, n_head, n_inner,
/// n_positions, layer_norm_epsilon, activation_function) or "llama" / "qwen2" / "mistral"
/// (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
/// intermediate_size, rms_norm_eps, rope_theta, rope_scaling, hidden_act silu, attention_bias /
/// mlp_bias false), with tie_word_embeddings, bos_token_id, eos_token_id. Errors name the field.
result<model_shape> parse_decoder_config_json(std::string_view json_text);
/// The config.json text of a decoder shape (HF field names, parse_decoder_config_json reads it back).
std::string decoder_config_json(const model_shape& shape);
/// Reads `path` (a config.json, or a folder holding one) with parse_decoder_config_json; the shape
/// is named after the folder (or the file when it is not called config.json). Errors name the file:
/// not_found when it cannot be read, the parser's error (naming the field) otherwise.
result<model_shape> load_decoder_config(const std::string& path);

}  // namespace tessera::models
