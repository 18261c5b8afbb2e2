// tessera/timing/bert_ops.hpp: the kernel queries of one BERT forward, for timing-only runs.
//
// A BERT encoder + classification head, described by its models::model_shape (the shape
// library only, not the functional models/ library), and a batch: per-sequence lengths, either packed (no padding:
// attention per sequence, as tile programs run it) or padded to one length (as GPU batching
// does). bert_forward_ops lists the kernel_query of every kernel of one forward pass, in order;
// the GPU and IPU models cost that list, and a timing-only mode can sweep it quickly.
//
// Usage:
//   auto shape = tessera::models::shape_preset("bert-base");
//   auto batch = tessera::timing::bert_batch::uniform(32, 128);          // 32 x 128 tokens
//   auto ops = tessera::timing::bert_forward_ops(*shape, batch, tessera::timing::dtype::fp16);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/shape.hpp"
#include "tessera/timing/kernel_query.hpp"

namespace tessera::timing {

/// The modelled network: models::model_shape (tessera_model_shape, no functional code).
using models::model_shape;

/// The sequences of one batch.
struct bert_batch {
  std::vector<int64_t> seq_lens;  ///< real (unpadded) length of every sequence
  int64_t pad_to = 0;             ///< 0: packed, no padding; > 0: every sequence padded to this length

  /// `batch` sequences of length `seq`, not padded (all equal anyway).
  static bert_batch uniform(int64_t batch, int64_t seq);
  /// The lengths each sequence is computed at: seq_lens, or pad_to for every one.
  std::vector<int64_t> computed_lens() const;
  /// Tokens computed (padding included).
  int64_t computed_tokens() const;
  /// Real tokens (padding excluded).
  int64_t real_tokens() const;
  /// The same sequences padded to the longest (or to `pad_to` if larger), as GPU batching does.
  bert_batch padded_to_longest() const;
  /// invalid_argument if empty, a length is <= 0, or a length exceeds pad_to.
  status validate() const;
};

/// The kernel queries of one forward pass of `shape` (a BERT classifier) over `batch`, in execution order:
/// embed, layer_norm, then per layer linear(QKV), attention, linear(out), add, layer_norm,
/// linear(ffn in), gelu, linear(ffn out), add, layer_norm; then classifier.
result<std::vector<kernel_query>> bert_forward_ops(const model_shape& shape, const bert_batch& batch, dtype t);

/// The same forward in three parts: `head` (embed, layer_norm), `layer` (the ten queries of one
/// encoder layer, identical for every layer) and `tail` (classifier). bert_forward_ops is head,
/// then `layers` copies of layer, then tail; a cost model can cost one layer and multiply.
struct bert_forward_parts {
  std::vector<kernel_query> head, layer, tail;
  int64_t layers = 0;
};
result<bert_forward_parts> bert_forward_split(const model_shape& shape, const bert_batch& batch, dtype t);

}  // namespace tessera::timing
