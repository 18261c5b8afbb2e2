// tessera/exchange/fault_plan.hpp: faults injected on purpose, deterministic under a seed.
//
// A plan is JSON (a file, or inline on the command line) listing faults. Every kind but kill_gpu
// is applied by each tile in its own process and exchange layer (tessera-tile --faults; a
// tessera-host that launches its tiles passes them on); kill_gpu by tessera-host --faults to the
// tessera-gpu process it spawned. Batches are counted per tile incarnation from 1; kill and
// stall happen only in a tile's first incarnation, so a restarted tile does not repeat them.
// A stall (at the start of superstep `superstep` of batch `batch`) freezes the tile: no
// heartbeats, no answers, no exchange, for `seconds`. kill_gpu kills spawned GPU process `gpu`
// (its --spawn-gpu index, 0 by default) once it has answered `batch` batches.
//
//   {"seed": 7, "faults": [
//     {"kind": "kill",      "tile": 2, "batch": 3, "superstep": 5},
//     {"kind": "stall",     "tile": 1, "batch": 2, "seconds": 1.5, "superstep": 0},
//     {"kind": "slow",      "tile": 0, "factor": 3},
//     {"kind": "delay",     "from": 0, "to": 1, "ms": 5, "jitter_ms": 1},
//     {"kind": "drop",      "fraction": 0.05},
//     {"kind": "duplicate", "fraction": 0.1},
//     {"kind": "reorder",   "fraction": 0.1},
//     {"kind": "corrupt",   "fraction": 0.05, "tile": 3},
//     {"kind": "partition", "tiles": [0, 1], "batch": 2, "batches": 2},
//     {"kind": "kill_gpu",  "batch": 4, "gpu": 0}]}
//
//   auto plan = parse_fault_plan(text);   // result<fault_plan>; errors name the fault and field
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::exchange {

enum class fault_kind { kill, stall, slow, delay, drop, duplicate, reorder, corrupt, partition, kill_gpu };
inline constexpr size_t fault_kind_count = 10;

std::string_view fault_kind_name(fault_kind k);
/// True for kinds a tile applies itself (all but kill_gpu, which tessera-host applies).
bool applied_by_tile(fault_kind k);

/// Faults injected so far, one count per kind (index: the fault_kind's value). Tiles report
/// theirs (per incarnation) in heartbeats and run replies; what each count means:
/// slow: compute sets slowed; delay/drop/duplicate/reorder/corrupt/partition: slices sent
/// delayed, dropped, twice, late, with a flipped byte, or dropped at the cut; stall: stalls.
using fault_counts = std::array<uint64_t, fault_kind_count>;
/// "drop 3, corrupt 1" (non-zero counts only), or "none".
std::string describe_fault_counts(const fault_counts& c);

struct fault {
  fault_kind kind = fault_kind::drop;
  int tile = -1;              ///< the tile it applies to (-1: every tile); for delay: the sender
  int to = -1;                ///< delay: the receiver (-1: every peer)
  int64_t batch = 0;          ///< kill/stall/partition: the batch (per-incarnation count, from 1); 0 = any
  int64_t batches = 1;        ///< partition: how many batches it lasts
  int64_t superstep = 0;      ///< kill: at the start of this superstep
  double seconds = 0;         ///< stall: how long
  double factor = 1;          ///< slow: compute takes this many times as long
  double ms = 0, jitter_ms = 0;  ///< delay per message
  double fraction = 0;        ///< drop/duplicate/reorder/corrupt: share of messages
  std::vector<int> tiles;     ///< partition: one side (the rest is the other)
  int gpu = 0;                ///< kill_gpu: which spawned tessera-gpu (--spawn-gpu index)
};

struct fault_plan {
  uint64_t seed = 1;
  std::vector<fault> faults;
  bool empty() const { return faults.empty(); }
  /// The faults a given tile applies (tile-side kinds whose `tile` is it or -1, plus partitions).
  fault_plan for_tile(int tile) const;
  /// The faults tiles apply (every tile's), or the ones tessera-host applies (kill_gpu).
  fault_plan tile_side() const;
  fault_plan host_side() const;
  /// invalid_argument naming the first fault that names a tile outside a group of `tiles`
  /// (it would never fire).
  status check_tiles(int tiles) const;
  std::string to_json() const;
};

/// Parses a plan (JSON text). Unknown kinds, wrong types, fractions outside [0,1], negative
/// durations: invalid_argument naming the fault's index and field.
result<fault_plan> parse_fault_plan(const std::string& json_text);
/// Reads a file, or parses inline JSON when `spec` starts with '{'.
result<fault_plan> load_fault_plan(const std::string& spec);

}  // namespace tessera::exchange
