// JSON over the test HTTP client (header-only: the tests that use it link nlohmann_json).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/test/http_client.hpp"

namespace tessera::test_support {

/// POSTs `body` to http://127.0.0.1:port`path` on a fresh connection. The answer parsed (a
/// discarded json when it is not JSON); its HTTP status in `*status` when given.
inline nlohmann::json post_json(uint16_t port, const std::string& path, const nlohmann::json& body,
                                unsigned* status = nullptr) {
  http_connection c("127.0.0.1", port);
  auto r = c.request("POST", path, body.dump());
  if (status) *status = r.status;
  return nlohmann::json::parse(r.body, nullptr, false);
}

}  // namespace tessera::test_support
