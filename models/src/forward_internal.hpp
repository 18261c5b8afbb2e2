// What forward.cpp shares with the embedding forward: the padded path's chunks.
#pragma once

#include <cstdint>
#include <functional>

#include "tessera/models/batch.hpp"
#include "tessera/models/bf16.hpp"
#include "tessera/models/model.hpp"

namespace tessera::models {
struct int8_ranges;
}

namespace tessera::models::detail {

/// While set (calibrate_int8, this thread only), the fp32 encoder records max |x| of each
/// Linear's input per layer and site into it.
void set_int8_observer(int8_ranges* r);

/// One padded batch's final hidden states: `count` sequences from `first`, each padded to
/// max_len rows; exactly one of hidden (fp32) and hidden_bf16 is set, [num_rows, hidden].
struct padded_chunk {
  int first = 0, count = 0, max_len = 0;
  int64_t num_rows = 0;
  const float* hidden = nullptr;
  const bfloat16* hidden_bf16 = nullptr;
  const int32_t* row_starts = nullptr;  ///< [count]: i * max_len
  const int32_t* lengths = nullptr;     ///< [count]
};

/// Runs the padded encoder over batches of batch_size (0 = all) in order, calling `sink` per batch.
void for_each_padded_chunk(const bert_model& m, const packed_batch& b, int batch_size,
                           const std::function<void(const padded_chunk&)>& sink);

}  // namespace tessera::models::detail
