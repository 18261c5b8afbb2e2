// tessera-host: starts (or awaits) a tile group, compiles a model onto it and serves it, or runs
// a demo program. Parses options and wires parts; the other files here do the work.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "host_app.hpp"
#include "host_faults.hpp"
#include "tessera/common/log.hpp"
#include "tessera/common/units.hpp"
#include "tessera/exchange/security.hpp"
#include "tessera/serving/serve_options.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera;

int main(int argc, char** argv) {
  serving::take_stop_signals();  // before any thread starts: a served stop is graceful
  log::init_from_env();
  log::set_prefix("host");
  host::tile_group_config cfg;
  host::app::demo_options demo;
  host::app::model_options mo;
  mo.so.batching_name = "packed";
  mo.so.batching.token_budget = 4096;
  std::string memory = "256MiB", plan_text, keys_dir, faults_spec, dtype_text, collective_text;
  int64_t register_ms = 20000, heartbeat_timeout_ms = 3000, exchange_timeout_ms = 30000;
  po::options_description opts(
      "tessera-host: compiles work onto a group of tile processes and runs it\n\n"
      "Examples:\n"
      "  tessera-host --model bert-base --tiles 4 --tile-memory 512MiB --serve --port 8080\n"
      "  tessera-host --model bert-mini --tiles 6 --plan 1,2,3 --check 3\n"
      "  tessera-host --model llama-tiny --tiles 4 --plan 1,2,2 --check 6\n"
      "  tessera-host --demo allreduce --tiles 8\n\nTile group");
  opts.add_options()
    ("help,h", "show this help")
    ("tiles", po::value(&cfg.tiles)->default_value(4), "number of tiles in the group")
    ("tile-memory", po::value(&memory)->default_value(memory), "memory cap of each tile (e.g. 624KiB, 64MiB, 1GiB)")
    ("exchange", po::value(&cfg.local_exchange)->default_value("ipc"), "local tiles' exchange transport: ipc or tcp")
    ("control", po::value(&cfg.control_bind)->default_value(cfg.control_bind), "the host's control endpoint to bind")
    ("advertise", po::value(&cfg.advertise_host), "address tiles dial when --control binds a wildcard")
    ("external", "do not launch tiles; wait for tiles started elsewhere (ssh, Slurm) to register")
    ("register-timeout-ms", po::value(&register_ms)->default_value(register_ms), "how long to wait for tiles to register")
    ("heartbeat-timeout-ms", po::value(&heartbeat_timeout_ms)->default_value(heartbeat_timeout_ms), "declare a silent tile failed after this")
    ("exchange-timeout-ms", po::value(&exchange_timeout_ms)->default_value(exchange_timeout_ms),
     "local tiles' wait for one slice or barrier token before they fail the batch (a dropped slice costs this)")
    ("log-dir", po::value(&cfg.launcher.log_dir), "write each local tile's log to DIR/tile-N.log")
    ("pin-cores", "pin local tiles to cores round-robin")
    ("keys", po::value(&keys_dir), "CurveZMQ key directory (tessera-tile --make-keys DIR): encrypt and authenticate every socket "
     "(tiles, --gpu-endpoint and --spawn-gpu processes)")
    ("faults", po::value(&faults_spec), "fault plan, JSON text or a file (exchange/fault_plan.hpp): tile kinds go to the "
     "tiles this host launches; kill_gpu is applied here to a --spawn-gpu process");
  po::options_description model_opts("Model");
  model_opts.add_options()
    ("model", po::value(&mo.model), "preset (bert-tiny, bert-mini, bert-small, bert-base, bert-large; decoders gpt2-tiny, "
     "gpt2, gpt2-medium, llama-tiny, llama-1b), Hugging Face folder (a BERT classifier, a one-label reranker, a "
     "sentence-transformers embedding model: pooled on the head tile, /embed and /v1/embeddings; or a decoder) or GGUF "
     "file (a decoder with its tokenizer and chat template)")
    ("seed", po::value(&mo.seed)->default_value(0), "seed of a preset's random weights")
    ("dtype", po::value(&dtype_text)->default_value("fp32"), "fp32, bf16 or int8: BERT's matrices and activations in "
     "tile memory and on the exchange (bf16: 2 bytes an element; partial sums, biases and gains stay fp32; int8: the "
     "encoder's Linear matrices and the FFN activation at 1 byte an element with per-row scales, calibrated on the "
     "host as tessera-models does, the rest fp32; docs/models.md \"int8\"), and the forward of GPU backends "
     "(--gpu-replicas; --spawn-gpu processes are started with it; a --gpu-endpoint process in another dtype is "
     "refused). Decoders (fp32 or bf16; int8 is refused): bf16 puts the Linear matrices, the LM head and the paged KV cache "
     "in bf16 (twice the KV positions in the same tile memory; activations, norms, softmax and logits fp32), "
     "--check compares with the single-process bf16 decoder")
    ("plan", po::value(&plan_text), "R,S,W[,M[,V]]: replicas, pipeline stages, tensor-parallel width, micro-batches, and for a decoder V LM-head vocabulary slices (default: automatic)")
    ("collective", po::value(&collective_text)->default_value("auto"), "decoders: how a stage's lanes (W > 1) reduce "
     "their partial sums: allreduce (every lane sends its whole partial rows to the others and sums them itself: 2 "
     "supersteps a layer, (W-1) x the rows sent), rs-ag (reduce-scatter + all-gather: 4 a layer, 2(W-1)/W x the rows) "
     "or auto (the plan ranking's choice by estimated cost, the barrier measured on the tiles)")
    ("serve", "serve the model over HTTP until SIGINT/SIGTERM")
    ("plan-only", "compile and print the chosen plan, the plans that fit (estimated tokens/s) and the per-tile memory "
     "table, then exit: no tile is started and no weights are made (a decoder preset's shape alone)")
    ("check", po::value(&mo.check_batches)->default_value(0), "run N mixed batches against the single-process reference "
     "(decoders: generate N sequences of different lengths greedily, joining and leaving between steps)")
    ("check-bound", po::value(&mo.check_bound)->default_value(0), "decoders: hold --check's logits to this bound "
     "(max |logit - reference| / max(1, max |reference logit|)) instead of the one derived from the depth, the "
     "widest sum of a layer and the dtype (0, the default; printed as \"check bound:\", see docs/models.md)")
    ("trace", po::value(&mo.trace_path), "write a Chrome trace / Perfetto JSON to FILE: BERT, the batches of --check (and print a profile); "
     "decoders, every step of --check or, with --serve, every step served (written at shutdown, up to 20000 steps), "
     "each with its prefill chunks, decodes and KV blocks per tile")
    ("preset", po::value(&mo.timing_preset)->default_value(mo.timing_preset), "IPU preset of the modelled clock: the trace's and each served batch's (ipu-mk2, ipu-c600, ipu-bow or a .json)")
    ("gpu-replicas", po::value(&mo.gpu_replicas)->default_value(0), "in-process GPU-style backends beside the tiles (use --routing hybrid; decoders: "
     "GPU-style decoders, each with its own engine and --kv-blocks, costed on a100-40gb)")
    ("gpu-endpoint", po::value(&mo.gpu_endpoints)->composing(), "a running tessera-gpu process (tcp://host:port or ipc://path; repeatable): route to it as a GPU backend; "
     "off loopback it needs --keys (or --insecure)")
    ("spawn-gpu", po::value(&mo.spawn_gpu)->default_value(0), "launch N local tessera-gpu processes on ipc endpoints and route to them as GPU backends (BERT; "
     "decoders: refused, use --gpu-replicas)");
  std::string prompt_ids_text;
  po::options_description gen_opts("Greedy generation on the tiles (decoders; scripts/llm-7b runs it)");
  gen_opts.add_options()
    ("seeded-shards", "a decoder preset's (or a config.json's) seeded weights generated shard by shard as they are "
     "streamed: this process never holds the model (GPT-2, LLaMA and Qwen2 families; llama-2-7b in bf16 on tiles with "
     "a host of a few GB; a config.json's weights are tessera-models generate --config's); with --prompt-ids, not "
     "--check or --serve")
    ("prompt-ids", po::value(&prompt_ids_text), "comma-separated token ids: generate greedily from them on the tiles "
     "(one sequence, replica 0) instead of --check")
    ("generate", po::value(&mo.generate_tokens)->default_value(8), "tokens to generate with --prompt-ids")
    ("results", po::value(&mo.results_path), "with --prompt-ids: write the tokens, load/prefill/decode times, tokens/s, "
     "each tile's planned memory beside its process's VmHWM/VmRSS and this process's VmHWM as JSON")
    ("logits", po::value(&mo.logits_path), "with --prompt-ids: every generated token's logits as raw float32 [tokens][vocab]");
  po::options_description demo_opts("Demo programs (without --model)");
  demo_opts.add_options()
    ("demo", po::value(&demo.demo)->default_value(demo.demo), "matmul (rows split), matmul-columns, matmul-inner, allreduce")
    ("m", po::value(&demo.m)->default_value(demo.m), "rows of A")
    ("k", po::value(&demo.k)->default_value(demo.k), "inner dimension")
    ("n", po::value(&demo.n)->default_value(demo.n), "columns of B")
    ("reps", po::value(&demo.reps)->default_value(demo.reps), "batches to run");
  po::options_description serve_opts("Serving (with --model --serve)");
  serving::add_serve_options(serve_opts, mo.so);
  po::options_description llm_opts("Decoders (gpt2-*, llama-*): --kv-blocks counts blocks per replica on the tiles (0 = as "
                                   "many as they hold after weights and activations, up to 16384 tokens); --kv-memory-mb "
                                   "does not apply (tile memory holds the cache)");
  serving::add_llm_options(llm_opts, mo.lo);
  serve_opts.add(llm_opts);
  opts.add(model_opts).add(gen_opts).add(serve_opts).add(demo_opts);
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-host", argc, argv, opts, vm)) return *done;
  auto bytes = parse_bytes(memory);
  if (!bytes) return std::cerr << "tessera-host: --tile-memory: " << bytes.error().message() << "\n", 2;
  cfg.tile_memory = *bytes;
  cfg.launch_local = !vm.count("external");
  if (!cfg.launcher.log_dir.empty() && !vm.count("plan-only")) {
    // Each local tile opens DIR/tile-N.log as its stderr: a missing DIR is made here (with its
    // parents), one that cannot be made or is not a writable directory is refused by name
    // (before, the spawn failed as "cannot start tessera-tile: No such file or directory").
    std::error_code ec;
    const std::filesystem::path dir(cfg.launcher.log_dir);
    if (!std::filesystem::exists(dir, ec) && !std::filesystem::create_directories(dir, ec) && ec)
      return std::cerr << "tessera-host: --log-dir " << cfg.launcher.log_dir << ": cannot create the directory: "
                       << ec.message() << "\n", 2;
    if (!std::filesystem::is_directory(dir, ec))
      return std::cerr << "tessera-host: --log-dir " << cfg.launcher.log_dir
                       << " is not a directory (each tile writes DIR/tile-N.log)\n", 2;
    if (::access(cfg.launcher.log_dir.c_str(), W_OK | X_OK) != 0)
      return std::cerr << "tessera-host: --log-dir " << cfg.launcher.log_dir << ": cannot write there: "
                       << std::strerror(errno) << "\n", 2;
  }
  cfg.launcher.pin_cores = vm.count("pin-cores") > 0;
  cfg.register_timeout = std::chrono::milliseconds(register_ms);
  cfg.heartbeat_timeout = std::chrono::milliseconds(heartbeat_timeout_ms);
  if (exchange_timeout_ms <= 0) return std::cerr << "tessera-host: --exchange-timeout-ms must be positive\n", 2;
  cfg.exchange_timeout = std::chrono::milliseconds(exchange_timeout_ms);
  if (cfg.local_exchange != "ipc" && cfg.local_exchange != "tcp")
    return std::cerr << "tessera-host: --exchange must be ipc or tcp\n", 2;
  if (!keys_dir.empty()) {
    auto sec = exchange::load_security(keys_dir, exchange::security_role::host);
    if (!sec) return std::cerr << "tessera-host: --keys: " << sec.error().message() << "\n", 2;
    exchange::set_process_security(*sec);
    cfg.extra_tile_args.insert(cfg.extra_tile_args.end(), {"--keys", keys_dir});
  } else if (!mo.so.insecure) {  // --insecure: serve_options
    if (!exchange::is_loopback_endpoint(cfg.control_bind))
      return std::cerr << "tessera-host: --control " << cfg.control_bind
                       << " leaves this machine: pass --keys DIR (made by tessera-tile --make-keys DIR) or --insecure\n", 2;
    for (const auto& ep : mo.gpu_endpoints)
      if (!exchange::is_loopback_endpoint(ep))
        return std::cerr << "tessera-host: --gpu-endpoint " << ep
                         << " leaves this machine: pass --keys DIR (made by tessera-tile --make-keys DIR; the GPU "
                            "process needs its gpu.pub, gpu.key and host.pub) or --insecure\n", 2;
  }
  if (!mo.model.empty()) {
    auto dt = models::parse_dtype(dtype_text, /*allow_int8=*/!host::app::is_decoder_model(mo.model));
    if (!dt) return std::cerr << "tessera-host: --dtype: " << dt.error().message() << "\n", 2;
    mo.dtype = *dt;
    if (!plan_text.empty()) {
      auto p = host::parse_plan(plan_text);
      if (!p) return std::cerr << "tessera-host: " << p.error().message() << "\n", 2;
      mo.forced = *p;
    }
    auto reduce = host::parse_collective(collective_text);
    if (!reduce) return std::cerr << "tessera-host: " << reduce.error().message() << "\n", 2;
    mo.reduce = *reduce;
    if (auto st = serving::finish_serve_options(mo.so); !st.ok()) return std::cerr << "tessera-host: " << st.message() << "\n", 2;
    if (auto st = serving::finish_llm_options(mo.lo); !st.ok()) return std::cerr << "tessera-host: " << st.message() << "\n", 2;
    if (!vm["kv-memory-mb"].defaulted() && host::app::is_decoder_model(mo.model))
      return std::cerr << "tessera-host: --kv-memory-mb does not apply on tiles (the KV cache lives in tile memory): use "
                          "--kv-blocks or --tile-memory\n", 2;
    mo.serve = vm.count("serve") > 0;
    mo.plan_only = vm.count("plan-only") > 0;
    if (!(mo.check_bound >= 0) || !std::isfinite(mo.check_bound))
      return std::cerr << "tessera-host: --check-bound must be a finite number >= 0 (0: the derived bound)\n", 2;
    if (mo.plan_only && (mo.serve || vm.count("prompt-ids") || !vm["check"].defaulted()))
      return std::cerr << "tessera-host: --plan-only prints the plan and exits: drop --serve, --check and --prompt-ids\n", 2;
    mo.seeded_shards = vm.count("seeded-shards") > 0;
    if (vm.count("prompt-ids")) {
      std::stringstream ss(prompt_ids_text);
      std::string item;
      while (std::getline(ss, item, ',')) {
        size_t pos = 0;
        long long v = -1;
        try { v = std::stoll(item, &pos); } catch (...) { pos = 0; }
        if (pos == 0 || pos != item.size() || v < 0 || v > INT32_MAX)
          return std::cerr << "tessera-host: --prompt-ids: \"" << item << "\" is not a token id (comma-separated integers)\n", 2;
        mo.prompt_ids.push_back(static_cast<int32_t>(v));
      }
      if (mo.prompt_ids.empty()) return std::cerr << "tessera-host: --prompt-ids is empty\n", 2;
      if (mo.generate_tokens < 1) return std::cerr << "tessera-host: --generate must be at least 1\n", 2;
      if (mo.serve || mo.check_batches > 0)
        return std::cerr << "tessera-host: --prompt-ids generates one sequence and exits: drop --serve and --check\n", 2;
    } else {
      for (const char* o : {"results", "logits"})
        if (vm.count(o)) return std::cerr << "tessera-host: --" << o << " goes with --prompt-ids\n", 2;
      if (mo.seeded_shards && !mo.plan_only)
        return std::cerr << "tessera-host: --seeded-shards keeps no model in this process, so --check and --serve (which "
                            "need one) are refused: generate with --prompt-ids\n", 2;
      if (!mo.serve && !mo.plan_only && mo.check_batches == 0) mo.check_batches = 1;
    }
  }
  if (!faults_spec.empty()) {
    auto f = host::app::load_host_faults(faults_spec, {.tiles = static_cast<int>(cfg.tiles),
                                                       .launches_tiles = cfg.launch_local,
                                                       .serves = !mo.model.empty() && mo.serve,
                                                       .spawned_gpus = mo.spawn_gpu});
    if (!f) return std::cerr << "tessera-host: " << f.error().message() << "\n", 2;
    if (!f->tiles.empty()) cfg.extra_tile_args.insert(cfg.extra_tile_args.end(), {"--faults", f->tiles.to_json()});
    mo.gpu_faults = f->host;
    mo.tile_faults = !f->tiles.empty();
  }
  // GPU backends serve requests; --check runs batches on the tiles alone, so without --serve
  // they would start nothing and say nothing.
  if (vm.count("plan-only") && mo.model.empty())
    return std::cerr << "tessera-host: --plan-only needs --model (the plan of a model on --tiles)\n", 2;
  if (!mo.model.empty() && !mo.serve && (mo.spawn_gpu > 0 || !mo.gpu_endpoints.empty() || mo.gpu_replicas > 0))
    return std::cerr << "tessera-host: --spawn-gpu, --gpu-endpoint and --gpu-replicas add GPU backends to the "
                        "HTTP server: add --serve (--check runs on the tiles alone)\n", 2;
  if (!cfg.launch_local)
    std::cerr << "tessera-host: waiting for " << cfg.tiles << " tiles to register at " << cfg.control_bind << "\n";
  if (!mo.model.empty())
    return host::app::is_decoder_model(mo.model) ? host::app::run_decoder_model(cfg, mo) : host::app::run_model(cfg, mo);
  if (demo.m <= 0 || demo.k <= 0 || demo.n <= 0 || demo.reps <= 0)
    return std::cerr << "tessera-host: --m, --k, --n and --reps must be positive\n", 2;
  if (demo.demo != "matmul" && demo.demo != "matmul-columns" && demo.demo != "matmul-inner" && demo.demo != "allreduce")
    return std::cerr << "tessera-host: unknown --demo '" << demo.demo << "'; use matmul, matmul-columns, matmul-inner or allreduce\n", 2;
  auto g = host::tile_group::start(cfg);
  if (!g) return std::cerr << "tessera-host: " << g.error().to_string() << "\n", 1;
  int rc = host::app::run_demo(**g, demo);
  if (mo.tile_faults) std::printf("faults injected by the tiles: %s\n", host::app::describe_tile_faults(**g).c_str());
  (*g)->shutdown();
  return rc;
}
