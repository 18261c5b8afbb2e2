// What BERT's and the decoders' placements share (placement.cpp, decoder_placement.cpp): tile
// memory accounting, the program builder that pairs each send with its receive, row slices and
// the per-tile memory table.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tessera/host/placement.hpp"

namespace tessera::host::detail {

/// Bytes as the tile arena holds them (aligned, at least one line).
inline uint64_t arena_bytes(uint64_t bytes) {
  const uint64_t a = exchange::tensor_alignment;
  return std::max<uint64_t>(a, (bytes + a - 1) / a * a);
}

inline exchange::tensor_desc f32(uint32_t id, std::string name, std::vector<int64_t> shape) {
  return {id, std::move(name), exchange::dtype::f32, std::move(shape)};
}

/// Builds one replica's programs: sends and their matching receives land in the same superstep.
struct program_builder {
  std::map<uint32_t, exchange::program> progs;
  uint32_t next_tag = 1;

  exchange::superstep& step(uint32_t tile, size_t index) {
    auto& p = progs[tile];
    if (p.steps.size() <= index) p.steps.resize(index + 1);
    return p.steps[index];
  }
  void connect(uint32_t from, uint32_t to, size_t index, exchange::slice_ref src, exchange::slice_ref dst,
               bool accumulate) {
    const uint32_t tag = next_tag++;
    step(from, index).sends.push_back({to, tag, src});
    step(to, index).recvs.push_back({from, tag, dst, accumulate});
  }
  /// A superstep synchronises only where some member exchanges in it; the flag must be the same
  /// on every member (they all take part in the barrier).
  void set_sync_flags(const std::vector<uint32_t>& members) {
    size_t steps = 0;
    for (uint32_t t : members) steps = std::max(steps, progs[t].steps.size());
    for (uint32_t t : members) progs[t].steps.resize(steps);
    for (size_t i = 0; i < steps; ++i) {
      bool any = false;
      for (uint32_t t : members) any |= !progs[t].steps[i].sends.empty() || !progs[t].steps[i].recvs.empty();
      for (uint32_t t : members) progs[t].steps[i].sync = any;
    }
  }
};

/// Part `part` of `parts` of the token rows of micro-batch `micro`, rows `width` wide.
inline exchange::slice_ref part_of(uint32_t id, int64_t width, int part, int parts, int micro, int micros) {
  return {id, exchange::slice_kind::token_part, 0, static_cast<uint64_t>(width), static_cast<uint32_t>(part),
          static_cast<uint32_t>(parts), static_cast<uint32_t>(micro), static_cast<uint32_t>(micros)};
}

/// Plans R x S x W (x M) for n tiles: S at most the layers, W at most the heads.
std::vector<plan> plans_for(const models::model_shape& cfg, int n);

/// The plans compile tries for `req`: its forced plan, checked against the tile count, the layers
/// and (when lanes must not be empty, as a decoder's) the heads, or every plan_for its tiles.
result<std::vector<plan>> candidate_plans(const models::model_shape& cfg, const placement_request& req,
                                          bool lanes_need_heads);

/// The per-tile memory table (a "kv" column when some tile holds a KV cache); "fits" against cap.
std::string memory_table(const std::vector<tile_plan>& tiles, uint64_t cap);

}  // namespace tessera::host::detail
