// tessera-serve: serves one model over HTTP (TEI + KServe v2) with in-process backends: the
// reference engine over a models preset or Hugging Face folder, or the toy model (--model toy)
// to measure the front door alone. Parses options and wires parts; nothing else.
#include <boost/program_options.hpp>
#include <iostream>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/backends/decoder_backend.hpp"
#include "tessera/backends/reference_backend.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/gguf_reader.hpp"
#include "tessera/common/log.hpp"
#include "tessera/serving/http_server.hpp"
#include "tessera/serving/model_adapters.hpp"
#include "tessera/serving/router.hpp"
#include "tessera/serving/serve_options.hpp"
#include "tessera/serving/serve_llm.hpp"
#include "tessera/toys/toy_llm.hpp"
#include "tessera/toys/toy_model.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera;
using namespace tessera::serving;
using namespace tessera::toys;

namespace {

/// A decoder preset, a GGUF file (or a name ending in .gguf: loading says what is wrong with it) or
/// a folder whose config.json is a decoder's (parse_decoder_config_json).
bool is_decoder(const std::string& name) {
  if (!std::filesystem::is_directory(name)) {
    if (models::looks_like_gguf(name)) return true;
    auto s = models::shape_preset(name);
    return s && s->is_decoder();
  }
  std::ifstream in(std::filesystem::path(name) / "config.json");
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  return models::parse_decoder_config_json(ss.str()).has_value();
}

}  // namespace

