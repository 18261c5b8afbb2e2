// tessera/models/model.hpp: a BERT model = config + weights + optional vocab, from a Hugging Face
// folder or a built-in preset.
//
// A Hugging Face folder holds config.json, model.safetensors (memory-mapped; tensor names with or
// without "bert."), and optionally vocab.txt and tokenizer_config.json (do_lower_case).
//
//   auto m = tessera::models::load_model("tests/data/models/tiny-odd");   // or "bert-base"
//   if (!m) { std::cerr << m.error().to_string() << "\n"; return 2; }
//   auto tok = m->make_tokenizer();   // needs a vocab (presets carry the built-in one)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tessera/common/status.hpp"
#include "tessera/models/bf16.hpp"
#include "tessera/models/config.hpp"
#include "tessera/models/embedding.hpp"
#include "tessera/models/tokenizer.hpp"
#include "tessera/models/weights.hpp"

namespace tessera::models {

struct bf16_bert_weights;
struct int8_bert_weights;

struct bert_model {
  bert_config config;
  bert_weights weights;
  std::shared_ptr<const vocabulary> vocab;  ///< nullptr when the folder has no vocab.txt
  bool lower_case = true;                   ///< from tokenizer_config.json (default true)
  std::string source;                       ///< folder path or "preset:<name>:seed=<n>"
  /// A RoBERTa / XLM-R folder's tokenizer.json (byte-level BPE or Unigram; "" when none). BERT
  /// folders tokenize with vocab.txt.
  std::string tokenizer_json;
  /// What the folder is for (embedding.hpp): a sentence-transformers folder is an embedding model
  /// (config.num_labels 0: no head), a one-label classifier a reranker, anything else a classifier.
  encoder_task task = encoder_task::classifier;
  embedding_config embedding;               ///< pooling, normalize, prompts (task embedding)
  /// What reference_forward computes in: fp32 (the reference), bf16 or int8 (set_dtype).
  dtype compute = dtype::fp32;
  /// The bf16 copy of the weights, made once by set_dtype(dtype::bf16); shared by copies.
  std::shared_ptr<const bf16_bert_weights> bf16;
  /// The int8 encoder Linear layers and calibrated scales (set_dtype(dtype::int8) or set_int8).
  std::shared_ptr<const int8_bert_weights> int8;

  /// A tokenizer over the model's vocab, max_length = max_position_embeddings.
  result<wordpiece_tokenizer> make_tokenizer() const;
};

/// Sets the forward's dtype. bf16 checks the CPU (check_dtype_supported: unsupported, with a
/// message, where bf16 would not run natively) and converts the weights once (bf16_weights.hpp);
/// fp32 keeps the bf16 copy, if any, for a later switch back. int8 checks the CPU, then (once)
/// calibrates on int8_calibration_batch and quantizes (int8_weights.hpp).
status set_dtype(bert_model& model, dtype d);

/// A preset (see preset_config) with make_preset_weights(seed) and the built-in vocab.
result<bert_model> make_preset_model(std::string_view preset, uint64_t seed = 0);

/// Loads a Hugging Face folder, or a preset when `path_or_preset` names one (seed `preset_seed`).
/// Errors name the file, the tensor and the expected shape. A model with logits only (classifier
/// or reranker): an embedding model is refused with a message saying so (use load_encoder).
result<bert_model> load_model(std::string_view path_or_preset, uint64_t preset_seed = 0);

/// Same, for every encoder task: a sentence-transformers folder (modules.json) loads as an
/// embedding model without a head (the pooler, when stored, is ignored), a one-label classifier
/// as a reranker. config.json's architectures ["BertModel"] without modules.json is refused
/// naming the missing file (the pooling is not known).
result<bert_model> load_encoder(std::string_view path_or_preset, uint64_t preset_seed = 0);

/// Writes a model as a Hugging Face folder (config.json, model.safetensors, vocab.txt if any; an
/// embedding model's sentence-transformers files, embedding.hpp).
status save_model(const bert_model& model, const std::string& dir);

}  // namespace tessera::models
