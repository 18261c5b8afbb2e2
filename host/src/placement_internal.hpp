// What BERT's and the decoders' placements share (placement.cpp, decoder_placement.cpp): tile
// memory accounting, the program builder that pairs each send with its receive, row slices and
// the per-tile memory table.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tessera/common/units.hpp"
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

/// Part `part` of `parts` of the token rows of micro-batch `micro`, rows `width` wide.
inline exchange::slice_ref part_of(uint32_t id, int64_t width, int part, int parts, int micro, int micros) {
  return {id, exchange::slice_kind::token_part, 0, static_cast<uint64_t>(width), static_cast<uint32_t>(part),
          static_cast<uint32_t>(parts), static_cast<uint32_t>(micro), static_cast<uint32_t>(micros)};
}

/// What a tile is given while its plan is made: each tensor enters its memory table and becomes a
/// weight shard (cut from the model when the tile is loaded) or a program temporary.
struct tile_contents {
  tile_plan& t;
  std::vector<weight_shard>& shards;
  std::vector<exchange::tensor_desc>& temps;

  void weight(exchange::tensor_desc d, shard_kind kind, std::string source, int b = 0, int e = 0,
              weight_shard::int8_scales_ref scales = {}) {
    t.memory.push_back({d.name, "weights", arena_bytes(d.bytes())});
    shards.push_back({t.tile, std::move(d), kind, std::move(source), b, e, scales});
  }
  /// An activation (or, by `kind`, a buffer such as "exchange" or "kv").
  void act(exchange::tensor_desc d, const char* kind = "activations") {
    t.memory.push_back({d.name, kind, arena_bytes(d.bytes())});
    temps.push_back(std::move(d));
  }
};

/// The tiles of the `lanes` lanes of stage `s` in replica `r` (`L`: a layout with tile_of(r, s, w)).
template <class Layout>
std::vector<uint32_t> lanes_of(const Layout& L, int r, int s, int lanes) {
  std::vector<uint32_t> v;
  for (int q = 0; q < lanes; ++q) v.push_back(L.tile_of(r, s, q));
  return v;
}

/// Calls place(t) for every tile of layout `L`, in tile id order, with a tile_plan that names
/// where the tile sits (id, replica, stage, lane).
template <class Layout, class Fn>
void for_each_place(const Layout& L, Fn place) {
  for (int r = 0; r < L.p.replicas; ++r)
    for (int s = 0; s < L.p.stages; ++s)
      for (int w = 0; w < L.p.width; ++w) {
        tile_plan t;
        t.tile = L.tile_of(r, s, w), t.replica = r, t.stage = s, t.lane = w;
        place(t);
      }
}

/// Every tile of replica `r`, stage by stage, lane by lane.
template <class Layout>
std::vector<uint32_t> replica_tiles(const Layout& L, int r) {
  std::vector<uint32_t> v;
  for (int s = 0; s < L.p.stages; ++s)
    for (uint32_t t : lanes_of(L, r, s, L.p.width)) v.push_back(t);
  return v;
}

/// Builds one replica's programs: sends and their matching receives land in the same superstep.
struct program_builder {
  std::map<uint32_t, exchange::program> progs;
  uint32_t next_tag = 1;

