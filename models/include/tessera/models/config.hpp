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

/// Which Hugging Face encoder family a config.json names. RoBERTa and XLM-RoBERTa are BERT's layer
/// stack with three differences: positions start at pad_token_id + 1 and count only non-pad tokens
/// (HF create_position_ids_from_input_ids; a pad token sits at position pad_token_id), one token
/// type, and the classification head dense + tanh + out_proj on the <s> token, which is BERT's
/// pooler + classifier under other tensor names (classifier.dense, classifier.out_proj).
enum class encoder_family : uint8_t { bert, roberta, xlm_roberta };
/// "bert", "roberta", "xlm-roberta" (config.json's model_type).
std::string_view family_model_type(encoder_family f);

/// A post-LN BERT encoder with a tanh pooler and a linear classifier.
struct bert_config : model_shape {
  std::vector<std::string> id2label;   ///< num_labels names ("LABEL_0", ... when not given)
  encoder_family family = encoder_family::bert;
  int pad_token_id = 0;                ///< HF pad_token_id (RoBERTa's padding_idx: 1)

  /// The position of a sequence's first non-pad token: 0 (BERT) or pad_token_id + 1 (RoBERTa).
  int position_offset() const { return family == encoder_family::bert ? 0 : pad_token_id + 1; }
  /// The pad id the embedding's positions skip (RoBERTa), or -1 (BERT: positions 0, 1, 2, ...).
  int position_pad_id() const { return family == encoder_family::bert ? -1 : pad_token_id; }
  /// The longest sequence the position table holds: max_position_embeddings - position_offset().
  int max_sequence_length() const { return max_position_embeddings - position_offset(); }

  /// The shape is valid and a BERT classifier, and id2label has num_labels names.
  status validate() const;
};

/// A built-in preset (shape_preset) with labels LABEL_0, LABEL_1. Unknown name ->
/// status::invalid listing the known ones.
result<bert_config> preset_config(std::string_view name);

/// Parses a Hugging Face BertConfig, RobertaConfig or XLMRobertaConfig JSON text. Errors name the
/// field and what is wrong; another model_type or architectures class is refused naming those
/// supported (supported_encoder_classes).
result<bert_config> parse_config_json(std::string_view json_text);
/// "BertForSequenceClassification, BertModel, RobertaForSequenceClassification, ...".
std::string supported_encoder_classes();
/// The HF class an encoder config is saved as: <Family>ForSequenceClassification, or <Family>Model
/// when it has no head (num_labels 0).
std::string encoder_hf_class(const bert_config& cfg);
/// Writes a Hugging Face style config.json text (model_type and architectures of its family).
std::string to_config_json(const bert_config& cfg);

}  // namespace tessera::models
