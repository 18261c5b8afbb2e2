// tessera/models/step_meta.hpp: the decoder step's metadata, one layout written by the host
// (host/src/tile_decoder.cpp) and read by the tile kernels (dec_embed, dec_attention, dec_logits).
// It travels each step as an int32 tensor (placement.hpp tensor_ids::step_meta):
//   [num_seqs, stride, then per sequence: start_pos, want_logits (0/1), blocks, block table
//    padded with -1 to `stride` entries]
// The reader checks every count against the tensor's size and the batch, so a tile never reads
// outside the tensor whatever bytes arrive.
//
//   step_meta_writer w(/*stride=*/max_blocks_per_seq);
//   w.add(start_pos, want_logits, block_table);       // per sequence, in batch order
//   auto m = step_meta_view::parse(w.data(), seqs);   // on the tile
//   m->start(0), m->want(0), m->blocks(0), m->table(0)[b]
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::models {

class step_meta_writer {
 public:
  explicit step_meta_writer(int32_t stride) : d_{0, stride}, stride_(stride) {}
  /// One sequence: its first position this step, whether it wants logits, the blocks it uses
  /// (at most `stride`).
  void add(int32_t start_pos, bool want_logits, std::span<const int32_t> blocks) {
    const size_t at = d_.size();
    d_.resize(at + 3 + static_cast<size_t>(stride_), -1);
    d_[at] = start_pos;
    d_[at + 1] = want_logits ? 1 : 0;
    const size_t n = std::min(blocks.size(), static_cast<size_t>(stride_));
    d_[at + 2] = static_cast<int32_t>(n);
    for (size_t b = 0; b < n; ++b) d_[at + 3 + b] = blocks[b];
    ++d_[0];
  }
  const std::vector<int32_t>& data() const { return d_; }

 private:
  std::vector<int32_t> d_;
  int32_t stride_;
};

class step_meta_view {
 public:
  /// Checks `d` holds metadata of exactly `seqs` sequences that fits inside it.
  static result<step_meta_view> parse(std::span<const int32_t> d, int64_t seqs) {
    if (d.size() < 2) return status::invalid("step metadata is too small (" + std::to_string(d.size()) + " values)");
    const int32_t n = d[0], stride = d[1];
    if (n != seqs)
      return status::invalid("step metadata names " + std::to_string(n) + " sequences, the batch has " + std::to_string(seqs));
    if (stride < 0 || 2 + uint64_t(n) * (3 + uint64_t(stride)) > d.size())
      return status::invalid("step metadata overruns its tensor (" + std::to_string(d.size()) + " values)");
    step_meta_view m{d.data(), stride};
    for (int64_t s = 0; s < n; ++s)
      if (m.start(s) < 0 || (m.seq(s)[1] != 0 && m.seq(s)[1] != 1) || m.blocks(s) < 0 || m.blocks(s) > stride)
        return status::invalid("step metadata of sequence " + std::to_string(s) + " is malformed");
    return m;
  }
  int32_t start(int64_t s) const { return seq(s)[0]; }
  bool want(int64_t s) const { return seq(s)[1] != 0; }
  int32_t blocks(int64_t s) const { return seq(s)[2]; }
  const int32_t* table(int64_t s) const { return seq(s) + 3; }

 private:
  step_meta_view(const int32_t* d, int32_t stride) : d_(d), stride_(stride) {}
  const int32_t* seq(int64_t s) const { return d_ + 2 + s * (3 + int64_t{stride_}); }
  const int32_t* d_;
  int32_t stride_;
};

}  // namespace tessera::models
