// tessera-gpu: the GPU baseline backend process. Loads a model once, binds a ROUTER and serves
// infer_batch with a pool of worker threads until SIGINT/SIGTERM (then answers what it
// accepted). Parses options and wires parts; gpu_server does the work.
#include <signal.h>
#include <sys/prctl.h>

#include <atomic>
#include <cstdio>
#include <boost/program_options.hpp>
#include <iostream>
#include <thread>

#include "tessera/common/log.hpp"
#include "tessera/exchange/security.hpp"
#include "tessera/backends/gpu_llm.hpp"
#include "tessera/gpu/gpu_server.hpp"
#include "tessera/backends/decoder_backend.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/serving/serve_llm.hpp"
#include "tessera/serving/serve_options.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera;

namespace {

// tessera-gpu --serve: a decoder on the OpenAI API, from this one process.
int serve_decoder(const std::string& model_name, uint64_t seed, models::dtype dt, const gpu::gpu_server_config& cfg,
                  serving::llm_serve_options& lo, serving::serve_options& so) {
  auto fail = [](const status& st) {
    std::cerr << "tessera-gpu: " << st.message() << "\n";
    return 2;
  };
  if (auto st = serving::finish_llm_options(lo); st.code() != errc::ok) return fail(st);
  if (auto st = serving::finish_serve_options(so); st.code() != errc::ok) return fail(st);
  auto loaded = models::load_decoder(model_name, seed);
  if (!loaded) return fail(loaded.error());
  // bf16: the matrices converted once (refused where the CPU has no native bf16), and the KV cache
  // in bf16: --kv-memory-mb holds twice the blocks.
  if (auto st = loaded->set_dtype(dt); !st.ok()) return fail(st);
  auto model = std::make_shared<const models::decoder_model>(std::move(*loaded));
  const int32_t blocks = lo.kv_blocks > 0 ? lo.kv_blocks
                                          : backends::kv_blocks_for_bytes(model->shape(), lo.block_tokens,
                                                                          static_cast<int64_t>(lo.kv_memory_mb * (1 << 20)), dt);
  std::fprintf(stderr, "tessera-gpu: %s in %s, KV cache %d blocks of %d positions (%s)\n", model_name.c_str(),
               std::string(models::dtype_name(dt)).c_str(), blocks, lo.block_tokens,
               std::string(models::dtype_name(dt)).c_str());
  auto backend = backends::make_gpu_llm_backend(
      model, {.name = cfg.name, .system = cfg.preset, .kv = {lo.block_tokens, blocks, dt}, .omp_threads = cfg.omp_threads});
  if (!backend) return fail(backend.error());
  return serving::serve_llm({.backends = {*backend}, .model = model_name, .arch = model->shape().arch,
                             .program = "tessera-gpu",
                             .listening_suffix = " gpu " + cfg.preset + " batching " + lo.batching_name},
                            lo, so);
}

}  // namespace

