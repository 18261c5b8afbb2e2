#include <cmath>
#include <cstdio>
#include <iostream>

#include "host_app.hpp"
#include "host_faults.hpp"
#include "tessera/backends/reference_backend.hpp"
#include "tessera/common/log.hpp"
#include "tessera/host/launcher.hpp"
#include "tessera/host/profiler.hpp"
#include "tessera/host/remote_backend.hpp"
#include "tessera/host/tile_backend.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/serving/model_adapters.hpp"
#include "tessera/serving/router.hpp"

namespace tessera::host::app {

namespace {

int fail(const status& st) {
  std::cerr << "tessera-host: " << st.to_string() << "\n";
  return st.code() == errc::invalid_argument || st.code() == errc::not_found || st.code() == errc::out_of_memory ? 2 : 1;
}

// Floats per sequence the backends answer: the logits, or an embedding model's pooled vector.
int output_width(const models::bert_model& m) {
  return m.task == models::encoder_task::embedding ? m.config.hidden_size : m.config.num_labels;
}

// What the tiles compute for a batch in one process: the logits, or an embedding model's pooled
// vectors (its pooling, before normalization).
std::vector<float> reference_output(const models::bert_model& m, const models::packed_batch& b) {
  return m.task == models::encoder_task::embedding ? models::reference_embed(m, b) : models::reference_forward(m, b);
}

// Mixed lengths 1..max that fill most of the budget.
models::packed_batch check_batch(const models::bert_config& cfg, int budget, int max_seqs, uint64_t seed) {
  models::splitmix64 rng(seed);
  std::vector<int> lengths{1, std::min(cfg.max_sequence_length(), budget)};
  int total = lengths[0] + lengths[1];
  while (static_cast<int>(lengths.size()) < max_seqs) {
    int l = static_cast<int>(rng.uniform(1, cfg.max_sequence_length()));
    if (total + l > budget) break;
    lengths.push_back(l);
    total += l;
  }
  return models::synthetic_batch(lengths, cfg.vocab_size, seed);
}

// GPU baseline processes (tessera-gpu): --gpu-endpoint ones running elsewhere, then --spawn-gpu
// ones launched here on private ipc endpoints (stopped when the backend is destroyed), in --dtype:
// spawned ones are started with it, and every one must answer a ping in it (a running process
// in the other dtype is refused here, naming both).
result<std::vector<std::shared_ptr<remote_backend>>> gpu_processes(const models::bert_model& m,
                                                                   const model_options& o) {
  std::vector<std::shared_ptr<remote_backend>> out;
  const size_t n = o.gpu_endpoints.size() + static_cast<size_t>(std::max(0, o.spawn_gpu));
  for (size_t i = 0; i < n; ++i) {
    remote_backend_config c;
    c.info = {.name = "gpu" + std::to_string(o.gpu_replicas + static_cast<int>(i)), .kind = "gpu",
              .max_sequence_length = m.config.max_sequence_length(), .num_labels = output_width(m)};
    if (i < o.gpu_endpoints.size()) {
      c.endpoint = o.gpu_endpoints[i];
    } else {
      auto ep = make_local_ipc_endpoint(c.info.name);
      if (!ep) return ep.error();
      c.endpoint = *ep;
      c.spawn_binary = default_bin_dir() + "/tessera-gpu";
      c.spawn_args = {"--model", o.model, "--seed", std::to_string(o.seed), "--name", c.info.name,
                      "--dtype", std::string(models::dtype_name(o.dtype))};
    }
    c.compute = o.dtype;
    auto b = remote_backend::start(c);
    if (!b) return b.error();
    if (!(*b)->wait_ready(std::chrono::seconds(60)))
      return status::peer_failed(c.info.name + " at " + c.endpoint + " did not answer a ping within 60 s");
    if (auto st = (*b)->check_compute(std::chrono::seconds(60)); !st.ok()) return st;
    out.push_back(std::move(*b));
  }
  return out;
}

}  // namespace

int run_model(tile_group_config group_cfg, model_options o) {
  if (!o.trace_path.empty() && o.check_batches <= 0)
    return fail(status::invalid("--trace records the batches of --check for BERT models; batches served over "
                                "HTTP (--serve) are not traced (decoders trace their served steps): add --check N or "
                                "drop --trace"));
  // A classifier, a reranker or an embedding model (a sentence-transformers folder: its head tile
  // pools the last layer's rows, so only pooled vectors come back).
  auto loaded = models::load_encoder(o.model, o.seed);
  if (!loaded) return fail(loaded.error());
  // bf16 and int8 tiles are checked against the fp32 reference (the oracle) with their dtype's
  // bound, and against the single-process forward in their dtype for information. int8: the
  // tiles' matrices and scales are cut from that model (calibrated here, as tessera-models does).
  std::shared_ptr<const models::bert_model> dtype_model;
  if (o.dtype != models::dtype::fp32) {
    auto m = *loaded;
    if (auto st = models::set_dtype(m, o.dtype); st.code() != tessera::errc::ok) return fail(st);
    dtype_model = std::make_shared<const models::bert_model>(std::move(m));
  }
  auto model = std::make_shared<const models::bert_model>(std::move(*loaded));

  placement_request req;
  req.tiles = static_cast<int>(group_cfg.tiles);
  req.tile_memory = group_cfg.tile_memory;
  req.token_budget = o.so.batching.token_budget;
  req.max_sequences = o.so.batching.max_batch_size;
  req.forced = o.forced;
  req.reduce = o.reduce;
  req.dtype = o.dtype;
  if (o.plan_only) {  // what deploy_bert would compile; no tile started
    placement_request with_pooling = req;
    if (model->task == models::encoder_task::embedding) with_pooling.pooling = model->embedding.pooling;
    auto compiled = compile_bert(model->config, with_pooling);
    if (!compiled) return fail(compiled.error());
    std::printf("%s", compiled->describe().c_str());
    return 0;
  }
  deploy_hooks hooks;
  hooks.compiled = [](const compiled_model& c) {
    std::printf("%s", c.describe().c_str());
    std::fflush(stdout);
  };
  uint64_t last_pct = 0;
  hooks.progress = [&](uint64_t done, uint64_t total) {
    uint64_t pct = total ? done * 100 / total : 100;
    if (pct >= last_pct + 10 || done == total) {
      std::fprintf(stderr, "tessera-host: streaming weights %3llu%% (%.1f of %.1f MiB)\n", (unsigned long long)pct,
                   done / 1048576.0, total / 1048576.0);
      last_pct = pct;
    }
  };
  auto deployment = deploy_bert(dtype_model ? *dtype_model : *model, req, group_cfg, hooks);
  if (!deployment.ok()) return fail(deployment.error());
  auto group = std::move(deployment->group);
  auto deployed = std::move(deployment->model);

  if (o.check_batches > 0) {
    const auto& c = deployed->compiled();
    double worst = 0;
    // fp32: the tiles compute what the reference does, in another order (1e-4). bf16: the bound of
    // tests/models/bf16_test.cpp, 0.05 for logits within +-1, scaled by the largest |logit| beyond
    // (bf16 rounds activations at every kernel; measured ~0.006 on BERT-base: 8x headroom that
    // still catches a wrong slice or layout). int8: models::int8_logit_bound (0.15), scaled alike.
    double tolerance = 1e-4;
    std::unique_ptr<profiler> prof;
    if (!o.trace_path.empty()) {
      auto p = profiler::create(c, {.preset = o.timing_preset, .tile_memory = group_cfg.tile_memory});
      if (!p) return fail(p.error());
      prof = std::move(*p);
    }
    for (int i = 0; i < o.check_batches; ++i) {
      auto batch = check_batch(model->config, c.token_budget, c.max_sequences, 100 + i);
      auto want = reference_output(*model, batch);
      const double t0 = prof ? prof->now() : 0;
      auto got = deployed->run(i % c.chosen.replicas, batch);
      if (!got) return fail(got.error());
      if (prof)
        if (auto st = prof->record(i % c.chosen.replicas, batch, *got, t0); !st.ok()) return fail(st);
      double diff = 0, diff16 = 0;
      if (got->logits.size() != want.size())
        return fail(status::internal("the tiles returned " + std::to_string(got->logits.size()) + " logits for " +
                                     std::to_string(want.size())));
      double scale = 1;
      for (size_t k = 0; k < want.size(); ++k) {
        diff = std::max(diff, double(std::abs(want[k] - got->logits[k])));
        scale = std::max(scale, double(std::abs(want[k])));
      }
      if (o.dtype == models::dtype::bf16) tolerance = std::max(tolerance, 0.05 * scale);
      if (o.dtype == models::dtype::int8) tolerance = std::max(tolerance, models::int8_logit_bound * scale);
      worst = std::max(worst, diff);
      std::string vs16;
      if (dtype_model) {
        const auto want16 = reference_output(*dtype_model, batch);
        for (size_t k = 0; k < want16.size(); ++k)
          diff16 = std::max(diff16, double(std::abs(want16[k] - got->logits[k])));
        char buf[96];
        std::snprintf(buf, sizeof buf, ", max |logit - %s single-process| %.2e",
                      std::string(models::dtype_name(o.dtype)).c_str(), diff16);
        vs16 = buf;
      }
      std::printf("check batch %d: %d sequences, %lld tokens, %.1f ms wall, %lld supersteps, %.2f MiB exchanged, "
                  "max |logit - reference| %.2e%s\n",
                  i, batch.num_seqs(), (long long)batch.num_tokens(), got->wall_seconds * 1e3, (long long)got->supersteps,
                  got->bytes_exchanged / 1048576.0, diff, vs16.c_str());
    }
    if (prof) {
      std::printf("%s", prof->summary().c_str());
      if (auto st = prof->write_trace(o.trace_path); !st.ok()) return fail(st);
      std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", o.trace_path.c_str());
    }
    if (worst > tolerance) {
      std::cerr << "tessera-host: logits differ from the single-process fp32 reference by " << worst << " (> "
                << tolerance << ")\n";
      return 1;
    }
    if (o.tile_faults) std::printf("faults injected by the tiles: %s\n", describe_tile_faults(*group).c_str());
    if (!o.serve) return 0;
  }
  if (!o.serve) return 0;

  serving::serving_metrics metrics;
  serving::router r(o.so.routing, serving::default_clock(), &metrics);
  tile_backend_config tiles_cfg;
  auto preset = timing::load_ipu_preset(o.timing_preset);  // the modelled clock of every batch
  if (!preset) return fail(preset.error());
  tiles_cfg.preset = std::move(*preset);
  auto tiles = std::make_shared<tile_backend>(std::move(deployed), "tiles0", tiles_cfg);
  o.so.batching.max_sequence_length = model->config.max_sequence_length();
  if (auto st = r.add_backend(tiles, o.so.batching); !st.ok()) return fail(st);
  for (int i = 0; i < o.gpu_replicas; ++i) {
    auto gpu = backends::make_reference_backend(dtype_model ? dtype_model : model, {.name = "gpu" + std::to_string(i), .kind = "gpu", .threads = 1,
                                                       .omp_threads = 1});
    if (auto st = r.add_backend(gpu, o.so.batching); !st.ok()) return fail(st);
  }
  auto remotes = gpu_processes(*model, o);
  if (!remotes) return fail(remotes.error());
  for (size_t i = 0; i < remotes->size(); ++i) {
    serving::batching_config gpu_batching = o.so.batching;  // GPU style: padded to the longest
    gpu_batching.kind = serving::policy_kind::dynamic_padded;
    // --faults' kill_gpu numbers the spawned processes, which follow the --gpu-endpoint ones.
    const int spawned = static_cast<int>(i) - static_cast<int>(o.gpu_endpoints.size());
    auto gpu = spawned >= 0 ? with_gpu_faults((*remotes)[i], spawned, o.gpu_faults) : (*remotes)[i];
    if (auto st = r.add_backend(gpu, gpu_batching); !st.ok()) return fail(st);
  }
  r.start();
  auto tok = serving::make_model_tokenizer(*model);
  if (!tok) return fail(tok.error());
  std::string id = o.model;
  while (!id.empty() && id.back() == '/') id.pop_back();
  if (auto slash = id.find_last_of('/'); slash != std::string::npos) id = id.substr(slash + 1);
  auto info = serving::model_info_of(dtype_model ? *dtype_model : *model, id);
  serving::http_server server(o.so.server, r, *tok, info, metrics);
  if (auto st = server.start(); !st.ok()) return fail(st);
  serving::accept_graceful_stop();  // a stop signal from now on is graceful (the listening line invites one)
  std::cout << "listening on " << (o.so.server.tls_cert.empty() ? "http" : "https") << "://" << o.so.server.address << ":" << server.port() << " model " << id << " tiles "
            << group_cfg.tiles << std::endl;
  int sig = serving::wait_for_stop_signal();
  TESSERA_LOG_INFO("signal " << sig << ": answering what was accepted, then stopping");
  server.stop();
  r.stop();
  tiles->stop();
  if (o.tile_faults) std::cerr << "tessera-host: faults injected by the tiles: " << describe_tile_faults(*group) << "\n";
  return 0;
}

}  // namespace tessera::host::app
