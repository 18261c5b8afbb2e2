// tessera/serving/http_server.hpp: the HTTP/1.1 front door on Boost.Beast: keep-alive, many
// concurrent connections on 1-2 Asio threads, requests handed to a service (service.hpp) and
// answered through Asio posts from whatever thread the backend answers on; a clean stop that
// answers every request it accepted. Optionally TLS (OpenSSL through Asio's SSL stream) and an
// API key (access.hpp) checked before a request reaches the service.
//
// Starting it from code (tessera-host's main does this with its tile-group backends):
//   serving_metrics metrics;
//   router r(routing_config{}, default_clock(), &metrics);
//   r.add_backend(backend, batching_config{.kind = policy_kind::dynamic_padded});
//   r.start();
//   http_server server(server_config{.port = 8080}, r, tokenizer, model_info{.model_id = "bert"},
//                      metrics);
//   if (auto st = server.start(); !st.ok()) { std::cerr << st.to_string(); return 2; }
//   server.wait();               // until stop() (e.g. from a SIGINT handler thread)
//   r.stop();
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/common/status.hpp"
#include "tessera/serving/metrics.hpp"
#include "tessera/serving/router.hpp"
#include "tessera/serving/service.hpp"
#include "tessera/serving/tokenizer.hpp"

namespace tessera::serving {

struct server_config {
  std::string address = "127.0.0.1";  ///< bind address (0.0.0.0 to serve other machines)
  uint16_t port = 8080;               ///< 0 = any free port (see http_server::port())
  int io_threads = 2;                 ///< threads running the Asio io_context
  service_config api;                 ///< limits: body size, inputs per request, timeout
  std::chrono::seconds idle_timeout{60};  ///< an idle keep-alive connection is closed after it
  std::string journal;                ///< request journal file (journal.hpp); empty = none
  /// Bearer token every route but the public ones (access.hpp) needs; empty = no key. A missing
  /// or wrong key is answered 401 with WWW-Authenticate: Bearer.
  std::string api_key;
  /// PEM certificate chain and private key: with both, the port speaks HTTPS only (TLS 1.2+).
  std::string tls_cert;
  std::string tls_key;
  std::chrono::seconds tls_handshake_timeout{10};  ///< a client slower than this is dropped
};

class http_server {
 public:
  http_server(server_config cfg, router& r, std::shared_ptr<const tokenizer> tok, model_info info,
              serving_metrics& metrics);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Binds, listens and starts the io threads. Errors: address in use, bad address, a TLS
  /// certificate or key that cannot be loaded or do not match.
  status start();
  /// Blocks until stop() has finished.
  void wait();
  /// start() then wait().
  status run();
  /// Stops accepting, closes idle connections, lets in-flight requests be answered (up to
  /// `grace`), then ends the io threads. Thread-safe; idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(30));
  /// The bound port (after start()).
  uint16_t port() const;
  service& api();

  struct impl;  ///< defined in http_server.cpp

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace tessera::serving
