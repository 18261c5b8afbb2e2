// Real backends for computed runs. See compute.hpp.
#include "tessera/experiment/compute.hpp"

#include "tessera/host/tile_backend.hpp"
#include "tessera/host/tile_group.hpp"
#include "tessera/host/tile_model.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/serving/reference_backend.hpp"

namespace tessera::experiment {

result<std::unique_ptr<compute_pool>> compute_pool::start(const compute_options& o, const log_fn& log) {
  std::unique_ptr<compute_pool> p(new compute_pool());
  p->o_ = o;
  auto loaded = models::load_model(o.model, o.seed);
  if (!loaded) return loaded.error();
  p->model_ = std::make_shared<const models::bert_model>(std::move(*loaded));
  p->gpu_ = serving::make_reference_backend(
      p->model_, {.name = "gpu0", .kind = "gpu", .threads = 1, .omp_threads = o.omp_threads});
  if (!o.tile_processes) {
    p->tiles_ = serving::make_reference_backend(
        p->model_, {.name = "tiles0", .kind = "tiles", .threads = 1, .omp_threads = o.omp_threads});
    return p;
  }
  host::placement_request req;
  req.tiles = o.tiles;
  req.tile_memory = o.tile_memory;
  req.token_budget = o.tile_token_budget;
  req.max_sequences = o.tile_max_sequences;
  auto compiled = host::compile_bert(p->model_->config, req);
  if (!compiled) return compiled.error().with_context("compiling " + o.model + " onto " + std::to_string(o.tiles) + " tiles");
  if (log) log("tile group: " + compiled->chosen.to_string() + " on " + std::to_string(o.tiles) + " tile processes");
  host::tile_group_config gc;
  gc.tiles = static_cast<uint32_t>(o.tiles);
  gc.tile_memory = o.tile_memory;
  auto group = host::tile_group::start(gc);
  if (!group) return group.error().with_context("starting the tile processes");
  p->group_ = std::move(*group);
  auto deployed = host::tile_model::deploy(*p->group_, std::move(*compiled), *p->model_);
  if (!deployed) return deployed.error().with_context("deploying " + o.model + " on the tile group");
  p->tiles_ = std::make_shared<host::tile_backend>(std::move(*deployed), "tiles0");
  return p;
}

compute_pool::~compute_pool() {
  if (auto* tb = dynamic_cast<host::tile_backend*>(tiles_.get())) tb->stop();
  tiles_.reset();
  group_.reset();
}

compute_provider compute_pool::provider() {
  return [this](const configuration&, const virtual_backend_spec& spec) -> std::shared_ptr<host::backend> {
    return spec.kind == "tiles" ? tiles_ : gpu_;
  };
}

std::string compute_pool::note() const {
  std::string s = o_.model + " computed by the reference engine (GPU rows) and ";
  if (o_.tile_processes)
    s += std::to_string(o_.tiles) + " tessera-tile processes (tile rows)";
  else
    s += "the reference engine (tile rows, --no-tile-processes)";
  return s;
}

}  // namespace tessera::experiment
