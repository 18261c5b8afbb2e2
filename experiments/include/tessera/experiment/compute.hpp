// tessera/experiment/compute.hpp: the real backends that compute an experiment's batches.
//
// GPU devices are computed by a real GPU baseline process: one `tessera-gpu` spawned on a private
// ipc endpoint through host::remote_backend (as tessera-host --spawn-gpu does), stopped when the
// pool is destroyed. It is not restarted: a process that is missing, exits or stops answering is
// an error of the experiment (there is no fallback to an in-process engine). Tile devices by a real tile group: local tessera-tile processes, the model
// compiled onto them (host::compile_bert) and deployed (host::tile_model), behind a
// host::tile_backend; or, with tile_processes = false, by the reference engine too (kind
// "tiles"). The computed model may be smaller than the modelled one (bert-tiny computes the
// default sample in seconds; the timing model costs bert-base): the batches are the same.
//
//   auto pool = compute_pool::start({.model = "bert-tiny", .tile_processes = true});
//   auto rows = run_seed_experiment(opts, (*pool)->provider(), (*pool)->model());
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "tessera/common/status.hpp"
#include "tessera/experiment/seed_experiment.hpp"
#include "tessera/host/remote_backend.hpp"
#include "tessera/models/bf16.hpp"

namespace tessera::host {
class tile_group;
class tile_backend;
}  // namespace tessera::host

namespace tessera::experiment {

struct compute_options {
  std::string model = "bert-tiny";  ///< preset name or Hugging Face folder
  uint64_t seed = 0;                ///< preset weights' seed
  bool tile_processes = true;       ///< tiles: a real tile group (else the reference engine)
  int tiles = 2;                    ///< tile processes
  uint64_t tile_memory = 512ull << 20;
  int tile_token_budget = 16384;    ///< compiled budget: must hold the largest (padded) batch
  int tile_max_sequences = 128;
  int omp_threads = 2;              ///< threads inside a forward (tessera-gpu, reference engine)
  models::dtype dtype = models::dtype::fp32;  ///< what the tiles and tessera-gpu compute in
  std::string gpu_binary;           ///< empty: default_bin_dir() + "/tessera-gpu"
  std::chrono::milliseconds gpu_ready_timeout{60000};  ///< the process's first pong
};

class compute_pool {
 public:
  static result<std::unique_ptr<compute_pool>> start(const compute_options& o, const log_fn& log = {});
  ~compute_pool();
  std::shared_ptr<const models::bert_model> model() const { return model_; }
  compute_provider provider();
  /// "bert-tiny computed by a tessera-gpu process (GPU rows) and 2 tessera-tile processes (tile rows)".
  std::string note() const;
  /// The spawned tessera-gpu process (its pid, endpoint, health).
  const host::remote_backend& gpu_process() const { return *gpu_; }

 private:
  compute_pool() = default;
  compute_options o_;
  std::shared_ptr<const models::bert_model> model_;
  std::unique_ptr<host::tile_group> group_;
  std::shared_ptr<backends::backend> tiles_;
  std::shared_ptr<host::remote_backend> gpu_;
};

}  // namespace tessera::experiment
