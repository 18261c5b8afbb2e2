// tessera/models/config.hpp: a BERT-for-sequence-classification model's configuration.
//
// A bert_config is a model_shape (shape.hpp: sizes, kinds, presets) plus the label names of
// its classification head. It comes from a Hugging Face config.json (parse_config_json) or
// from a built-in preset (shape.hpp's preset_names()).
//
//   auto cfg = tessera::models::preset_config("bert-base");
//   if (!cfg) { std::cerr << cfg.error().to_string(); return 2; }
//   int d = cfg->head_dim();   // 64
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/shape.hpp"

namespace tessera::models {

/// A post-LN BERT encoder with a tanh pooler and a linear classifier.
struct bert_config : model_shape {
  std::vector<std::string> id2label;   ///< num_labels names ("LABEL_0", ... when not given)

  /// The shape is valid and a BERT classifier, and id2label has num_labels names.
  status validate() const;
};

/// A built-in preset (shape_preset) with labels LABEL_0, LABEL_1. Unknown name ->
/// status::invalid listing the known ones.
result<bert_config> preset_config(std::string_view name);

/// Parses a Hugging Face BertConfig JSON text. Errors name the field and what is wrong.
result<bert_config> parse_config_json(std::string_view json_text);
/// Writes a Hugging Face style config.json text (architectures BertForSequenceClassification).
std::string to_config_json(const bert_config& cfg);

}  // namespace tessera::models
