// A small synchronous HTTP/1.1 client for the serving tests (Beast), one keep-alive connection.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera::test_support {

struct http_response {
  unsigned status = 0;
  std::string body;
  std::string content_type;
  std::string allow;
  bool keep_alive = false;
  std::string error;  ///< transport error, empty when a response was read
  std::string www_authenticate;
  std::map<std::string, std::string> headers;  ///< every response header, names lower-cased
  /// A header's value ("" when absent); `name` in lower case.
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

/// A plain TCP socket connected to 127.0.0.1:port (for raw bytes), or -1. The caller closes it.
int connect_loopback(uint16_t port);

/// The value of one sample in a /metrics text (`name` with its labels as written, e.g.
/// `x_total{replica="tiles0",kind="tiles"}`); -1 when absent.
double metric_value(const std::string& metrics, const std::string& name);

class http_connection {
 public:
  http_connection(std::string host, uint16_t port);
  ~http_connection();
  http_response request(const std::string& method, const std::string& target,
                        const std::string& body = "");
  /// Sends raw bytes and reads one response (for malformed requests).
  http_response raw(const std::string& bytes);
  /// A header sent with every later request (e.g. "Authorization", "Bearer KEY").
  void set_header(std::string name, std::string value);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tessera::test_support
