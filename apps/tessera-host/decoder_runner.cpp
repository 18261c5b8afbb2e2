// tessera-host for decoders (GPT-2, LLaMA): compile onto the tiles, stream the weights, then check
// greedy generation against the single-process reference (--check) or serve.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <future>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "host_app.hpp"
#include "tessera/common/log.hpp"
#include "tessera/common/proc_status.hpp"
#include "tessera/backends/decoder_backend.hpp"
#include "tessera/backends/gpu_llm.hpp"
#include "tessera/host/profiler.hpp"
#include "tessera/host/tile_decoder.hpp"
#include "tessera/host/tile_llm_backend.hpp"
#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/models/gguf_reader.hpp"
#include "tessera/serving/http_server.hpp"
#include "tessera/serving/llm_engine.hpp"
#include "tessera/serving/serve_llm.hpp"
#include "tessera/serving/model_adapters.hpp"
#include "tessera/serving/router.hpp"
#include "tessera/models/batch.hpp"
#include "tessera/models/kernels.hpp"

namespace tessera::host::app {

namespace {

int fail(const status& st) {
  std::cerr << "tessera-host: " << st.to_string() << "\n";
  return st.code() == errc::invalid_argument || st.code() == errc::not_found || st.code() == errc::out_of_memory ? 2 : 1;
}

// One sequence of the check: a prompt, the reference's generation, and where the tiles are.
struct check_seq {
  int index = 0;
  int replica = 0;
  int join_step = 0;
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  models::generation want;
  std::vector<int32_t> history;  // prompt + generated on the tiles
  std::vector<int32_t> blocks;
  int computed = 0;              // positions whose K/V are on the tiles
  int generated = 0;
  bool done = false;
  bool tie = false;              // diverged at a step whose reference top-2 margin was a near tie
  double worst = 0;
};

constexpr int kPrefillChunk = 16;
// --check's bounds (decoder_logit_bound, docs/models.md "How close tile logits are"): logits
// within bound x max(1, max |reference logit|) of the reference in the same dtype, the bound
// growing with depth, the widest sum of a layer and the dtype; a token that differs is a failure
// unless the reference's top-2 margin was below twice that (a near tie).

}  // namespace

bool is_decoder_model(const std::string& name) {
  if (auto s = models::shape_preset(name); s) return s->is_decoder();
  std::error_code ec;
  if (!std::filesystem::is_directory(name, ec) && models::looks_like_gguf(name)) return true;  // GGUF holds decoders
  // A config.json file (--seeded-shards seeds its shape) or a folder's.
  const bool file = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0 &&
                    std::filesystem::is_regular_file(name, ec);
  std::ifstream f(file ? name : name + "/config.json");
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  return models::parse_decoder_config_json(ss.str()).has_value();
}

int serve_decoder(std::unique_ptr<tile_decoder> deployed, std::shared_ptr<const models::decoder_model> shared_model,
                  model_options& o, uint32_t tiles, std::shared_ptr<const serving::llm_tokenizer> tokenizer);
int check_generation(tile_decoder& dec, const models::decoder_model& m, const model_options& o);
int generate_on_tiles(tile_decoder& dec, const model_options& o, double load_seconds);

namespace {

// Streaming progress on stderr: at most one line every 2 s and at the end.
std::function<void(uint64_t, uint64_t)> load_progress(std::chrono::steady_clock::time_point t0) {
  auto last = std::make_shared<double>(-10.0);
  return [t0, last](uint64_t done, uint64_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (done < total && s - *last < 2.0) return;
    *last = s;
    std::fprintf(stderr, "tessera-host: streamed %.2f of %.2f GiB (%.0f%%), %.1f s, host VmHWM %.2f GiB\n",
                 done / double(1ull << 30), total / double(1ull << 30), 100.0 * double(done) / double(std::max<uint64_t>(1, total)), s,
                 double(tessera::self_vm_hwm_bytes()) / double(1ull << 30));
  };
}

// The placement request of a decoder run: the tiles, their memory, and the step program shaped
// for the scheduler's steps (its token budget and running sequences), the KV blocks asked for.
placement_request decoder_request(const tile_group_config& group_cfg, const model_options& o) {
  placement_request req;
  req.tiles = static_cast<int>(group_cfg.tiles);
  req.tile_memory = group_cfg.tile_memory;
  req.token_budget = o.lo.step_token_budget;
  req.max_sequences = o.lo.max_running;
  req.forced = o.forced;
  req.reduce = o.reduce;
  req.kv_blocks = o.lo.kv_blocks;
  req.kv_block_tokens = o.lo.block_tokens;
  req.dtype = o.dtype;
  // Serving with --async-scheduling on: the step program that takes the last step's samples.
  req.feed_tokens = o.serve && o.lo.engine.async_scheduling;
  return req;
}

// A started group and the plan compiled for it (start_ranked): compiled once with the constant
// barrier cost to refuse what does not fit before any tile starts, then the group's barrier
// measured (measure_barrier: empty supersteps on these tiles) and compiled again with it, so the
// plan ranking charges the barrier these tiles pay; both printed.
result<ranked_start> start_and_compile(const tile_group_config& group_cfg, const model_options& o,
                                       const models::model_shape& shape) {
  auto started = start_ranked(decoder_request(group_cfg, o), group_cfg,
                              [&shape](const placement_request& req) { return compile_decoder(shape, req); });
  if (!started) return started.error();
  std::printf("cost model: %s\n", started->barrier.describe().c_str());
  std::printf("%s", started->compiled.describe().c_str());
  std::fflush(stdout);
  return started;
}

// --plan-only: the plan a run would deploy, from the shape alone for a preset (llama-2-7b has no
// weights in this process), the model's for a folder or GGUF file; no tile is started.
int print_plan_only(const tile_group_config& group_cfg, const model_options& o) {
  std::optional<models::model_shape> shape;
  if (auto s = models::shape_preset(o.model); s) {
    shape = *s;
  } else {
    auto loaded = models::load_decoder(o.model, o.seed);
    if (!loaded) return fail(loaded.error());
    shape = loaded->shape();
  }
  if (!shape->is_decoder()) return fail(status::invalid(o.model + " is not a decoder"));
  const placement_request req = decoder_request(group_cfg, o);
  auto compiled = compile_decoder(*shape, req);
  if (!compiled) return fail(compiled.error());
  std::printf("cost model: barrier %.0f us a superstep, the constant (--plan-only starts no tile to measure it)\n",
              req.machine.sync_seconds * 1e6);
  std::printf("%s", compiled->describe().c_str());
  return 0;
}

// --seeded-shards: the shape of the preset (or of a config.json), compiled and placed, every shard
// generated from the seed as it is streamed; no model in this process.
int run_seeded_shards(tile_group_config group_cfg, const model_options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::error_code ec;
  const bool config = o.model.size() > 5 && o.model.compare(o.model.size() - 5, 5, ".json") == 0 &&
                      std::filesystem::is_regular_file(o.model, ec);
  // A config.json's seeded weights are those of tessera-models generate --config (the same streams).
  auto shape = config ? models::load_decoder_config(o.model) : models::shape_preset(o.model);
  if (!shape) return fail(shape.error().with_context("--seeded-shards takes a decoder preset or a config.json"));
  if (!shape->is_decoder()) return fail(status::invalid("--seeded-shards: " + o.model + " is not a decoder preset"));
  auto cut = seeded_decoder_cutter(*shape, o.seed);
  if (!cut) return fail(cut.error());
  if (o.dtype == models::dtype::bf16)
    if (auto st = models::check_dtype_supported(o.dtype); !st.ok()) return fail(st);
  auto sp = start_and_compile(group_cfg, o, *shape);
  if (!sp) return fail(sp.error());
  auto& group = sp->group;
  std::fprintf(stderr, "tessera-host: %u tiles up after %.1f s; streaming %s (seed %llu) generated shard by shard\n",
               group_cfg.tiles, since(), o.model.c_str(), (unsigned long long)o.seed);
  auto deployed = tile_decoder::deploy(*group, std::move(sp->compiled), *shape, std::move(*cut), load_progress(t0));
  if (!deployed) return fail(deployed.error());
  const double load = since();
  std::fprintf(stderr, "tessera-host: %s on %u tiles, weights streamed, %.1f s after start\n", o.model.c_str(),
               group_cfg.tiles, load);
  return generate_on_tiles(**deployed, o, load);
}

}  // namespace

int run_decoder_model(tile_group_config group_cfg, model_options o) {
  if (o.plan_only) return print_plan_only(group_cfg, o);
  if (o.seeded_shards) return run_seeded_shards(std::move(group_cfg), o);
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (!o.trace_path.empty() && o.check_batches > 0 && o.serve)
    return fail(status::invalid("--trace traces the steps of --check or those of --serve, not both in one file: drop "
                                "--check or --serve"));
  if (o.spawn_gpu > 0 || !o.gpu_endpoints.empty())
    return fail(status::invalid("--spawn-gpu and --gpu-endpoint are for BERT models: a tessera-gpu process takes no "
                                "decoder steps from a host; for decoders use --gpu-replicas N (in-process GPU-style "
                                "decoders beside the tiles, --routing hybrid), or tessera-gpu --serve on its own"));
  if (o.gpu_replicas > 0 && !o.serve)
    return fail(status::invalid("--gpu-replicas with a decoder serves beside the tiles: add --serve"));
  auto loaded = models::load_decoder(o.model, o.seed);
  if (!loaded) return fail(loaded.error());
  // bf16: the single-process reference (--check) and --gpu-replicas run the bf16 decoder; the
  // tiles get bf16 matrices and KV cache (refused where the CPU has no native bf16).
  if (auto st = loaded->set_dtype(o.dtype); !st.ok()) return fail(st);
  auto model = std::make_shared<const models::decoder_model>(std::move(*loaded));
  const models::model_shape& shape = model->shape();
  // Serving: the tokenizer (a GGUF file's or folder's own, with its chat template) before any tile
  // starts, so a file whose tokenizer cannot be read fails here.
  std::shared_ptr<const serving::llm_tokenizer> tokenizer;
  if (o.serve) {
    auto bpe = models::load_decoder_tokenizer(o.model, shape.traits().tokenizer);
    if (!bpe) return fail(bpe.error());
    tokenizer = serving::make_bpe_llm_tokenizer(std::move(*bpe));
  }

  auto sp = start_and_compile(group_cfg, o, shape);
  if (!sp) return fail(sp.error());
  auto& group = sp->group;
  auto deployed = tile_decoder::deploy(*group, std::move(sp->compiled), model, load_progress(t0));
  if (!deployed) return fail(deployed.error());
  const double load = since();
  std::fprintf(stderr, "tessera-host: %s on %u tiles, weights streamed, %.1f s after start\n", o.model.c_str(),
               group_cfg.tiles, load);
  if (!o.prompt_ids.empty()) return generate_on_tiles(**deployed, o, load);

  if (o.check_batches > 0)
    if (int rc = check_generation(**deployed, *model, o); rc != 0 || !o.serve) return rc;
  if (!o.serve) return 0;
  return serve_decoder(std::move(*deployed), model, o, group_cfg.tiles, std::move(tokenizer));
}

int serve_decoder(std::unique_ptr<tile_decoder> deployed, std::shared_ptr<const models::decoder_model> shared_model,
                  model_options& o, uint32_t tiles, std::shared_ptr<const serving::llm_tokenizer> tokenizer) {
  const models::decoder_model& model = *shared_model;
  // One engine per replica of the plan (tiles0, tiles1, ...), then --gpu-replicas in-process
  // GPU-style decoders (gpu0, ...); the LLM router picks one per request (--routing).
  const int replicas = deployed->compiled().chosen.replicas;
  // --trace: every step the replicas run, recorded as the profiler's batches (written at the end).
  std::unique_ptr<profiler> prof;
  if (!o.trace_path.empty()) {
    auto p = profiler::create(deployed->compiled(), {.preset = o.timing_preset});
    if (!p) return fail(p.error());
    prof = std::move(*p);
  }
  auto on_tiles = tile_llm_backend::make(std::move(deployed), "tiles", {.trace = prof.get()});
  if (!on_tiles) return fail(on_tiles.error());
  std::vector<std::shared_ptr<backends::llm_backend>> all(on_tiles->begin(), on_tiles->end());
  for (int i = 0; i < o.gpu_replicas; ++i) {
    const int32_t blocks = o.lo.kv_blocks > 0 ? o.lo.kv_blocks
                                              : backends::kv_blocks_for_bytes(model.shape(), o.lo.block_tokens,
                                                                              static_cast<int64_t>(o.lo.kv_memory_mb * (1 << 20)),
                                                                              o.dtype);
    auto g = backends::make_gpu_llm_backend(shared_model, {.name = "gpu" + std::to_string(i),
                                                           .kv = {o.lo.block_tokens, blocks, o.dtype}});
    if (!g) return fail(g.error().with_context("--gpu-replicas"));
    all.push_back(*g);
  }
  std::string suffix = " tiles " + std::to_string(tiles) + " replicas " + std::to_string(replicas);
  if (o.gpu_replicas > 0) suffix += " gpu " + std::to_string(o.gpu_replicas);
  const int rc = serving::serve_llm({.backends = all, .model = o.model, .arch = model.shape().arch,
                                     .program = "tessera-host", .listening_suffix = suffix,
                                     .tokenizer = std::move(tokenizer)},
                                    o.lo, o.so);
  int64_t steps = 0, recoveries = 0;
  for (auto& b : *on_tiles) {
    steps += b->steps();
    recoveries += b->recoveries();
    b->stop();
  }
  std::fprintf(stderr, "tessera-host: %lld decoder steps on the tiles, %lld tile recoveries\n", (long long)steps,
               (long long)recoveries);
  if (prof) {
    if (auto st = prof->write_trace(o.trace_path); !st.ok()) return fail(st);
    const int64_t traced = on_tiles->front()->traced_steps();
    std::fprintf(stderr, "tessera-host: trace %s, %lld decoder steps%s (open in https://ui.perfetto.dev or chrome://tracing)\n",
                 o.trace_path.c_str(), (long long)traced,
                 traced < steps ? (", the first of " + std::to_string(steps)).c_str() : "");
  }
  return rc;
}

int check_generation(tile_decoder& dec, const models::decoder_model& m, const model_options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const auto& c = dec.compiled();
  const models::model_shape& shape = m.shape();
  const models::decoder_model* model = &m;
  const bool bf16 = c.dtype == models::dtype::bf16;
  const logit_bound derived = decoder_logit_bound(shape, c.dtype);
  const double bound = o.check_bound > 0 ? o.check_bound : derived.bound;
  const char* what = bf16 ? "max |logit - bf16 reference| / max(1, max |reference logit|)"
                          : "max |logit - reference| / max(1, max |reference logit|)";
  std::printf("check bound: %s%s\n", derived.to_string().c_str(),
              o.check_bound > 0 ? (", overridden by --check-bound " + std::to_string(o.check_bound)).c_str() : "");

  // --check K: K sequences of different prompt lengths and output lengths, joining at staggered
  // steps and leaving when done, prefill in chunks of 16 beside the others' decodes; sequence i
  // lives on replica i % R (its K/V are there). Every generated token is compared with
  // greedy_generate in one process, and the logits it was chosen from within the bound.
  // One thread: the tiles (and whatever else runs here) have the cores; OpenMP threads waiting
  // at barriers for a descheduled peer made the reference take seconds on a loaded machine.
  models::set_num_threads(1);
  models::splitmix64 rng(7);
  std::vector<check_seq> seqs(static_cast<size_t>(o.check_batches));
  for (int i = 0; i < o.check_batches; ++i) {
    auto& s = seqs[static_cast<size_t>(i)];
    s.index = i;
    s.replica = i % c.chosen.replicas;
    s.join_step = 3 * i;
    const int len = i == 0 ? 37 : static_cast<int>(rng.uniform(1, 40));
    for (int k = 0; k < len; ++k) s.prompt.push_back(static_cast<int32_t>(rng.uniform(0, shape.vocab_size - 1)));
    s.max_tokens = 32 - (i % 4) * 6;
    auto g = models::greedy_generate(*model, s.prompt, {.max_tokens = s.max_tokens, .block_tokens = c.kv.block_tokens, .keep_logits = true});
    if (!g) return fail(g.error().with_context("the reference generation of sequence " + std::to_string(i)));
    s.want = std::move(*g);
    s.history = s.prompt;
  }
  std::fprintf(stderr, "tessera-host: reference generations done, %.1f s after start\n", since());
  // --trace: every step as a batch of the host's trace (tiles' supersteps on the wall clock and on
  // the IPU preset's; the decoder track's slices carry the step's mix and KV blocks per tile).
  std::unique_ptr<profiler> prof;
  if (!o.trace_path.empty()) {
    auto p = profiler::create(c, {.preset = o.timing_preset});
    if (!p) return fail(p.error());
    prof = std::move(*p);
  }
  std::vector<models::block_pool> pools;
  for (int r = 0; r < c.chosen.replicas; ++r) pools.emplace_back(c.kv.num_blocks);
  int64_t steps = 0, supersteps = 0, generated = 0, decode_steps = 0;
  uint64_t bytes = 0, input_bytes = 0;
  double wall = 0, worst = 0;
  for (int n = 0;; ++n) {
    bool left = false;
    for (const auto& s : seqs) left |= !s.done;
    if (!left) break;
    // Each replica's step: the sequences that joined and are not done, within its limits.
    std::vector<models::step_batch> batches(static_cast<size_t>(c.chosen.replicas));
    std::vector<std::vector<check_seq*>> members(batches.size());
    for (auto& s : seqs) {
      if (s.done || s.join_step > n) continue;
      auto& b = batches[static_cast<size_t>(s.replica)];
      const int prompt = static_cast<int>(s.prompt.size());
      models::seq_step st;
      st.seq_id = static_cast<uint64_t>(s.index);
      st.start_pos = s.computed;
      const int end = s.computed < prompt ? std::min(prompt, s.computed + kPrefillChunk) : s.computed + 1;
      st.tokens.assign(s.history.begin() + s.computed, s.history.begin() + end);
      st.want_logits = end >= prompt;
      if (static_cast<int>(b.seqs.size()) >= c.max_sequences || b.num_tokens() + static_cast<int64_t>(st.tokens.size()) > c.token_budget)
        continue;  // next step
      auto& pool = pools[static_cast<size_t>(s.replica)];
      while (static_cast<int>(s.blocks.size()) < c.kv.blocks_for(end)) {
        auto id = pool.allocate();
        if (!id) {
          std::string tiles;
          for (uint32_t t : dec.replica_tiles(s.replica)) tiles += (tiles.empty() ? "" : ", ") + std::to_string(t);
          return fail(status::out_of_memory("the KV cache of replica " + std::to_string(s.replica) + " (tiles " + tiles +
                                            ") is full: " + std::to_string(c.kv.num_blocks) + " blocks of " +
                                            std::to_string(c.kv.block_tokens) + " positions; sequence " +
                                            std::to_string(s.index) + " needs more (raise --tile-memory or --kv-blocks, "
                                            "or check fewer sequences)"));
        }
        s.blocks.push_back(*id);
      }
      st.block_table = s.blocks;
      b.seqs.push_back(std::move(st));
      members[static_cast<size_t>(s.replica)].push_back(&s);
    }
    std::vector<std::future<result<tile_step_result>>> runs(batches.size());
    const double t_step = prof ? prof->now() : 0;
    for (size_t r = 0; r < batches.size(); ++r)
      if (!batches[r].seqs.empty())
        runs[r] = std::async(std::launch::async, [&, r] { return dec.step(static_cast<int>(r), batches[r]); });
    for (size_t r = 0; r < batches.size(); ++r) {
      if (batches[r].seqs.empty()) continue;
      auto out = runs[r].get();
      if (!out) return fail(out.error().with_context("step " + std::to_string(n) + " on replica " + std::to_string(r)));
      if (prof) {
        std::vector<bool> decode;
        for (size_t k = 0; k < batches[r].seqs.size(); ++k)
          decode.push_back(batches[r].seqs[k].tokens.size() == 1 &&
                           batches[r].seqs[k].start_pos >= static_cast<int>(members[r][k]->prompt.size()));
        auto rec = dec.step_record(static_cast<int>(r), batches[r], *out, t_step, decode, n);
        if (auto st = prof->record(std::move(rec)); st.code() != errc::ok) return fail(st);
      }
      ++steps;
      supersteps += out->supersteps;
      bytes += out->bytes_exchanged;
      input_bytes += out->input_bytes;
      wall += out->wall_seconds;
      bool all_decode = true;
      size_t li = 0;
      for (size_t k = 0; k < batches[r].seqs.size(); ++k) {
        const auto& st = batches[r].seqs[k];
        check_seq& s = *members[r][k];
        all_decode &= st.tokens.size() == 1 && s.computed >= static_cast<int>(s.prompt.size());
        s.computed += static_cast<int>(st.tokens.size());
        if (!st.want_logits) continue;
        const auto& logits = out->logits[li++];
        const auto& ref = s.want.logits[static_cast<size_t>(s.generated)];
        double scale = 1;
        for (float v : ref) scale = std::max(scale, double(std::abs(v)));
        const double diff = scaled_logit_difference(logits, ref);
        s.worst = std::max(s.worst, diff);
        worst = std::max(worst, diff);
        const int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        const int32_t ref_tok = s.want.tokens[static_cast<size_t>(s.generated)];
        ++generated;
        if (tok != ref_tok) {
          const float margin = s.want.top2_margin[static_cast<size_t>(s.generated)];
          if (margin >= 2 * bound * scale) {
            std::fprintf(stderr,
                         "tessera-host: sequence %d token %d: the tiles chose %d, the reference %d (top-2 margin %.2e, "
                         "not a near tie: >= 2 x bound %.2e x %.3g; %s %.2e)\n",
                         s.index, s.generated, tok, ref_tok, margin, bound, scale, what, diff);
            return 1;
          }
          s.tie = true;  // a near tie: the rest of the sequence is not comparable
        }
        s.history.push_back(tok);
        ++s.generated;
        if (s.tie || s.generated == s.max_tokens) {
          s.done = true;
          for (int32_t b : s.blocks) (void)pools[static_cast<size_t>(s.replica)].release(b);
          s.blocks.clear();
        }
      }
      decode_steps += all_decode ? 1 : 0;
    }
  }
  for (const auto& s : seqs)
    std::printf("check sequence %d: replica %d, prompt %zu tokens, joined at step %d, %d tokens generated %s, "
                "%s %.2e\n",
                s.index, s.replica, s.prompt.size(), s.join_step, s.generated,
                s.tie ? "(stopped at a near tie of the reference)" : "equal to the reference", what, s.worst);
  std::printf("check: %lld steps (%lld decode-only), %lld tokens generated; per generated token: %.1f supersteps, "
              "%.1f KiB exchanged between tiles, %.1f KiB sent by the host; %.2f ms wall per step; "
              "%s %.2e (bound %.2e)\n",
              (long long)steps, (long long)decode_steps, (long long)generated, double(supersteps) / std::max<int64_t>(1, generated),
              bytes / 1024.0 / std::max<int64_t>(1, generated), input_bytes / 1024.0 / std::max<int64_t>(1, generated),
              wall * 1e3 / std::max<int64_t>(1, steps), what, worst, bound);
  if (prof) {
    if (auto st = prof->write_trace(o.trace_path); st.code() != errc::ok) return fail(st);
    std::printf("trace: %s, %zu decoder steps (open in https://ui.perfetto.dev or chrome://tracing)\n",
                o.trace_path.c_str(), prof->batches());
  }
  if (worst > bound) {
    std::cerr << "tessera-host: logits differ from the single-process reference by " << worst << " (" << what
              << "; bound " << bound << ")\n";
    return 1;
  }
  return 0;
}

int generate_on_tiles(tile_decoder& dec, const model_options& o, double load_seconds) {
  const auto& c = dec.compiled();
  const models::model_shape& shape = dec.shape();
  for (int32_t id : o.prompt_ids)
    if (id < 0 || id >= shape.vocab_size)
      return fail(status::invalid("--prompt-ids: token " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(shape.vocab_size) + ")"));
  // One sequence on replica 0: the prompt in chunks of the step's token budget, then one token a step.
  std::vector<int32_t> history = o.prompt_ids, blocks, generated;
  std::vector<float> margins, max_abs;
  std::vector<double> step_seconds;  // per generated token: the step that produced it (prefill's last chunk for the first)
  std::vector<std::vector<float>> all_logits;
  const int prompt = static_cast<int>(o.prompt_ids.size());
  int computed = 0;
  double prefill_seconds = 0;
  int32_t next_block = 0;
  while (static_cast<int>(generated.size()) < o.generate_tokens) {
    models::step_batch b;
    models::seq_step st;
    st.seq_id = 0;
    st.start_pos = computed;
    const int end = computed < prompt ? std::min(prompt, computed + c.token_budget) : computed + 1;
    st.tokens.assign(history.begin() + computed, history.begin() + end);
    st.want_logits = end >= prompt;
    while (static_cast<int>(blocks.size()) < c.kv.blocks_for(end)) blocks.push_back(next_block++);
    st.block_table = blocks;
    b.seqs.push_back(std::move(st));
    const auto t0 = std::chrono::steady_clock::now();
    auto out = dec.step(0, b);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!out) return fail(out.error().with_context("step at position " + std::to_string(computed)));
    const bool prefill = computed < prompt;
    if (prefill) prefill_seconds += secs;
    computed = end;
    if (out->logits.empty()) {
      std::fprintf(stderr, "tessera-host: prefill chunk to position %d: %.3f s\n", end, secs);
      continue;
    }
    const std::vector<float>& lg = out->logits[0];
    const int32_t tok = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    float best = -INFINITY, second = -INFINITY, m = 0;
    for (float v : lg) {
      if (v > best) { second = best; best = v; }
      else if (v > second) second = v;
      m = std::max(m, std::abs(v));
    }
    generated.push_back(tok);
    history.push_back(tok);
    margins.push_back(best - second);
    max_abs.push_back(m);
    step_seconds.push_back(secs);
    if (!o.logits_path.empty()) all_logits.push_back(lg);
    std::fprintf(stderr, "tessera-host: token %zu = %d (%s step %.3f s)\n", generated.size(), tok,
                 prefill ? "prefill" : "decode", secs);
  }
  double decode_seconds = 0;
  for (size_t i = 1; i < step_seconds.size(); ++i) decode_seconds += step_seconds[i];
  const int decodes = static_cast<int>(step_seconds.size()) - 1;
  std::printf("generated ids:");
  for (int32_t t : generated) std::printf(" %d", t);
  std::printf("\nload %.1f s, prefill %d tokens %.3f s, %d decode steps %.3f s (%.3f tok/s)\n", load_seconds, prompt,
              prefill_seconds, decodes, decode_seconds, decodes > 0 ? decodes / decode_seconds : 0.0);
  // Memory: each tile's plan beside its process's peak and current RSS, and this process's peak.
  nlohmann::json tiles = nlohmann::json::array();
  const auto infos = dec.group().tiles();
  std::printf("tile | planned MiB | VmHWM MiB | VmRSS MiB | cap MiB\n");
  for (const auto& ti : infos) {
    const uint64_t planned = ti.id < c.tiles.size() ? c.tiles[ti.id].total_bytes() : 0;
    const int64_t hwm = ti.local ? tessera::proc_status_bytes(ti.pid, "VmHWM") : -1;
    const int64_t rss = ti.local ? tessera::proc_status_bytes(ti.pid, "VmRSS") : -1;
    std::printf("%u | %.1f | %.1f | %.1f | %.1f\n", ti.id, planned / 1048576.0, hwm / 1048576.0, rss / 1048576.0,
                ti.memory_capacity / 1048576.0);
    tiles.push_back({{"tile", ti.id}, {"pid", ti.pid}, {"planned_bytes", planned}, {"vm_hwm_bytes", hwm},
                     {"vm_rss_bytes", rss}, {"capacity_bytes", ti.memory_capacity},
                     {"tile_high_water_bytes", ti.memory_high_water}});
  }
  const int64_t host_hwm = tessera::self_vm_hwm_bytes();
  std::printf("host VmHWM %.1f MiB\n", host_hwm / 1048576.0);
  if (!o.logits_path.empty()) {
    std::ofstream f(o.logits_path, std::ios::binary);
    for (const auto& row : all_logits) f.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size() * 4));
    if (!f) return fail(status::invalid("--logits: cannot write " + o.logits_path));
  }
  if (!o.results_path.empty()) {
    uint64_t weights = 0;
    for (const auto& sh : c.shards) weights += sh.desc.bytes();
    nlohmann::json j = {{"model", o.model},
                        {"dtype", c.dtype == models::dtype::bf16 ? "bf16" : "fp32"},
                        {"seed", o.seed},
                        {"seeded_shards", o.seeded_shards},
                        {"tiles", infos.size()},
                        {"plan", c.chosen.to_string()},
                        {"weights_streamed_bytes", weights},
                        {"parameters", shape.parameter_count()},
                        {"kv_blocks", c.kv.num_blocks},
                        {"kv_block_tokens", c.kv.block_tokens},
                        {"token_budget", c.token_budget},
                        {"prompt_ids", o.prompt_ids},
                        {"tokens", generated},
                        {"top2_margin", margins},
                        {"max_abs_logit", max_abs},
                        {"load_seconds", load_seconds},
                        {"prefill_seconds", prefill_seconds},
                        {"step_seconds", step_seconds},
                        {"decode_seconds", decode_seconds},
                        {"decode_tokens_per_s", decodes > 0 ? decodes / decode_seconds : 0.0},
                        {"supersteps_per_step", c.supersteps()},
                        {"logit_bound", decoder_logit_bound(shape, c.dtype).bound},
                        {"logit_bound_formula", decoder_logit_bound(shape, c.dtype).to_string()},
                        {"host_vm_hwm_bytes", host_hwm},
                        {"tile_memory", tiles}};
    std::ofstream f(o.results_path);
    f << j.dump(2) << "\n";
    if (!f) return fail(status::invalid("--results: cannot write " + o.results_path));
  }
  return 0;
}

}  // namespace tessera::host::app
