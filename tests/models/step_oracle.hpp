// The decoder-step oracle the decoder test and the decoder fuzzer share: whether one entry of a
// step batch is valid, decided apart from decoder_model::step's own checks.
#pragma once

#include <cstdint>

#include "tessera/models/decoder.hpp"

namespace tessera::models::testing {

/// `st` on shape `c` over a paged cache of `nblocks` blocks of `bt` tokens: tokens present and in
/// the vocabulary, positions within max_position_embeddings, a block table that covers them with
/// blocks of the cache.
inline bool step_entry_valid(const seq_step& st, const model_shape& c, int bt, int nblocks) {
  const int64_t n = static_cast<int64_t>(st.tokens.size());
  const int64_t end = int64_t{st.start_pos} + n;
  bool v = n > 0 && st.start_pos >= 0 && end <= c.max_position_embeddings;
  for (int32_t t : st.tokens) v = v && t >= 0 && t < c.vocab_size;
  const int64_t need = (end + bt - 1) / bt;
  v = v && static_cast<int64_t>(st.block_table.size()) >= need;
  for (int64_t i = 0; v && i < need; ++i) v = st.block_table[i] >= 0 && st.block_table[i] < nblocks;
  return v;
}

}  // namespace tessera::models::testing
