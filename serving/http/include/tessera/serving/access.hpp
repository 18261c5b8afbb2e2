// tessera/serving/access.hpp: who may use the HTTP port. An API key (a bearer token, as
// text-embeddings-inference's --api-key) checked in constant time, the routes a load balancer or
// a Prometheus scraper reaches without it, and which bind addresses stay on this machine.
//
//   api_key_check check("s3cret");
//   if (!is_public_route(path) && !check.accepts(request["Authorization"]))   // "Bearer s3cret"
//     answer 401 with WWW-Authenticate: Bearer
//   if (!is_loopback_address(so.server.address)) ... require --api-key and TLS, or --insecure
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "tessera/common/status.hpp"

namespace tessera::serving {

/// Routes answered without the key, as TEI leaves them open: the health probes and the
/// Prometheus scrape (/health, /ping, GET /, /metrics, /v2/health/live, /v2/health/ready). The
/// query string is ignored. Everything else, POST / (predictions), /info and unknown paths
/// included, needs the key.
bool is_public_route(std::string_view target, std::string_view method = "");

/// Holds the SHA-256 of the key (not the key) and compares digests with CRYPTO_memcmp, so the
/// time a check takes says nothing about how much of a guess was right, nor about the key's length.
class api_key_check {
 public:
  explicit api_key_check(std::string_view key);
  /// True when `authorization` is "Bearer <key>" (the scheme case-insensitive, as RFC 7235 says).
  bool accepts(std::string_view authorization) const;

 private:
  std::array<unsigned char, 32> digest_{};
};

/// A key a client can put in a header: 1..4096 visible ASCII characters (no spaces).
status validate_api_key(std::string_view key);

/// Reads a key file: the whole file, trailing white space (a final newline) removed. Errors name
/// the file and what to change.
result<std::string> read_api_key_file(const std::string& path);

/// 127.0.0.0/8, ::1, ::ffff:127.x.y.z and "localhost": an address only this machine reaches.
/// 0.0.0.0, :: and every other address (or anything that is not an address) are not.
bool is_loopback_address(std::string_view address);

}  // namespace tessera::serving
