// tessera/serving/serve_options.hpp: the serving command-line flags, shared by tessera-serve and
// tessera-host (same names everywhere), and the signal handling of a serving main().
//
//   take_stop_signals();                          // first in main(), before any thread starts
//   serve_options so;
//   po::options_description opts("tessera-host");
//   add_serve_options(opts, so);                  // --address --port --batching --routing ...
//   po::store(po::parse_command_line(argc, argv, opts), vm); po::notify(vm);
//   if (auto st = finish_serve_options(so); !st) { std::cerr << st.message(); return 2; }
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
