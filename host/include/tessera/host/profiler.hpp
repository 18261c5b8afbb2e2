// tessera/host/profiler.hpp: Chrome trace / Perfetto timelines, memory report and a text summary
// of batches run on tiles.
//
// A profiler belongs to one compiled model. Every batch a replica runs is recorded with its
// per-tile, per-superstep counters; the profiler also models the same batch on an IPU preset
// (program_timing.hpp). From that it writes
//   * a trace (Chrome JSON object format, open in https://ui.perfetto.dev or chrome://tracing):
//       pid 1 "tiles (wall clock)": one track per tile; per superstep a "step k" slice holding
//             compute, exchange and sync slices, rebuilt by accumulating the tile's counters
//             from the batch start (the emulator's order: compute, exchange, sync);
//       pid 2 "tiles (modelled ...)": the same tiles in modelled time (the chip's order:
//             compute, sync, exchange); each replica's batches start at their wall start or
//             when its previous modelled batch ended, whichever is later;
//       pid 3 "backends": one track per backend replica with a slice per batch (sequences,
//             tokens, wall and modelled ms), and one with the modelled batch;
//   * a per-tile memory report (plan: weights, activations, exchange; free = capacity - used;
//     the high-water the tiles reported);
//   * a summary: top supersteps by wall and by modelled time (slowest tile and its kernels) and
//     load imbalance (max / mean compute across a replica's tiles).
//
//   auto prof = profiler::create(compiled, {.preset = "ipu-mk2", .tile_memory = 256 << 20});
//   double t0 = (*prof)->now();
//   auto r = model->run(0, batch);
//   (*prof)->record(0, batch, *r, t0);
//   (*prof)->write_trace("/tmp/t.json");
//   std::cout << (*prof)->summary();
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/common/status.hpp"
#include "tessera/exchange/protocol.hpp"
#include "tessera/host/placement.hpp"
#include "tessera/host/program_timing.hpp"
#include "tessera/host/tile_group.hpp"
#include "tessera/host/tile_model.hpp"
#include "tessera/models/batch.hpp"

namespace tessera::host {

struct profiler_options {
  std::string preset = "ipu-mk2";  ///< IPU preset name or path (timing::load_ipu_preset)
  uint64_t tile_memory = 0;        ///< capacity of each emulated tile; 0 = unknown (free not shown)
  program_timing_options timing;
};

/// One batch as run on one replica.
struct batch_record {
  std::string backend = "tiles";
  int replica = 0;
  uint64_t batch_id = 0;
  std::vector<int32_t> seq_lengths;
  double start_seconds = 0;  ///< since the profiler's epoch (profiler::now())
  double wall_seconds = 0;
  std::map<uint32_t, std::vector<exchange::superstep_counters>> counters;  ///< tile -> per superstep
  std::map<uint32_t, uint64_t> memory_high_water;
  nlohmann::json args = nlohmann::json::object();  ///< more of the batch slice's args (a decoder step's mix, KV)
};

/// One row of the memory report.
struct tile_memory_row {
  uint32_t tile = 0;
  uint64_t weights = 0, activations = 0, exchange = 0;  ///< from the plan
  uint64_t used = 0;                                    ///< weights + activations + exchange
  uint64_t capacity = 0;                                ///< 0 when unknown
  int64_t free = 0;                                     ///< capacity - used (negative: over)
  uint64_t high_water = 0;                              ///< highest the tile reported; 0 = none
};

/// One superstep of one batch, ranked by the summary.
struct step_rank {
  uint64_t batch_id = 0;
  int replica = 0;
  size_t step = 0;
  double seconds = 0;               ///< wall: the longest tile (compute + exchange + sync); modelled: the superstep
  uint32_t slowest_tile = 0;        ///< the tile with the most compute (the one the others waited for)
  double slowest_compute_seconds = 0;
  std::vector<std::string> kernels; ///< that tile's kernels in this superstep
};

/// max / mean compute across a replica's tiles.
struct load_imbalance {
  double wall = 0;      ///< overall: sum over supersteps of max / sum of mean (1 = balanced)
  double modelled = 0;
  std::vector<std::pair<step_rank, double>> worst_wall;  ///< supersteps with the most time lost, with their ratio
};

class profiler {
 public:
  /// Loads the preset; invalid_argument / not_found as timing::load_ipu_preset.
  static result<std::unique_ptr<profiler>> create(const compiled_model& c, profiler_options o = {});
  profiler(compiled_model c, timing::ipu_preset preset, profiler_options o);

  /// Seconds since the profiler was made (steady clock).
  double now() const;
  /// Records a batch and models it. invalid_argument if the replica does not exist.
  status record(batch_record b);
  /// Convenience for tile_model::run results; `start_seconds` from now() before the run.
  status record(int replica, const models::packed_batch& batch, const tile_batch_result& r, double start_seconds,
                const std::string& backend = "tiles");
  /// The same for a tile_group run_result (batch_id and counters from it).
  status record(int replica, const std::vector<int32_t>& seq_lengths, const run_result& r, double start_seconds,
                const std::string& backend = "tiles");

  size_t batches() const;
  /// The modelled timing of recorded batch i.
  program_timing modelled(size_t i) const;
  const timing::tile_share& share() const { return share_; }

  /// The trace as a JSON object {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
  nlohmann::json trace() const;
  status write_trace(const std::string& path) const;

  std::vector<tile_memory_row> memory_report() const;
  std::string memory_text() const;

  /// Supersteps of all recorded batches, slowest first.
  std::vector<step_rank> slowest_wall(size_t top = 5) const;
  std::vector<step_rank> slowest_modelled(size_t top = 5) const;
  load_imbalance imbalance(size_t worst = 5) const;
  /// Share note, slowest supersteps (wall and modelled), load imbalance, memory report.
  std::string summary(size_t top = 5) const;

 private:
  struct entry {
    batch_record rec;
    program_timing model;
    double modelled_start_us = 0;
  };
  std::vector<std::string> kernels_of(int replica, uint32_t tile, size_t step) const;
  compiled_model compiled_;
  timing::ipu_preset preset_;
  profiler_options opt_;
  timing::tile_share share_;
  tensor_table tensors_;
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::vector<entry> entries_;
  std::map<int, double> modelled_end_us_;  ///< per replica
};

}  // namespace tessera::host
