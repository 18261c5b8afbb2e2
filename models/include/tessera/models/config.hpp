// tessera/models/config.hpp: the shape of a BERT-for-sequence-classification model.
//
// A bert_config comes from a Hugging Face config.json (parse_config_json) or from a built-in
// preset (bert-tiny, bert-mini, bert-small, bert-base, bert-large).
//
//   auto cfg = tessera::models::preset_config("bert-base");
//   if (!cfg) { std::cerr << cfg.error().to_string(); return 2; }
//   int d = cfg->head_dim();   // 64
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::models {

/// Hyper-parameters of a post-LN BERT encoder with a tanh pooler and a linear classifier.
struct bert_config {
  int hidden_size = 768;               ///< width of the residual stream
  int num_layers = 12;                 ///< HF num_hidden_layers
  int num_heads = 12;                  ///< HF num_attention_heads; divides hidden_size
  int intermediate_size = 3072;        ///< FFN width
  int max_position_embeddings = 512;   ///< longest sequence (tokens, [CLS]/[SEP] included)
  int vocab_size = 30522;
  int type_vocab_size = 2;
  float layer_norm_eps = 1e-12f;
  int num_labels = 2;
  std::vector<std::string> id2label;   ///< num_labels names ("LABEL_0", ... when not given)
  std::string hidden_act = "gelu";     ///< "gelu" (exact erf), "gelu_new"/"gelu_pytorch_tanh", "relu"

  /// hidden_size / num_heads.
  int head_dim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
  /// Every size positive, heads divide hidden, id2label has num_labels names, known activation.
  status validate() const;
  /// Weights in the model (embeddings, encoder, pooler, classifier).
  int64_t parameter_count() const;
};

/// A built-in preset by name: bert-tiny (2 layers, 128 hidden, 2 heads), bert-mini (4/256/4),
/// bert-small (4/512/8), bert-base (12/768/12), bert-large (24/1024/16); FFN 4x hidden,
/// vocab 30522, 512 positions, 2 labels. Unknown name -> status::invalid listing the known ones.
result<bert_config> preset_config(std::string_view name);
/// Names accepted by preset_config, smallest first.
std::vector<std::string> preset_names();

/// Parses a Hugging Face BertConfig JSON text. Errors name the field and what is wrong.
result<bert_config> parse_config_json(std::string_view json_text);
/// Writes a Hugging Face style config.json text (architectures BertForSequenceClassification).
std::string to_config_json(const bert_config& cfg);

}  // namespace tessera::models
