// tessera/timing/superstep.hpp: exchange, sync and superstep cycles of a BSP tile program.
//
// A superstep on an IPU-like chip is {compute; sync; exchange}: every tile computes, all tiles
// sync, then the compiled exchange moves data. Its cost is the slowest tile's compute + one
// global sync + the slowest tile's exchange (bytes / per-tile link bandwidth).
//
// When N emulated tiles (processes) stand for a chip with more physical tiles, each emulated
// tile models its share of the chip (physical / N tiles): its compute and exchange are divided
// across that share. tile_share says so in a note meant for humans (logs, reports).
//
// Usage:
//   auto share = tessera::timing::make_tile_share(mk2, 8);   // 184 physical tiles each
//   std::vector<double> compute = {1200, 1350, ...};          // cycles per emulated tile
//   std::vector<double> bytes = {65536, 70000, ...};          // exchange bytes received per tile
//   auto step = tessera::timing::superstep_cycles(mk2, compute, bytes, share->physical_per_emulated);
//   double s = step->seconds;
//   // or let the timing layer cost the kernels each tile ran:
//   std::vector<tessera::timing::tile_step> steps(8);
//   steps[0].kernels.push_back(tessera::timing::kernel_query("add", {{"elements", 4096}}));
//   auto step2 = tessera::timing::model_superstep(mk2, *share, steps);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/estimator.hpp"
#include "tessera/timing/kernel_query.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::timing {

/// How many physical tiles each emulated tile stands for.
struct tile_share {
  int64_t emulated_tiles = 1;
  int64_t physical_tiles = 1;
  double physical_per_emulated = 1;  ///< physical_tiles / emulated_tiles
  std::string note;                  ///< e.g. "each of 8 emulated tiles models 184 physical tiles of ipu-mk2 ..."
};

/// The share of a full chip of `p` each of `emulated_tiles` processes models. More emulated tiles
/// than the chip has is invalid_argument.
result<tile_share> make_tile_share(const ipu_preset& p, int64_t emulated_tiles);

/// Cycles for one (emulated) tile to receive `bytes`, over physical_per_emulated links.
double exchange_cycles(const ipu_preset& p, double bytes, double physical_per_emulated = 1);
/// Cycles of one chip-wide sync.
double sync_cycles(const ipu_preset& p);
/// cycles / clock.
double cycles_to_seconds(const ipu_preset& p, double cycles);

/// Cost of one superstep.
struct superstep_cost {
  double compute_cycles = 0;   ///< the slowest tile's compute
  double sync_cycles = 0;
  double exchange_cycles = 0;  ///< the slowest tile's exchange
  double total_cycles = 0;
  double seconds = 0;
  size_t slowest_compute_tile = 0;
  size_t slowest_exchange_tile = 0;
};

/// Superstep cost from per-tile compute cycles and per-tile exchange bytes (received). The spans
/// may differ in length (a missing entry is 0); both empty is invalid_argument.
result<superstep_cost> superstep_cycles(const ipu_preset& p, std::span<const double> compute_cycles_per_tile,
                                        std::span<const double> exchange_bytes_per_tile,
                                        double physical_per_emulated = 1);

/// What one emulated tile did in one superstep: the kernels of its compute set (with its local
/// shapes) and the bytes it received in the exchange that followed.
struct tile_step {
  std::vector<kernel_query> kernels;
  double exchange_bytes_received = 0;
};

/// Superstep cost straight from what the emulated tiles report: each tile's kernels are costed
/// with estimate_tile_cycles(q, p, share.physical_per_emulated) and summed, then combined as in
/// superstep_cycles. An unknown kernel or bad shape is the estimator's status.
result<superstep_cost> model_superstep(const ipu_preset& p, const tile_share& share, std::span<const tile_step> tiles,
                                       const estimator_registry& r = estimator_registry::builtin());

}  // namespace tessera::timing
