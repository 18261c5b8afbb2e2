// BERT configs: presets with labels, Hugging Face config.json in and out.
#include "tessera/models/config.hpp"

#include <nlohmann/json.hpp>

namespace tessera::models {
namespace {

struct family_row {
  encoder_family family;
  std::string_view model_type, prefix;  // HF model_type, class-name prefix
};
constexpr family_row families[] = {
    {encoder_family::bert, "bert", "Bert"},
    {encoder_family::roberta, "roberta", "Roberta"},
    {encoder_family::xlm_roberta, "xlm-roberta", "XLMRoberta"},
};

std::vector<std::string> default_labels(int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back("LABEL_" + std::to_string(i));
  return v;
}

}  // namespace

std::string_view family_model_type(encoder_family f) {
  for (const auto& r : families)
    if (r.family == f) return r.model_type;
  return "bert";
}

std::string supported_encoder_classes() {
  std::string v;
  for (const auto& r : families)
    for (const char* suffix : {"ForSequenceClassification", "Model"})
      v += (v.empty() ? "" : ", ") + std::string(r.prefix) + suffix;
  return v;
}

std::string encoder_hf_class(const bert_config& c) {
  for (const auto& r : families)
    if (r.family == c.family)
      return std::string(r.prefix) + (c.num_labels > 0 ? "ForSequenceClassification" : "Model");
  return "BertForSequenceClassification";
}

status bert_config::validate() const {
  TESSERA_RETURN_IF_ERROR(model_shape::validate());
  if (arch != architecture::bert) return status::invalid("the model is not a BERT encoder");
  if (static_cast<int>(id2label.size()) != num_labels)
    return status::invalid("id2label has " + std::to_string(id2label.size()) + " names but num_labels is " +
                           std::to_string(num_labels));
  if (pad_token_id < 0 || pad_token_id >= vocab_size)
    return status::invalid("pad_token_id " + std::to_string(pad_token_id) + " is outside the vocab [0, " +
                           std::to_string(vocab_size) + ")");
  if (max_sequence_length() < 1)
    return status::invalid("max_position_embeddings " + std::to_string(max_position_embeddings) +
                           " leaves no position after the pad_token_id + 1 = " + std::to_string(position_offset()) +
                           " that " + std::string(family_model_type(family)) + " positions start at");
  return {};
}

result<bert_config> preset_config(std::string_view name) {
  auto shape = shape_preset(name);
  if (!shape) return shape.error();
  bert_config c;
  static_cast<model_shape&>(c) = std::move(*shape);
  c.id2label = default_labels(c.num_labels);
  return c;
}

result<bert_config> parse_config_json(std::string_view json_text) {
  bert_config c;
  c.name = "config.json";
  try {
    const auto j = nlohmann::json::parse(json_text);
    if (!j.is_object()) return status::invalid("config.json is not a JSON object");
    if (j.contains("model_type")) {
      if (!j["model_type"].is_string())
        return status::invalid("field \"model_type\" must be a string, got " + j["model_type"].dump());
      const auto mt = j["model_type"].get<std::string>();
      const family_row* row = nullptr;
      for (const auto& r : families)
        if (r.model_type == mt) row = &r;
      if (!row)
        return status::invalid("model_type is \"" + mt +
                               "\"; the encoders supported are \"bert\", \"roberta\" and \"xlm-roberta\" (" +
                               supported_encoder_classes() + ")");
      c.family = row->family;
    }
    if (j.contains("architectures")) {
      const auto& a = j["architectures"];
      if (!a.is_array() || a.size() != 1 || !a[0].is_string())
        return status::invalid("field \"architectures\" must be a list of one class name, got " + a.dump());
      const auto cls = a[0].get<std::string>();
      std::string prefix;
      for (const auto& r : families)
        if (r.family == c.family) prefix = r.prefix;
      if (cls != prefix + "ForSequenceClassification" && cls != prefix + "Model")
        return status::invalid("architectures [\"" + cls + "\"] is not supported for model_type \"" +
                               std::string(family_model_type(c.family)) + "\"; supported: " +
                               supported_encoder_classes());
    }
    if (c.family != encoder_family::bert) c.pad_token_id = 1;  // RobertaConfig's default padding_idx
    auto get_int = [&](const char* key, int& out, bool required) -> status {
      if (!j.contains(key)) {
        if (required) return status::invalid(std::string("missing field \"") + key + "\"");
        return {};
      }
      if (!j[key].is_number_integer())
        return status::invalid(std::string("field \"") + key + "\" must be an integer, got " + j[key].dump());
      out = j[key].get<int>();
      return {};
    };
    TESSERA_RETURN_IF_ERROR(get_int("hidden_size", c.hidden_size, true));
    TESSERA_RETURN_IF_ERROR(get_int("num_hidden_layers", c.num_layers, true));
    TESSERA_RETURN_IF_ERROR(get_int("num_attention_heads", c.num_heads, true));
    TESSERA_RETURN_IF_ERROR(get_int("intermediate_size", c.intermediate_size, true));
    TESSERA_RETURN_IF_ERROR(get_int("vocab_size", c.vocab_size, true));
    TESSERA_RETURN_IF_ERROR(get_int("max_position_embeddings", c.max_position_embeddings, false));
    TESSERA_RETURN_IF_ERROR(get_int("type_vocab_size", c.type_vocab_size, false));
    // RoBERTa / XLM-R use one token type; type_vocab_size 0 (no token_type_embeddings stored) is
    // the same model: bert_weights::bind adds a zero row.
    if (c.family != encoder_family::bert && c.type_vocab_size == 0) c.type_vocab_size = 1;
    if (j.contains("pad_token_id") && !j["pad_token_id"].is_null())
      TESSERA_RETURN_IF_ERROR(get_int("pad_token_id", c.pad_token_id, false));
    c.num_kv_heads = c.num_heads;
    if (j.contains("layer_norm_eps")) {
      if (!j["layer_norm_eps"].is_number())
        return status::invalid("field \"layer_norm_eps\" must be a number, got " + j["layer_norm_eps"].dump());
      c.norm_eps = j["layer_norm_eps"].get<float>();
    }
    if (j.contains("hidden_act")) {
      if (!j["hidden_act"].is_string())
        return status::invalid("field \"hidden_act\" must be a string, got " + j["hidden_act"].dump());
      const auto name = j["hidden_act"].get<std::string>();
      auto act = activation_from_name(name);
      if (!act || *act == activation_kind::silu)  // silu is the decoders' (SwiGLU); BERT's kernels do not take it
        return status::invalid("hidden_act \"" + name +
                               "\" is not supported; use gelu, gelu_new, gelu_pytorch_tanh or relu");
      c.activation = *act;
    }
    if (j.contains("position_embedding_type") && j["position_embedding_type"] != "absolute")
      return status::invalid("position_embedding_type " + j["position_embedding_type"].dump() +
                             " is not supported; only \"absolute\"");
    // HF derives num_labels from id2label when both are given; we require them to agree.
    c.num_labels = -1;
    TESSERA_RETURN_IF_ERROR(get_int("num_labels", c.num_labels, false));
    c.id2label.clear();
    if (j.contains("id2label")) {
      const auto& m = j["id2label"];
      if (!m.is_object()) return status::invalid("field \"id2label\" must be an object {\"0\": \"name\", ...}");
      std::vector<std::string> names(m.size());
      for (auto it = m.begin(); it != m.end(); ++it) {
        size_t pos = 0;
        int idx = -1;
        try { idx = std::stoi(it.key(), &pos); } catch (...) { idx = -1; }
        if (idx < 0 || pos != it.key().size() || idx >= static_cast<int>(names.size()) || !it.value().is_string())
          return status::invalid("id2label entry \"" + it.key() + "\" must map 0..n-1 to names");
        names[static_cast<size_t>(idx)] = it.value().get<std::string>();
      }
      if (c.num_labels >= 0 && c.num_labels != static_cast<int>(names.size()))
        return status::invalid("num_labels " + std::to_string(c.num_labels) + " disagrees with id2label (" +
                               std::to_string(names.size()) + " names)");
      c.id2label = std::move(names);
      c.num_labels = static_cast<int>(c.id2label.size());
    }
    if (c.num_labels < 0) c.num_labels = 2;  // HF's PretrainedConfig default
    if (c.id2label.empty()) c.id2label = default_labels(c.num_labels);
  } catch (const nlohmann::json::exception& e) {
    return status::invalid(std::string("not valid JSON: ") + e.what());
  }
  TESSERA_RETURN_IF_ERROR(c.validate());
  return c;
}

std::string to_config_json(const bert_config& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {encoder_hf_class(c)};
  j["model_type"] = std::string(family_model_type(c.family));
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["hidden_act"] = activation_name(c.activation);
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["type_vocab_size"] = c.type_vocab_size;
  j["vocab_size"] = c.vocab_size;
  j["layer_norm_eps"] = c.norm_eps;
  j["position_embedding_type"] = "absolute";
  j["pad_token_id"] = c.pad_token_id;
  j["num_labels"] = c.num_labels;
  nlohmann::ordered_json labels = nlohmann::ordered_json::object();
  for (size_t i = 0; i < c.id2label.size(); ++i) labels[std::to_string(i)] = c.id2label[i];
  j["id2label"] = labels;
  return j.dump(2) + "\n";
}

}  // namespace tessera::models