int main(int argc, char** argv) {
  log::init_from_env();
  log::set_prefix("gpu");
  gpu::gpu_server_config cfg;
  std::string model_name = "bert-tiny", dtype_name = "fp32", timing_dtype_name = "fp16";
  uint64_t seed = 0;
  std::string keys_dir;
  serving::llm_serve_options lo;
  serving::serve_options so;
  so.port = 0;
  po::options_description opts(
      "tessera-gpu: the GPU baseline backend: one process, the whole model in one memory, a pool of\n"
      "worker threads; serves infer_batch / infer_result (exchange/protocol.hpp) on a ROUTER socket.\n"
      "Prints 'listening on <endpoint>' once ready; SIGTERM answers accepted batches, then exits 0.\n\n"
      "Examples:\n"
      "  tessera-gpu --model bert-tiny --bind tcp://127.0.0.1:0 --threads 2\n"
      "  tessera-gpu --model bert-base --dtype bf16 --bind tcp://127.0.0.1:7000   # a host in bf16 only\n"
      "  tessera-gpu --model bert-base --dtype int8 --bind tcp://127.0.0.1:7000   # a host in int8 only\n"
      "  tessera-gpu --model path/to/hf-folder --bind tcp://0.0.0.0:7000 --keys /etc/tessera/keys --omp-threads 4\n"
      "  tessera-host --model bert-tiny --tiles 2 --serve --keys /etc/tessera/keys \\\n"
      "      --gpu-endpoint tcp://gpuhost:7000 --routing hybrid\n"
      "With --serve it serves a decoder (gpt2-*, llama-*, or a folder) itself on the OpenAI API\n"
      "(tessera-serve's routes), static or continuous batching, each step also costed on --preset\n"
      "(TTFT, inter-token and end-to-end latency on the wall clock and the modelled clock):\n"
      "  tessera-gpu --model llama-tiny --serve --port 8000 --llm-batching static\n\n"
      "Options");
  opts.add_options()
    ("help,h", "show this help")
    ("model", po::value(&model_name)->default_value(model_name), "preset (bert-tiny, bert-mini, bert-base, ...) or Hugging Face folder (a classifier, a reranker or a sentence-transformers embedding model)")
    ("seed", po::value(&seed)->default_value(0), "seed of a preset's random weights (must match the host's)")
    ("bind", po::value(&cfg.bind)->default_value(cfg.bind), "ROUTER endpoint: tcp://ADDR:PORT (0 = any free port) or ipc:///path")
    ("threads", po::value(&cfg.threads)->default_value(cfg.threads), "worker threads (batches in parallel)")
    ("omp-threads", po::value(&cfg.omp_threads)->default_value(cfg.omp_threads), "oneDNN/OpenMP threads inside one forward")
    ("preset", po::value(&cfg.preset)->default_value(cfg.preset), "GPU preset of the timing model (modelled_seconds)")
    ("dtype", po::value(&dtype_name)->default_value(dtype_name), "fp32, bf16 or int8: what a BERT forward computes in "
     "(bf16: weights converted once; int8: the encoder's Linear layers quantized and calibrated once, docs/models.md "
     "\"int8\"; packed and padded batches; a host in another dtype is refused); with --serve, a decoder's matrices "
     "and KV cache in fp32 or bf16 (bf16: twice the KV blocks in --kv-memory-mb; int8 is refused)")
    ("timing-dtype", po::value(&timing_dtype_name)->default_value(timing_dtype_name),
     "dtype of the modelled clock: fp16 (the 16-bit tensor-core rate, also bf16's) or fp32; independent of --dtype")
    ("parallel-forwards", "let worker threads run forwards at the same time (default: they take turns, see reference_backend.hpp)")
    ("max-queued-batches", po::value(&cfg.max_queued_batches)->default_value(cfg.max_queued_batches), "batches accepted at once; beyond, answered 'overloaded'")
    ("keys", po::value(&keys_dir), "CurveZMQ key directory (tessera-tile --make-keys DIR; this machine needs gpu.pub, "
     "gpu.key, host.pub): encrypt the socket and admit the host's key alone")
    ("insecure", "allow a plain socket off loopback (no --keys); only on a trusted network")
    ("name", po::value(&cfg.name)->default_value(cfg.name), "name in logs")
    ("die-with-parent", "exit when the parent process exits (local launches by tessera-host)")
    ("serve", "serve a decoder on the OpenAI API (HTTP) instead of the backend protocol");
  po::options_description serve_opts("--serve (a decoder on the OpenAI API)");
  serve_opts.add_options()
    ("address", po::value(&so.server.address)->default_value(so.server.address), "address to listen on")
    ("port", po::value(&so.port)->default_value(so.port), "HTTP port (0 = any free port)");
  serving::add_llm_options(serve_opts, lo);
  opts.add(serve_opts);
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-gpu", argc, argv, opts, vm)) return *done;
  if (vm.count("serve")) {
    // The backend protocol's flags mean nothing to the HTTP server: refused, not ignored.
    for (const char* f : {"bind", "threads", "parallel-forwards", "max-queued-batches", "keys", "die-with-parent"})
      if (vm.count(f) && !vm[f].defaulted())
        return std::cerr << "tessera-gpu: --" << f << " is a flag of the backend protocol, not of --serve\n", 2;
    if (timing_dtype_name != "fp16")
      return std::cerr << "tessera-gpu: --serve costs steps with the LLM step model, which is fp16 only\n", 2;
    auto dt = models::parse_dtype(dtype_name);
    if (!dt) return std::cerr << "tessera-gpu: --dtype: " << dt.error().message() << "\n", 2;
    so.insecure = vm.count("insecure") > 0;
    serving::take_stop_signals();  // before any thread starts
    return serve_decoder(model_name, seed, *dt, cfg, lo, so);
  }
  for (const auto& o : serve_opts.options()) {
    const std::string& f = o->long_name();
    if (vm.count(f) && !vm[f].defaulted()) return std::cerr << "tessera-gpu: --" << f << " goes with --serve\n", 2;
  }
  auto timing_dtype = timing::parse_dtype(timing_dtype_name);
  if (!timing_dtype) return std::cerr << "tessera-gpu: --timing-dtype: " << timing_dtype.error().message() << "\n", 2;
  cfg.timing_dtype = *timing_dtype;
  auto dtype = models::parse_dtype(dtype_name, /*allow_int8=*/true);
  if (!dtype) {
    std::cerr << "tessera-gpu: --dtype: " << dtype.error().message();
    if (dtype_name == "fp16") std::cerr << " (the modelled clock's dtype is --timing-dtype fp16)";
    return std::cerr << "\n", 2;
  }
  cfg.serialize_forwards = !vm.count("parallel-forwards");
  if (!keys_dir.empty()) {
    auto sec = exchange::load_security(keys_dir, exchange::security_role::gpu);
    if (!sec) return std::cerr << "tessera-gpu: --keys: " << sec.error().message() << "\n", 2;
    exchange::set_process_security(*sec);
  } else if (!vm.count("insecure") && !exchange::is_loopback_endpoint(cfg.bind)) {
    return std::cerr << "tessera-gpu: --bind " << cfg.bind
                     << " leaves this machine: pass --keys DIR (made by tessera-tile --make-keys DIR; the GPU "
                        "machine needs gpu.pub, gpu.key and host.pub) or --insecure\n", 2;
  }
  if (vm.count("die-with-parent")) prctl(PR_SET_PDEATHSIG, SIGTERM);

  // Block the stop signals before any thread starts; one thread waits for them.
  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGINT);
  sigaddset(&stop_set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);

  // Classifiers, rerankers and embedding models (sentence-transformers folders: pooled in this process).
  auto loaded = models::load_encoder(model_name, seed);
  if (!loaded) return std::cerr << "tessera-gpu: " << loaded.error().to_string() << "\n", 2;
  // bf16 and int8: checks the CPU (refused with a message where the dtype would not run natively)
  // and converts the weights once (int8: calibrated on the seeded set first), before the socket is bound.
  if (auto st = models::set_dtype(*loaded, *dtype); !st.ok())
    return std::cerr << "tessera-gpu: " << st.message() << "\n", 2;
  auto model = std::make_shared<const models::bert_model>(std::move(*loaded));
  auto server = gpu::gpu_server::create(model, cfg);
  if (!server) return std::cerr << "tessera-gpu: " << server.error().to_string() << "\n", 2;

  std::atomic<bool> stop{false};
  std::thread([&stop, stop_set] {
    int sig = 0;
    sigwait(&stop_set, &sig);
    TESSERA_LOG_INFO("signal " << sig << ": answering accepted batches, then stopping");
    stop.store(true);
  }).detach();

  std::cout << "listening on " << (*server)->endpoint() << std::endl;
  (*server)->run(stop);
  std::cerr << "tessera-gpu: answered " << (*server)->batches_answered() << " batches, rejected "
            << (*server)->bad_messages() << " bad messages, refused " << exchange::zap_denied()
            << " CURVE peers whose key is not the host's\n";
  return 0;
}