  /// Program 1 on each of `members` (a replica's tiles, the barrier members): the tile's
  /// temporaries (temps[tile]) and `steps` supersteps.
  void open(const std::vector<uint32_t>& members, const std::vector<std::vector<exchange::tensor_desc>>& temps,
            size_t steps) {
    for (uint32_t t : members) {
      auto& p = progs[t];
      p.id = 1;
      p.tiles = members;
      p.temporaries = temps[t];
      p.steps.resize(steps);
    }
  }

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
  /// One layer's exchange on tile `t`, lane `w` of a stage, for micro-batch `m` of `M` (rows `H`
  /// wide), in the layer's 4 supersteps from `base`: after the attention (base) and after the
  /// FFN (base + 2) the stage's lanes reduce-scatter their partial sums by token rows, then
  /// (base + 1, base + 3) all-gather the updated rows. `lanes[q]` is the tile of lane q of this
  /// stage; `next`, the next stage's lanes at the stage's last layer (each gets this lane's rows
  /// of the micro-batch), else empty.
  void layer_exchange(uint32_t t, size_t base, int64_t H, int w, int m, int M, const std::vector<uint32_t>& lanes,
                      const std::vector<uint32_t>& next) {
    namespace ids = tensor_ids;
    const int W = static_cast<int>(lanes.size());
    auto part = [&](uint32_t id, int q) { return part_of(id, H, q, W, m, M); };
    for (size_t sub : {size_t{0}, size_t{2}}) {
      for (int q = 0; q < W; ++q)
        if (q != w) connect(t, lanes[q], base + sub, part(ids::partial, q), part(ids::partial, q), true);
      for (int q = 0; q < W; ++q)
        if (q != w) connect(t, lanes[q], base + sub + 1, part(ids::hidden, w), part(ids::hidden, w), false);
    }
    for (uint32_t peer : next) connect(t, peer, base + 3, part(ids::hidden, w), part(ids::hidden, w), false);
  }
  /// An all-reduce's exchange on tile `t`, lane `w` of a stage, in superstep `index`: the lane's
  /// partial sums of micro-batch `m` of `M` (all its rows, `H` wide) to every other lane `q` of
  /// `lanes`, into q's receive slot for lane w (tensor_ids::reduce_slot(w < q ? w : w - 1)).
  void all_reduce_exchange(uint32_t t, size_t index, int64_t H, int w, int m, int M, const std::vector<uint32_t>& lanes) {
    namespace ids = tensor_ids;
    const int W = static_cast<int>(lanes.size());
    for (int q = 0; q < W; ++q)
      if (q != w)
        connect(t, lanes[q], index, part_of(ids::partial, H, 0, 1, m, M),
                part_of(ids::reduce_slot(w < q ? w : w - 1), H, 0, 1, m, M), false);
  }
  /// Tile `t` (lane `w` of `W`) hands its share of micro-batch `m`'s rows to every lane of the
  /// next stage (`next`) in superstep `index` (the lanes' shares make the whole rows).
  void hand_on(uint32_t t, size_t index, int64_t H, int w, int W, int m, int M, const std::vector<uint32_t>& next) {
    namespace ids = tensor_ids;
    for (uint32_t peer : next)
      connect(t, peer, index, part_of(ids::hidden, H, w, W, m, M), part_of(ids::hidden, H, w, W, m, M), false);
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

/// Plans R x S x W (x M) for n tiles: S at most the layers, W at most the heads.
std::vector<plan> plans_for(const models::model_shape& cfg, int n);

/// The plans compile tries for `req`: its forced plan, checked against the tile count, the layers
/// and (when lanes must not be empty, as a decoder's) the heads, or every plan_for its tiles.
result<std::vector<plan>> candidate_plans(const models::model_shape& cfg, const placement_request& req,
                                          bool lanes_need_heads);

/// The per-tile memory table (a "kv" column when some tile holds a KV cache); "fits" against cap.
std::string memory_table(const std::vector<tile_plan>& tiles, uint64_t cap);

/// What a candidate plan's layout tells the plan search (BERT's and the decoders' layout results
/// extend it with their shards, temporaries and the like).
struct laid_out {
  std::vector<tile_plan> tiles;
  uint64_t max_bytes = 0;  ///< the fullest tile
  bool fits = false;       ///< within the tile memory (a decoder: with at least its minimum KV cache)
};

/// How search_plans words a model that fits no plan: `<need> <bytes> <where>, tiles have ...`.
struct plan_refusal {
  std::string need;        ///< e.g. "the model does not fit: the best plan needs"
  std::string where;       ///< e.g. "on its fullest tile"
  std::string table_note;  ///< after "plan R=.. S=.." in the closest plan's memory table, e.g. " with 64 KV blocks"
  std::string hopeless;    ///< the tile-count fix when no count fits
};

/// The plan search compile_bert and compile_decoder share. Every candidate plan of `req` is laid
/// out (`lay(p)`: a laid_out); those that fit are ranked by `rate(p)` (estimated tokens/s,
/// recorded in best.candidates): a plan must beat the best so far by 2%, so among near-equal
/// plans the earlier one (fewer replicas: lower latency a batch) stays, and `adopt(p, laid)` fills
/// `best` for each new leader. When none fits, an out_of_memory status names the smallest fix: the
/// closest plan's fullest tile as --tile-memory, or the fewest --tiles (one replica; replicas never
/// shrink a tile's share, and more than layers x heads tiles cannot split the model further) that
/// fit, with the closest plan's memory table.
/// `variants(p)` (optional): the forms of candidate p to try in order, the first that fits taking
/// its place (a decoder's LM head whole, then split over 2, 3, ... tiles); the tile-count fix tries
/// the first and the last.
/// `choices(p)` (optional): candidates ranked each on its own in place of p (a decoder's lanes
/// reducing by all-reduce, then by reduce-scatter + all-gather), each through `variants`.
inline std::vector<plan> plan_itself(const plan& p) { return {p}; }
template <class Lay, class Rate, class Adopt, class Variants = std::vector<plan> (*)(const plan&),
          class Choices = std::vector<plan> (*)(const plan&)>
status search_plans(const models::model_shape& cfg, const placement_request& req, bool lanes_need_heads,
                    compiled_model& best, const plan_refusal& words, Lay lay, Rate rate, Adopt adopt,
                    Variants variants = plan_itself, Choices choices = plan_itself) {
  auto listed = candidate_plans(cfg, req, lanes_need_heads);
  if (!listed.ok()) return listed.error();
  std::vector<plan> candidates;
  for (const plan& p : *listed)
    for (const plan& c : choices(p)) candidates.push_back(c);
  double best_rate = -1;
  std::string smallest_table;
  uint64_t smallest_need = UINT64_MAX;
  for (const plan& candidate : candidates) {
    for (const plan& p : variants(candidate)) {
      auto laid = lay(p);
      if (!laid.fits) {
        if (laid.max_bytes < smallest_need) {
          smallest_need = laid.max_bytes;
          smallest_table = "plan " + p.to_string() + words.table_note + ":\n" + memory_table(laid.tiles, req.tile_memory);
        }
        continue;
      }
      const double r = rate(p);
      best.candidates.push_back({p, r});
      if (best_rate < 0 || r > best_rate * 1.02) {
        best.chosen = p;
        best_rate = r;
        adopt(p, laid);
      }
      break;
    }
  }
  if (best_rate >= 0) return {};
  std::string more_tiles = words.hopeless;
  for (int n = req.tiles + 1; n <= cfg.num_layers * cfg.num_heads; ++n) {
    bool fits = false;
    for (const plan& listed_plan : plans_for(cfg, n)) {
      const auto chosen = choices(listed_plan);
      if (listed_plan.replicas != 1 || chosen.empty()) continue;
      const plan& candidate = chosen.back();  // the leanest choice (rs-ag: no receive slots)
      const auto forms = variants(candidate);
      for (const plan& p : {forms.front(), forms.back()})
        if (!fits && lay(p).fits) {
          more_tiles = "--tiles " + std::to_string(n) + " (plan " + p.to_string() + ")";
          fits = true;
        }
      if (fits) break;
    }
    if (fits) break;
  }
  return status::out_of_memory(words.need + " " + format_bytes(smallest_need) + " " + words.where + ", tiles have " +
                               format_bytes(req.tile_memory) + ". Smallest fix: --tile-memory " +
                               std::to_string(smallest_need) + " (" + format_bytes(smallest_need) + "), or " +
                               more_tiles + ", or a smaller --token-budget.\n" + smallest_table);
}

}  // namespace tessera::host::detail

namespace tessera::host {

// The names both placements (and only they: this header is theirs) read unqualified.
using namespace tessera::exchange;
namespace ids = tensor_ids;
using kid = models::kernel_id;
using detail::arena_bytes;
using detail::f32;
using detail::lanes_of;

}  // namespace tessera::host
