// tessera-serve: serves one model over HTTP (TEI + KServe v2) with in-process backends: the
// reference engine over a models preset or Hugging Face folder, or the toy model (--model toy)
// to measure the front door alone. Parses options and wires parts; nothing else.
#include <csignal>
#include <iostream>
#include <pthread.h>
#include <boost/program_options.hpp>

#include "tessera/common/log.hpp"
#include "tessera/serving/http_server.hpp"
#include "tessera/serving/router.hpp"
#include "tessera/serving/toy_model.hpp"
#ifdef TESSERA_SERVING_HAS_MODELS
#include "tessera/serving/reference_backend.hpp"
#endif

namespace po = boost::program_options;
using namespace tessera;
using namespace tessera::serving;

int main(int argc, char** argv) {
  log::init_from_env();
  log::set_prefix("serve");
  std::string model_name, address, batching, routing, kinds;
  int port, io_threads, replicas, threads, omp_threads, max_batch, token_budget, max_queue,
      inflight, long_threshold, client_batch, timeout_ms;
  double delay_ms, max_age_ms, toy_ns;
  size_t max_body;
  bool auto_truncate = false;
  po::options_description opts("tessera-serve: serve a BERT classifier over HTTP (TEI + KServe v2)");
  opts.add_options()
      ("help", "print this help")
      ("model", po::value(&model_name)->default_value("bert-tiny"),
       "preset (bert-tiny, bert-mini, bert-small, bert-base, bert-large), Hugging Face folder, or 'toy'")
      ("address", po::value(&address)->default_value("127.0.0.1"), "bind address")
      ("port", po::value(&port)->default_value(8080), "port (0 = any free port, printed)")
      ("io-threads", po::value(&io_threads)->default_value(2), "threads running the HTTP io_context")
      ("replicas", po::value(&replicas)->default_value(1), "in-process backends behind the router")
      ("kinds", po::value(&kinds)->default_value("gpu"),
       "comma-separated kind per replica, cycled (gpu, tiles, reference); for --routing hybrid")
      ("threads", po::value(&threads)->default_value(1), "worker threads per backend")
      ("omp-threads", po::value(&omp_threads)->default_value(1), "OpenMP threads per forward")
      ("batching", po::value(&batching)->default_value("dynamic"), "static | dynamic | token-budget")
      ("max-batch-size", po::value(&max_batch)->default_value(64), "B: sequences per batch")
      ("token-budget", po::value(&token_budget)->default_value(8192), "tokens per batch (token-budget; caps padded)")
      ("max-queue-delay-ms", po::value(&delay_ms)->default_value(2.0), "wait at most this for a fuller batch")
      ("max-age-ms", po::value(&max_age_ms)->default_value(50.0), "token-budget: starving requests go first")
      ("max-queue", po::value(&max_queue)->default_value(4096), "queued sequences per backend before 429")
      ("max-inflight-batches", po::value(&inflight)->default_value(0), "batches at a backend at once (0 = threads)")
      ("routing", po::value(&routing)->default_value("least-outstanding"), "least-outstanding | hybrid")
      ("long-threshold", po::value(&long_threshold)->default_value(128), "hybrid: longer -> tiles, else gpu")
      ("max-client-batch-size", po::value(&client_batch)->default_value(32), "inputs per request")
      ("timeout-ms", po::value(&timeout_ms)->default_value(30000), "per-request deadline (0 = none)")
      ("max-body-bytes", po::value(&max_body)->default_value(2u << 20), "request body limit (413 beyond)")
      ("auto-truncate", po::bool_switch(&auto_truncate), "truncate long inputs unless the request says not to")
      ("toy-ns-per-token", po::value(&toy_ns)->default_value(0.0), "toy model: busy work per token (ns)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "tessera-serve: " << e.what() << "; see --help\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  auto policy = parse_policy_kind(batching);
  auto strategy = parse_routing_strategy(routing);
  if (!policy || !strategy || port < 0 || port > 65535 || replicas < 1 || threads < 1) {
    std::cerr << "tessera-serve: "
              << (!policy ? policy.error().message()
                          : !strategy ? strategy.error().message()
                                      : std::string("--port, --replicas and --threads need sane values"))
              << "\n";
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

  // Block the stop signals in every thread; main waits for them below.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  serving_metrics metrics;
  routing_config rc{.strategy = *strategy, .long_threshold = long_threshold};
  router r(rc, default_clock(), &metrics);
  std::shared_ptr<const tokenizer> tok;
  model_info info;
  std::vector<std::shared_ptr<host::backend>> backends;
  if (model_name == "toy") {
    tok = make_toy_tokenizer();
    info.model_id = "toy";
    for (int i = 0; i < replicas; ++i) {
      std::string kind = kind_list[static_cast<size_t>(i) % kind_list.size()];
      backends.push_back(make_toy_backend({.name = kind + std::to_string(i), .kind = kind}, threads,
                                          std::chrono::nanoseconds(static_cast<int64_t>(toy_ns))));
    }
  } else {
#ifdef TESSERA_SERVING_HAS_MODELS
    auto loaded = models::load_model(model_name);
    if (!loaded) {
      std::cerr << "tessera-serve: " << loaded.error().to_string() << "\n";
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
    if (auto slash = id.find_last_of('/'); slash != std::string::npos && slash + 1 < id.size())
      id = id.substr(slash + 1);
    info = model_info_of(*model, id);
    for (int i = 0; i < replicas; ++i) {
      std::string kind = kind_list[static_cast<size_t>(i) % kind_list.size()];
      backends.push_back(make_reference_backend(
          model, {.name = kind + std::to_string(i), .kind = kind, .threads = threads,
                  .omp_threads = omp_threads}));
    }
#else
    std::cerr << "tessera-serve: built without tessera_models; only --model toy works\n";
    return 2;
#endif
  }
  batching_config bc;
  bc.kind = *policy;
  bc.max_batch_size = max_batch;
  bc.token_budget = token_budget;
  bc.max_sequence_length = info.max_input_length;
  bc.max_queue_delay = std::chrono::microseconds(static_cast<int64_t>(delay_ms * 1000));
  bc.max_age = std::chrono::microseconds(static_cast<int64_t>(max_age_ms * 1000));
  bc.max_queue_requests = static_cast<size_t>(std::max(1, max_queue));
  bc.max_inflight_batches = inflight > 0 ? inflight : threads;
  for (auto& b : backends) {
    if (auto st = r.add_backend(b, bc); !st) {
      std::cerr << "tessera-serve: " << st.to_string() << "\n";
      return 2;
    }
  }
  r.start();
  server_config sc;
  sc.address = address;
  sc.port = static_cast<uint16_t>(port);
  sc.io_threads = io_threads;
  sc.api.max_client_batch_size = client_batch;
  sc.api.request_timeout = std::chrono::milliseconds(timeout_ms);
  sc.api.auto_truncate = auto_truncate;
  sc.api.max_body_bytes = max_body;
  http_server server(sc, r, tok, info, metrics);
  if (auto st = server.start(); !st) {
    std::cerr << "tessera-serve: " << st.to_string() << "\n";
    return 2;
  }
  // The one line scripts and tests wait for.
  std::cout << "listening on http://" << address << ":" << server.port() << " model " << info.model_id
            << " batching " << policy_kind_name(*policy) << " replicas " << replicas << std::endl;
  int sig = 0;
  sigwait(&sigs, &sig);
  TESSERA_LOG_INFO("signal " << sig << ": stopping");
  server.stop();
  r.stop();
  return 0;
}
