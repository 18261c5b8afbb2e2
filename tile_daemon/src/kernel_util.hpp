// Helpers of the model kernels (bert_kernels.cpp, decoder_kernels.cpp): the rows and sequences
// of the micro-batch a kernel call works on, and shape checks that fail as a status.
#pragma once

#include <string>
#include <vector>

#include "tessera/tile/kernel_registry.hpp"

namespace tessera::tile::detail {

struct micro_view {
  int64_t r0 = 0, r1 = 0;          // rows
  int64_t s0 = 0, s1 = 0;          // sequences
  std::vector<int32_t> offsets;    // of sequences [s0, s1], rebased to r0
};

inline result<micro_view> micro_of(const kernel_args& a, const models::micro_batch& mb) {
  if (!a.ctx.rows) return status::invalid("no batch rows in the kernel context");
  const uint32_t micro = mb.micro, micros = mb.micros;
  if (micros == 0 || micro >= micros) return status::invalid("micro-batch index out of range");
  micro_view v;
  auto rows = a.ctx.rows->micro_rows(micro, micros);
  auto seqs = a.ctx.rows->micro_seqs(micro, micros);
  v.r0 = rows.begin, v.r1 = rows.end, v.s0 = seqs.begin, v.s1 = seqs.end;
  for (int64_t s = v.s0; s <= v.s1 && !a.ctx.seq_offsets.empty(); ++s)
    v.offsets.push_back(a.ctx.seq_offsets[static_cast<size_t>(s)] - static_cast<int32_t>(v.r0));
  return v;
}

inline status need_rows(const tile_tensor& t, int64_t rows, int64_t width) {
  if (t.desc.shape.size() != 2 || t.desc.shape[0] < rows || t.desc.shape[1] != width)
    return status::invalid("tensor '" + t.desc.name + "' must be [>=" + std::to_string(rows) + ", " +
                           std::to_string(width) + "]");
  return ok_status();
}

}  // namespace tessera::tile::detail
