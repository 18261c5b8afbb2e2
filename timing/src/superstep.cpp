#include "tessera/timing/superstep.hpp"

#include <cmath>
#include <cstdio>

namespace tessera::timing {

result<tile_share> make_tile_share(const ipu_preset& p, int64_t emulated_tiles) {
  if (emulated_tiles < 1) return status::invalid("the number of emulated tiles must be >= 1");
  if (emulated_tiles > p.tiles)
    return status::invalid(std::to_string(emulated_tiles) + " emulated tiles exceed the " + std::to_string(p.tiles) +
                           " tiles of preset " + p.name + "; use at most " + std::to_string(p.tiles));
  tile_share s;
  s.emulated_tiles = emulated_tiles;
  s.physical_tiles = p.tiles;
  s.physical_per_emulated = double(p.tiles) / double(emulated_tiles);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%g", s.physical_per_emulated);
  s.note = "each of " + std::to_string(emulated_tiles) + " emulated tiles models " + buf + " physical tiles of " +
           p.name + " (" + std::to_string(p.tiles) + " / " + std::to_string(emulated_tiles) +
           "): its compute and exchange are divided across them";
  if (emulated_tiles == p.tiles) s.note = "one emulated tile per physical tile of " + p.name;
  return s;
}

double exchange_cycles(const ipu_preset& p, double bytes, double physical_per_emulated) {
  if (bytes <= 0) return 0;
  return std::ceil(bytes / (p.exchange_bytes_per_cycle * p.calibration.exchange_efficiency * physical_per_emulated));
}

double sync_cycles(const ipu_preset& p) { return static_cast<double>(p.global_sync_cycles); }

double cycles_to_seconds(const ipu_preset& p, double cycles) { return cycles / p.clock_hz; }

result<superstep_cost> superstep_cycles(const ipu_preset& p, std::span<const double> compute_cycles_per_tile,
                                        std::span<const double> exchange_bytes_per_tile,
                                        double physical_per_emulated) {
  if (compute_cycles_per_tile.empty() && exchange_bytes_per_tile.empty())
    return status::invalid("superstep_cycles needs per-tile compute cycles or exchange bytes");
  if (!(physical_per_emulated >= 1)) return status::invalid("physical_per_emulated must be >= 1");
  superstep_cost c;
  for (size_t i = 0; i < compute_cycles_per_tile.size(); ++i) {
    if (compute_cycles_per_tile[i] < 0) return status::invalid("negative compute cycles for tile " + std::to_string(i));
    if (compute_cycles_per_tile[i] > c.compute_cycles) c.compute_cycles = compute_cycles_per_tile[i], c.slowest_compute_tile = i;
  }
  for (size_t i = 0; i < exchange_bytes_per_tile.size(); ++i) {
    if (exchange_bytes_per_tile[i] < 0) return status::invalid("negative exchange bytes for tile " + std::to_string(i));
    double x = exchange_cycles(p, exchange_bytes_per_tile[i], physical_per_emulated);
    if (x > c.exchange_cycles) c.exchange_cycles = x, c.slowest_exchange_tile = i;
  }
  c.sync_cycles = sync_cycles(p);
  c.total_cycles = c.compute_cycles + c.sync_cycles + c.exchange_cycles;
  c.seconds = cycles_to_seconds(p, c.total_cycles);
  return c;
}

result<superstep_cost> model_superstep(const ipu_preset& p, const tile_share& share, std::span<const tile_step> tiles,
                                       const estimator_registry& r) {
  if (tiles.empty()) return status::invalid("model_superstep needs at least one tile");
  std::vector<double> compute(tiles.size(), 0.0), bytes(tiles.size(), 0.0);
  for (size_t i = 0; i < tiles.size(); ++i) {
    for (const kernel_query& q : tiles[i].kernels) {
      auto c = estimate_tile_cycles(q, p, share.physical_per_emulated, r);
      if (!c) return c.error().with_context("tile " + std::to_string(i));
      compute[i] += *c;
    }
    bytes[i] = tiles[i].exchange_bytes_received;
  }
  return superstep_cycles(p, compute, bytes, share.physical_per_emulated);
}

}  // namespace tessera::timing
