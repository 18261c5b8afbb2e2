// tessera/models/embedding.hpp: what an encoder is for (classifier, embedding model, reranker),
// sentence-transformers' pooling, and the embedding forward.
//
// An embedding model is a sentence-transformers folder: a BertModel without a head (config.json,
// model.safetensors), modules.json listing Transformer, Pooling (1_Pooling/config.json: one mode)
// and optionally Normalize, and config_sentence_transformers.json's prompts. A reranker is a
// cross-encoder: a BertForSequenceClassification with one label. load_model (model.hpp) reads the
// task from the folder; bert_model::task says which it found.
//
//   auto m = tessera::models::load_model("tests/data/models/tiny-embed");
//   // m->task == encoder_task::embedding, m->embedding.pooling == pooling_mode::mean
//   std::vector<float> v = reference_embed(*m, batch);   // [num_seqs, hidden], not normalized
//   l2_normalize(v.data(), batch.num_seqs(), m->config.hidden_size);
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::models {

struct bert_model;
struct packed_batch;

/// What an encoder's output means.
enum class encoder_task : uint8_t {
  classifier,  ///< logits over num_labels >= 2 labels (BertForSequenceClassification)
  embedding,   ///< a pooled vector per sequence (a sentence-transformers folder; no head)
  reranker,    ///< one relevance score per (query, text) pair (a one-label cross-encoder)
};
/// "classifier", "embedding", "reranker".
std::string_view task_name(encoder_task t);

/// sentence-transformers' Pooling modes (one at a time).
enum class pooling_mode : uint8_t {
  cls,            ///< the first token's vector
  mean,           ///< the mean of the sequence's token vectors
  max,            ///< the elementwise max over the tokens
  mean_sqrt_len,  ///< the sum divided by sqrt(length)
  lasttoken,      ///< the last token's vector
};
/// "cls", "mean", "max", "mean_sqrt_len", "lasttoken".
std::string_view pooling_name(pooling_mode p);
/// The mode of a name pooling_name gives, or nullopt.
std::optional<pooling_mode> pooling_from_name(std::string_view name);

/// An embedding model's sentence-transformers configuration.
struct embedding_config {
  pooling_mode pooling = pooling_mode::cls;
  bool normalize = false;                      ///< modules.json lists a Normalize module
  std::map<std::string, std::string> prompts;  ///< config_sentence_transformers.json "prompts"
  std::string default_prompt_name;             ///< "" when none
};

/// Reads modules.json, the Pooling module's config.json and config_sentence_transformers.json
/// from a sentence-transformers folder of a `hidden_size` model. Modules tessera does not run
/// (Dense, a second Transformer, ...), more than one pooling mode, weightedmean, include_prompt
/// false and a word_embedding_dimension other than hidden_size are refused by name.
result<embedding_config> read_sentence_transformers(const std::filesystem::path& dir, int hidden_size);

/// Writes modules.json, 1_Pooling/config.json, 2_Normalize/ (when normalize) and
/// config_sentence_transformers.json into `dir`, so read_sentence_transformers reads `cfg` back.
status write_sentence_transformers(const std::filesystem::path& dir, const embedding_config& cfg, int hidden_size);

/// Pools each sequence's token vectors: hidden is [rows, ld] (the first `h` columns used);
/// sequence i owns rows [row_starts[i], row_starts[i] + lengths[i]) (lengths >= 1). out is
/// [num_seqs, h]. Accumulates in double for mean and mean_sqrt_len.
void pool_rows(const float* hidden, int64_t ld, int64_t h, const int32_t* row_starts, const int32_t* lengths,
               int num_seqs, pooling_mode mode, float* out);

/// Divides each of `rows` vectors of `n` by its L2 norm (a zero vector stays zero).
void l2_normalize(float* x, int64_t rows, int64_t n);

/// Pooled vectors [num_seqs, hidden] of a packed batch with the model's pooling (or `mode` when
/// given), in the model's dtype, before normalization. The batch must pass validate_batch.
std::vector<float> reference_embed(const bert_model& model, const packed_batch& batch,
                                   std::optional<pooling_mode> mode = std::nullopt);

/// The same through padded_forward's path (batches of batch_size, 0 = all, padded to their longest).
std::vector<float> padded_embed(const bert_model& model, const packed_batch& batch, int batch_size = 0,
                                std::optional<pooling_mode> mode = std::nullopt);

}  // namespace tessera::models
