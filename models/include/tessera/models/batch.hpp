// tessera/models/batch.hpp: padding-free batches of token sequences, and the seed workload.
//
// A packed_batch concatenates the tokens of many sequences with no padding; seq_offsets has
// num_seqs + 1 entries and sequence i owns rows [seq_offsets[i], seq_offsets[i+1]).
//
//   packed_batch b;
//   b.append(tok.encode("hello world").value());
//   b.append(tok.encode_pair("a", "b").value());
//   auto logits = reference_forward(model, b);      // [b.num_seqs(), num_labels]
//
//   auto lens = seed_workload();                     // 256 lengths, 60% U[8,64] + 40% U[200,512]
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/common/random.hpp"
#include "tessera/common/status.hpp"
#include "tessera/models/config.hpp"

namespace tessera::models {

/// One tokenized sequence ([CLS] ... [SEP] [... [SEP]]).
struct encoding {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> token_type_ids;
};

/// Tokens of many sequences concatenated, no padding.
struct packed_batch {
  std::vector<int32_t> token_ids;       ///< [T]
  std::vector<int32_t> token_type_ids;  ///< [T]
  std::vector<int32_t> seq_offsets{0};  ///< [num_seqs + 1], starts at 0, non-decreasing

  int num_seqs() const { return static_cast<int>(seq_offsets.size()) - 1; }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int seq_len(int i) const { return seq_offsets[i + 1] - seq_offsets[i]; }
  int max_seq_len() const;
  /// Appends one sequence (type ids default to 0 when `e.token_type_ids` is empty).
  void append(const encoding& e);
  void append(std::span<const int32_t> ids, std::span<const int32_t> type_ids = {});
  /// Sequences [first, first + count) as their own batch.
  packed_batch slice(int first, int count) const;
};

/// Checks a batch against a model: offsets consistent, every sequence 1..max_position_embeddings
/// long, ids within vocab_size and type_vocab_size. Errors name the sequence and token.
status validate_batch(const bert_config& cfg, const packed_batch& b);

/// The seed's length mix: n draws of length_mix{.long_share = long_share} (U[200,512] with
/// probability long_share, else U[8,64]) from splitmix64(seed): the same on every machine.
std::vector<int> seed_workload(int n = 256, double long_share = 0.4, uint64_t seed = 0);

/// A batch of synthetic sequences with the given lengths: [CLS]=101 first, then ids drawn
/// deterministically from [1000, vocab_size), type ids 0. Used by benches and tests.
packed_batch synthetic_batch(const std::vector<int>& lengths, int vocab_size = 30522,
                             uint64_t seed = 1);

/// The portable PRNG behind seeded weights and workloads (tessera/common/random.hpp).
using tessera::splitmix64;

}  // namespace tessera::models
