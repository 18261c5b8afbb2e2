// tessera/host/tile_model.hpp: a compiled BERT deployed on a tile group.
//
// deploy() streams each tile only its shards (one tile's shards materialised at a time, so the
// host never holds a second copy of the model) and loads the programs; run() sends a packed
// batch's token ids to the first stage of a replica, runs the static program, and returns the
// logits with the run's counters. Replicas run concurrently from different threads.
//
//   auto d = deploy_bert(model, req);                      // compile, start the tiles, deploy
//   auto out = d->model->run(/*replica=*/0, batch);         // out->logits: [num_seqs, num_labels]
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "tessera/host/placement.hpp"
#include "tessera/host/tile_group.hpp"
#include "tessera/models/batch.hpp"
#include "tessera/models/model.hpp"

namespace tessera::host {

struct tile_batch_result {
  std::vector<float> logits;       ///< [num_seqs, num_labels]; an embedding model's pooled vectors [num_seqs, hidden]
  /// With run(..., token_rows = n): the last layer's rows of the batch's first n tokens, packed
  /// [n, hidden], from the head tile; a bf16 model's travel as bf16 and are widened here.
  std::vector<float> token_rows;
  double wall_seconds = 0;
  int64_t supersteps = 0;
  uint64_t bytes_exchanged = 0;    ///< sent by all tiles of the replica
  /// Per tile: memory high-water reported by the tile after the run.
  std::map<uint32_t, uint64_t> memory_high_water;
  std::map<uint32_t, std::vector<exchange::superstep_counters>> counters;
};

/// Cuts one shard's data from a model's weights.
using shard_cutter = std::function<result<std::vector<float>>(const weight_shard&)>;
/// Streams tile t's shards, materialised in groups of at most 256 MiB (the host never holds a
/// second copy of the model, nor a whole tile's part); progress(bytes sent so far, total).
status stream_shards(tile_group& group, const compiled_model& compiled, uint32_t t, const shard_cutter& cut,
                     uint64_t& done, const std::function<void(uint64_t, uint64_t)>& progress, uint64_t total);
/// A tile that came back empty: its shards again, then its programs.
status restore_shards_and_programs(tile_group& group, const compiled_model& compiled, uint32_t tile,
                                   const shard_cutter& cut);

class tile_model {
 public:
  /// progress(bytes sent, total bytes) while weights stream.
  static result<std::unique_ptr<tile_model>> deploy(tile_group& group, compiled_model compiled,
                                                    const models::bert_model& model,
                                                    const std::function<void(uint64_t, uint64_t)>& progress = {});
  /// Runs one packed batch on `replica`. Fails (invalid_argument) if the batch exceeds the token
  /// budget or the sequence limit, or with the tile group's status if a tile fails. With
  /// token_rows > 0, the head tile also sends the last-layer rows of the first token_rows tokens
  /// (an embedding model's /embed_all; a padded batch's filler rows after them stay on the tile);
  /// with 0 only the logits or pooled vectors leave the tiles.
  result<tile_batch_result> run(int replica, const models::packed_batch& batch, int64_t token_rows = 0);

  /// Streams a tile's shards again and reloads its programs, after the tile came back empty
  /// (tile_group::restart_tile, or a remote tile relaunched). Other replicas keep running.
  status restore_tile(uint32_t tile);
  /// The tiles of one replica, every stage.
  std::vector<uint32_t> replica_tiles(int replica) const;

  const compiled_model& compiled() const { return compiled_; }
  tile_group& group() { return group_; }

 private:
  tile_model(tile_group& g, compiled_model c, models::bert_model m)
      : group_(g), compiled_(std::move(c)), model_(std::move(m)) {}
  tile_group& group_;
  compiled_model compiled_;
  models::bert_model model_;  // shares the weights' storage: cheap, and kept for recovery
};

/// The barrier cost a plan was ranked with (machine_model::sync_seconds): measured on the tiles
/// started for it (measure_barrier), or given (the request's machine model: its constant, or a
/// value a tool forces for reproducibility, e.g. a bench's --barrier-us).
struct ranking_barrier {
  double seconds = 0;      ///< charged a superstep
  bool measured = false;
  double given = 0;        ///< the request's sync_seconds before measuring
  int supersteps = 0;      ///< measured: empty supersteps of the probe
  uint32_t tiles = 0;      ///< measured: on this many tiles
  /// "barrier 48.5 us a superstep, measured on these 2 tiles (median of 16 empty supersteps; the
  /// constant was 150 us)" or "barrier 150 us a superstep, given (not measured)".
  std::string describe() const;
};

/// A group started for a plan and the plan compiled for it, ranked with the group's barrier.
struct ranked_start {
  std::unique_ptr<tile_group> group;
  compiled_model compiled;
  ranking_barrier barrier;
};
/// compile_bert or compile_decoder bound to a model.
using plan_compiler = std::function<result<compiled_model>(const placement_request&)>;

/// The one way a tool starts tiles for a plan ranked with the barrier they pay: with `measure`,
/// compile(req) once with req.machine.sync_seconds (what does not fit is refused before any tile
/// starts), tile_group::start(group) with the request's tile count and tile memory,
/// measure_barrier on it, and compile(req) again with req.machine.sync_seconds = the measured
/// barrier; without, compile(req) as given, then start. A failure says which step failed; a group
/// already started is stopped.
result<ranked_start> start_ranked(const placement_request& req, tile_group_config group, const plan_compiler& compile,
                                  bool measure = true);

/// A tile group and the model deployed on it. The model refers to the group: `model` is destroyed
/// first (members go in reverse order), and a caller moving them apart keeps the group alive as long.
struct tile_deployment {
  std::unique_ptr<tile_group> group;
  std::unique_ptr<tile_model> model;
  ranking_barrier barrier;  ///< what the plan was ranked with
};

struct deploy_hooks {
  /// Called with the compiled model before its weights stream (tessera-host prints the plan).
  std::function<void(const compiled_model&)> compiled;
  /// progress(bytes sent, total bytes) while weights stream.
  std::function<void(uint64_t, uint64_t)> progress;
  /// Rank the plan with the barrier measured on the started tiles (start_ranked) rather than
  /// req.machine.sync_seconds.
  bool measure_barrier = false;
};

/// compile_bert(model.config, req) and tile_group::start(group) with the request's tile count and
/// tile memory (start_ranked: with hooks.measure_barrier the plan is ranked with the barrier
/// measured on the started tiles), tile_model::deploy: the one way from a model to a running tile
/// group. A failure says which step failed; a group already started is stopped.
result<tile_deployment> deploy_bert(const models::bert_model& model, const placement_request& req,
                                    tile_group_config group = {}, const deploy_hooks& hooks = {});

}  // namespace tessera::host
