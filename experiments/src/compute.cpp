// Real backends for computed runs. See compute.hpp.
#include "tessera/experiment/compute.hpp"

#include <cstdlib>
#include <filesystem>

#include "tessera/backends/reference_backend.hpp"
#include "tessera/host/launcher.hpp"

#include "tessera/host/tile_backend.hpp"
#include "tessera/host/tile_group.hpp"
#include "tessera/host/tile_model.hpp"
#include "tessera/models/kernels.hpp"

namespace tessera::experiment {

result<std::unique_ptr<compute_pool>> compute_pool::start(const compute_options& o, const log_fn& log) {
  std::unique_ptr<compute_pool> p(new compute_pool());
  p->o_ = o;
  // The caller's thread runs the reference checks (one sequence at a time): one OpenMP thread, so
  // no second team spins on the cores the tessera-gpu / tessera-tile processes compute on.
  models::set_num_threads(1);
  auto loaded = models::load_model(o.model, o.seed);
  if (!loaded) return loaded.error();
  p->model_ = std::make_shared<const models::bert_model>(std::move(*loaded));
  // The GPU baseline process loads its model while the tile group starts; it must answer a ping
  // before the pool is returned.
  host::remote_backend_config rc;
  rc.info = {.name = "gpu0", .kind = "gpu", .max_sequence_length = p->model_->config.max_sequence_length(),
             .num_labels = p->model_->config.num_labels};
  rc.spawn_binary = o.gpu_binary.empty() ? host::default_bin_dir() + "/tessera-gpu" : o.gpu_binary;
  rc.spawn_args = {"--model", o.model, "--seed", std::to_string(o.seed), "--name", "gpu0", "--threads", "1",
                   "--omp-threads", std::to_string(o.omp_threads), "--dtype", std::string(models::dtype_name(o.dtype))};
  rc.compute = o.dtype;  // every batch asks for it: a process in another dtype refuses, naming both
  rc.restart = false;  // a process that dies fails the run; it is not silently replaced
  rc.batch_timeout = std::chrono::minutes(10);  // bert-base batches of 32x512 on a loaded machine
  // The process computes one batch at a time while this one waits; OpenMP threads that spin
  // between batches (the default active policy) take the cores from it on a shared machine
  // (measured: 5x slower per batch). The user's own OMP_WAIT_POLICY is kept.
  ::setenv("OMP_WAIT_POLICY", "passive", 0);
  auto ep = host::make_local_ipc_endpoint("gpu0");
  if (!ep) return ep.error().with_context("the tessera-gpu process's endpoint");
  rc.endpoint = *ep;
  auto gpu = host::remote_backend::start(rc);
  if (!gpu) {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(ep->substr(6)).parent_path(), ec);
    return gpu.error().with_context("starting the tessera-gpu process that computes the GPU rows");
  }
  p->gpu_ = std::move(*gpu);
  auto gpu_ready = [&]() -> status {
    if (p->gpu_->wait_ready(o.gpu_ready_timeout)) {
      if (log) log("gpu0: tessera-gpu process " + std::to_string(p->gpu_->child_pid()) + " at " + rc.endpoint);
      return ok_status();
    }
    auto reps = p->gpu_->replicas();
    return status::peer_failed("the tessera-gpu process (" + rc.spawn_binary + ", --model " + o.model + ") at " +
                               rc.endpoint + " did not answer within " +
                               std::to_string(o.gpu_ready_timeout.count()) + " ms" +
                               (reps.empty() || reps[0].detail.empty() ? "" : ": " + reps[0].detail));
  };
  if (!o.tile_processes) {
    // The reference engine computes in the run's dtype; model_ stays fp32: it is what answers are
    // checked against.
    auto computing = p->model_;
    if (o.dtype != models::dtype::fp32) {
      models::bert_model m = *p->model_;
      if (auto st = models::set_dtype(m, o.dtype); !st.ok()) return st;
      computing = std::make_shared<const models::bert_model>(std::move(m));
    }
    p->tiles_ = backends::make_reference_backend(
        computing, {.name = "tiles0", .kind = "tiles", .threads = 1, .omp_threads = o.omp_threads});
    if (auto st = gpu_ready(); !st.ok()) return st;
    return p;
  }
  host::placement_request req;
  req.tiles = o.tiles;
  req.tile_memory = o.tile_memory;
  req.token_budget = o.tile_token_budget;
  req.max_sequences = o.tile_max_sequences;
  req.dtype = o.dtype;
  host::deploy_hooks hooks;
  hooks.compiled = [&](const host::compiled_model& c) {
    if (log) log("tile group: " + c.chosen.to_string() + " on " + std::to_string(o.tiles) + " tile processes");
  };
  auto deployed = host::deploy_bert(*p->model_, req, {}, hooks);
  if (!deployed.ok()) return deployed.error().with_context(o.model + " on " + std::to_string(o.tiles) + " tiles");
  p->group_ = std::move(deployed->group);
  p->tiles_ = std::make_shared<host::tile_backend>(std::move(deployed->model), "tiles0");
  if (auto st = gpu_ready(); !st.ok()) return st;
  return p;
}

compute_pool::~compute_pool() {
  if (gpu_) gpu_->stop();  // SIGTERM, then SIGKILL after 2 s; removes the ipc directory
  if (auto* tb = dynamic_cast<host::tile_backend*>(tiles_.get())) tb->stop();
  tiles_.reset();
  group_.reset();
}

compute_provider compute_pool::provider() {
  return [this](const configuration&, const virtual_backend_spec& spec) -> std::shared_ptr<backends::backend> {
    return spec.kind == "tiles" ? tiles_ : gpu_;
  };
}

std::string compute_pool::note() const {
  std::string s = o_.model + " computed in " + std::string(models::dtype_name(o_.dtype)) +
                  " by a tessera-gpu process (GPU rows) and ";
  if (o_.tile_processes)
    s += std::to_string(o_.tiles) + " tessera-tile processes (tile rows)";
  else
    s += "the reference engine (tile rows, --no-tile-processes)";
  return s;
}

}  // namespace tessera::experiment