int main(int argc, char** argv) {
  take_stop_signals();  // before any thread starts; main waits for them below
  log::init_from_env();
  log::set_prefix("serve");
  serve_options so;
  so.batching.kind = policy_kind::dynamic_padded;
  so.batching.max_batch_size = 64;
  so.batching.token_budget = 8192;
  so.batching.max_inflight_batches = 1;
  std::string model_name, kinds, dtype_text = "fp32";
  int replicas = 1, threads = 1, omp_threads = 1;
  double toy_ns = 0, toy_llm_step_us = 0, toy_llm_token_us = 0;
  llm_serve_options lo;
  bool serialize_forwards = false;
  po::options_description opts(
      "tessera-serve: serve a BERT classifier over HTTP (TEI /predict, /tokenize, /info, "
      "/health, /metrics; KServe v2)\n\nExample:\n"
      "  tessera-serve --model bert-tiny --port 8080 --batching dynamic --max-batch-size 64\n\n"
      "Options");
  opts.add_options()
      ("help", "print this help")
      ("model", po::value(&model_name)->default_value("bert-tiny"),
       "preset (bert-tiny, bert-mini, bert-small, bert-base, bert-large; decoders, served on the "
       "OpenAI API: gpt2-tiny, gpt2, gpt2-medium, llama-tiny, llama-1b), Hugging Face folder, a GGUF file "
       "(a decoder with its tokenizer and chat template), "
       "'toy' (a hash model that measures the front door alone) or 'toy-llm' (a hash decoder)")
      ("replicas", po::value(&replicas)->default_value(1), "in-process backends behind the router")
      ("kinds", po::value(&kinds)->default_value("gpu"),
       "comma-separated kind per replica, cycled (gpu, tiles, reference); see --routing hybrid")
      ("threads", po::value(&threads)->default_value(1), "worker threads per backend")
      ("omp-threads", po::value(&omp_threads)->default_value(1), "OpenMP threads inside one forward")
      ("dtype", po::value(&dtype_text)->default_value(dtype_text),
       "fp32, bf16 or int8 (the encoder's Linear layers, docs/models.md \"int8\"): a BERT model's forward, "
       "packed and padded batches alike")
      ("serialize-forwards", po::bool_switch(&serialize_forwards),
       "reference forwards take turns process-wide (a safety switch)")
      ("toy-ns-per-token", po::value(&toy_ns)->default_value(0.0), "toy model: busy work per token (ns)")
      ("toy-llm-step-us", po::value(&toy_llm_step_us)->default_value(0.0), "toy-llm: time per step (us, slept)")
      ("toy-llm-token-us", po::value(&toy_llm_token_us)->default_value(0.0),
       "toy-llm: time per computed token (us, slept)");
  add_serve_options(opts, so);
  add_llm_options(opts, lo);
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-serve", argc, argv, opts, vm)) return *done;
  if (auto st = finish_llm_options(lo); !st.ok()) {
    std::cerr << "tessera-serve: " << st.message() << "\n";
    return 2;
  }
  if (auto st = finish_serve_options(so); !st.ok()) {
    std::cerr << "tessera-serve: " << st.message() << "\n";
    return 2;
  }
  auto dt = models::parse_dtype(dtype_text, /*allow_int8=*/true);
  if (!dt) {
    std::cerr << "tessera-serve: --dtype: " << dt.error().message() << "\n";
    return 2;
  }
  if (replicas < 1 || replicas > 64 || threads < 1 || omp_threads < 1) {
    std::cerr << "tessera-serve: --replicas (1..64), --threads and --omp-threads must be >= 1\n";
    return 2;
  }
  std::vector<std::string> kind_list;
  for (size_t p = 0; p <= kinds.size();) {
    size_t c = kinds.find(',', p);
    if (c == std::string::npos) c = kinds.size();
    if (c > p) kind_list.push_back(kinds.substr(p, c - p));
    p = c + 1;
  }
  if (kind_list.empty()) kind_list.push_back("gpu");
  auto kind_of = [&](int i) { return kind_list[static_cast<size_t>(i) % kind_list.size()]; };

  serving_metrics metrics;
  router r(so.routing, default_clock(), &metrics);
  std::shared_ptr<const tokenizer> tok;
  model_info info;
  std::vector<std::shared_ptr<backends::backend>> backends;
  // A decoder: the OpenAI API over an llm_engine (the router stays empty).
  std::unique_ptr<llm_engine> engine;
  llm_api llm;
  std::string_view arch_chat = "plain";  // the decoder's default chat format (its architecture's traits)
  if (model_name == "toy-llm") {
    auto backend = make_toy_llm_backend(
        {.num_blocks = lo.kv_blocks > 0 ? lo.kv_blocks : 1024, .block_tokens = lo.block_tokens,
         .per_token = std::chrono::nanoseconds(static_cast<int64_t>(toy_llm_token_us * 1e3)),
         .per_step = std::chrono::nanoseconds(static_cast<int64_t>(toy_llm_step_us * 1e3))});
    llm.tokenizer = make_byte_tokenizer();
    llm.model_id = "toy-llm";
    engine = std::make_unique<llm_engine>(lo.engine, backend, llm.tokenizer, &metrics);
  } else if (is_decoder(model_name)) {
    auto loaded = models::load_decoder(model_name);
    if (!loaded) {
      std::cerr << "tessera-serve: " << loaded.error().to_string() << "\n";
      return 2;
    }
    auto model = std::make_shared<const models::decoder_model>(std::move(*loaded));
    arch_chat = model->shape().traits().chat_format;
    auto bpe = models::load_decoder_tokenizer(model_name, model->shape().traits().tokenizer);
    if (!bpe) {
      std::cerr << "tessera-serve: " << bpe.error().to_string() << "\n";
      return 2;
    }
    const int32_t blocks = lo.kv_blocks > 0 ? lo.kv_blocks
                                            : backends::kv_blocks_for_bytes(model->shape(), lo.block_tokens,
                                                                            static_cast<int64_t>(lo.kv_memory_mb * (1 << 20)));
    auto backend = backends::make_decoder_backend(
        model, {.name = "ref0", .kind = "reference", .kv = {lo.block_tokens, blocks}, .omp_threads = omp_threads});
    if (!backend) {
      std::cerr << "tessera-serve: " << backend.error().to_string() << "\n";
      return 2;
    }
    llm.tokenizer = make_bpe_llm_tokenizer(std::move(*bpe));
    std::string id = model_name;
    while (!id.empty() && id.back() == '/') id.pop_back();
    if (auto slash = id.find_last_of('/'); slash != std::string::npos) id = id.substr(slash + 1);
    llm.model_id = id;
    engine = std::make_unique<llm_engine>(lo.engine, *backend, llm.tokenizer, &metrics);
  }
  if (*dt != models::dtype::fp32 && (engine || model_name == "toy")) {
    std::cerr << "tessera-serve: --dtype " << dtype_text << " is for BERT models\n";
    return 2;
  }
  if (engine) {  // no encoder tokenizer: the TEI and KServe routes answer that a decoder is served
    info.model_id = llm.model_id;
    attach_engine(llm, *engine, lo.chat_template, arch_chat);
    engine->start();
  } else if (model_name == "toy") {
    tok = make_toy_tokenizer();
    info.model_id = "toy";
    for (int i = 0; i < replicas; ++i)
      backends.push_back(make_toy_backend({.name = kind_of(i) + std::to_string(i), .kind = kind_of(i)},
                                          threads,
                                          std::chrono::nanoseconds(static_cast<int64_t>(toy_ns))));
  } else {
    // Every encoder task: a classifier, a reranker (one label) or an embedding model
    // (a sentence-transformers folder); the reference backend pools an embedding model's rows.
    auto loaded = models::load_encoder(model_name);
    if (!loaded) {
      std::cerr << "tessera-serve: " << loaded.error().to_string() << "\n";
      return 2;
    }
    if (auto st = models::set_dtype(*loaded, *dt); st.code() != tessera::errc::ok) {
      std::cerr << "tessera-serve: " << st.message() << "\n";
      return 2;
    }
    auto model = std::make_shared<const models::bert_model>(std::move(*loaded));
    auto t = make_model_tokenizer(*model);
    if (!t) {
      std::cerr << "tessera-serve: " << t.error().to_string() << "\n";
      return 2;
    }
    tok = *t;
    std::string id = model_name;
    while (!id.empty() && id.back() == '/') id.pop_back();
    if (auto slash = id.find_last_of('/'); slash != std::string::npos) id = id.substr(slash + 1);
    info = model_info_of(*model, id);
    for (int i = 0; i < replicas; ++i)
      backends.push_back(backends::make_reference_backend(
          model, {.name = kind_of(i) + std::to_string(i), .kind = kind_of(i), .threads = threads,
                  .omp_threads = omp_threads, .serialize_forwards = serialize_forwards}));
  }
  for (auto& b : backends) {
    batching_config bc = so.batching_for(b->info().kind);
    bc.max_sequence_length = info.max_input_length;
    if (auto st = r.add_backend(b, bc); !st.ok()) {
      std::cerr << "tessera-serve: " << st.message() << "\n";
      return 2;
    }
  }
  r.start();
  http_server server(so.server, r, tok, info, metrics);
  if (engine) server.api().set_llm(llm);
  if (auto st = server.start(); !st.ok()) {
    std::cerr << "tessera-serve: " << st.to_string() << "\n";
    return 2;
  }
  // The one line scripts and tests wait for.
  accept_graceful_stop();  // a stop signal from now on is graceful (the listening line invites one)
  std::cout << "listening on " << (so.server.tls_cert.empty() ? "http" : "https") << "://" << so.server.address << ":" << server.port() << " model "
            << info.model_id << " batching "
            << (engine ? lo.batching_name : std::string(policy_kind_name(so.batching.kind)))
            << " replicas " << replicas << std::endl;
  int sig = wait_for_stop_signal();
  TESSERA_LOG_INFO("signal " << sig << ": answering what was accepted, then stopping");
  server.stop();
  if (engine) engine->stop();
  r.stop();
  return 0;
}
