// tessera/serving/serve_options.hpp: the serving command-line flags, shared by tessera-serve and
// tessera-host (same names everywhere), and the signal handling of a serving main().
//
//   take_stop_signals();                          // first in main(), before any thread starts
//   serve_options so;
//   po::options_description opts("tessera-host");
//   add_serve_options(opts, so);                  // --address --port --batching --routing ...
//   po::store(po::parse_command_line(argc, argv, opts), vm); po::notify(vm);
//   if (auto st = finish_serve_options(so); !st.ok()) { std::cerr << st.message(); return 2; }
//   router r(so.routing, default_clock(), &metrics);
//   for (auto& b : backends) r.add_backend(b, so.batching);
//   r.start();
//   http_server server(so.server, r, tokenizer, info, metrics);
//   server.start();
//   accept_graceful_stop();                       // then print the listening line
//   wait_for_stop_signal();                       // SIGINT / SIGTERM
//   server.stop(); r.stop();
#pragma once

#include <boost/program_options/options_description.hpp>
#include <string>
#include <string_view>

#include "tessera/common/status.hpp"
#include "tessera/serving/batching_policy.hpp"
#include "tessera/serving/http_server.hpp"
#include "tessera/serving/llm_engine.hpp"
#include "tessera/serving/router.hpp"

namespace tessera::serving {

struct serve_options {
  server_config server;
  batching_config batching;
  routing_config routing;
  // Raw flag values, turned into the configs above by finish_serve_options().
  std::string batching_name = "dynamic";
  std::string routing_name = "least-outstanding";
  double max_queue_delay_ms = 2.0;
  double max_age_ms = 50.0;
  double timeout_ms = 30000.0;
  double answer_grace_ms = 1000.0;
  int port = 8080;
  std::string gpu_batching_name;    ///< --gpu-batching ("" = --batching)
  std::string tiles_batching_name;  ///< --tiles-batching ("" = --batching)
  batching_config gpu_batching;     ///< filled by finish_serve_options()
  batching_config tiles_batching;
  std::string api_key_file;         ///< --api-key-file (read into server.api_key)
  /// --insecure: serve a non-loopback --address without the API key or TLS. tessera-host reads
  /// the same flag for its control socket.
  bool insecure = false;

  /// The batching of a backend of this kind ("gpu", "tiles"; any other kind gets --batching).
  const batching_config& batching_for(std::string_view kind) const {
    if (kind == "gpu") return gpu_batching;
    if (kind == "tiles") return tiles_batching;
    return batching;
  }
};

/// Adds --address --port --io-threads --batching --max-batch-size --token-budget
/// --max-queue-delay-ms --max-age-ms --max-queue --max-inflight-batches --routing
/// --long-threshold --max-client-batch-size --timeout-ms --answer-grace-ms --max-body-bytes
/// --auto-truncate, --gpu-batching / --tiles-batching (a policy per backend kind; the
/// other batching flags are shared), and the port's security: --api-key / --api-key-file,
/// --tls-cert / --tls-key, --insecure.
void add_serve_options(boost::program_options::options_description& opts, serve_options& so);

/// How a decoder is served (tessera-serve with a decoder model).
struct llm_serve_options {
  int32_t kv_blocks = 0;          ///< --kv-blocks (0: what --kv-memory-mb holds)
  double kv_memory_mb = 256;      ///< --kv-memory-mb: the KV cache's size when --kv-blocks is 0
  int32_t block_tokens = 16;      ///< --kv-block-tokens
  std::string batching_name = "continuous";  ///< --llm-batching continuous|static
  int32_t step_token_budget = 512;   ///< --step-token-budget
  int32_t max_running = 256;         ///< --max-running
  int32_t static_batch_size = 16;    ///< --static-batch-size
  bool no_prefix_caching = false;    ///< --no-prefix-caching
  std::string chat_template;         ///< --chat-template ("" = from the checkpoint, else plain)
  size_t max_queued = 4096;          ///< --max-llm-queue
  std::string step_log;              ///< --llm-step-log
  std::string request_log;           ///< --llm-request-log
  std::string async_scheduling = "off";  ///< --async-scheduling on|off (llm_engine_config::async_scheduling)
  llm_engine_config engine;          ///< filled by finish_llm_options()
};

/// Adds the decoder-serving flags above.
void add_llm_options(boost::program_options::options_description& opts, llm_serve_options& lo);
/// Checks them and fills lo.engine (its KV block count is settled by the caller, who knows the
/// bytes of a block).
status finish_llm_options(llm_serve_options& lo);

/// Parses names and units into the configs; errors say which flag to change. Refuses an
/// --address off loopback unless both the API key and TLS are configured, or --insecure.
status finish_serve_options(serve_options& so);

/// Takes SIGINT and SIGTERM on a thread of its own for the rest of the process's life. Call it
/// first in main(), before any thread starts: it blocks them in the calling thread, and every
/// thread started later inherits that (a thread started earlier could still be killed by one).
/// Until accept_graceful_stop (or wait_for_stop_signal) is called, a stop signal ends the process
/// as its default action would. Calling it again does nothing.
void take_stop_signals();
/// From now on a stop signal is a graceful stop, answered by wait_for_stop_signal: call it before
/// telling anyone the server listens (a signal sent right after the listening line would
/// otherwise find the process not yet waiting, and kill it).
void accept_graceful_stop();
/// Waits for SIGINT or SIGTERM and returns it; the caller then stops gracefully. The same
/// signal again within 2 s is the same request and is ignored (GNU timeout and a process-group
/// kill deliver it twice); a signal after that ends the process at once.
int wait_for_stop_signal();

}  // namespace tessera::serving
