// Server-sent events over a raw socket, for the streaming tests: one request, events read as
// they come.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "tessera/test/http_client.hpp"

namespace tessera::test_support {

/// POSTs `body` (JSON) to `path` on 127.0.0.1:port and reads the streamed answer.
class sse_client {
 public:
  sse_client(uint16_t port, const std::string& path, const std::string& body) : fd_(connect_loopback(port)) {
    std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    if (fd_ >= 0 && ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) close();
  }
  ~sse_client() { close(); }
  sse_client(const sse_client&) = delete;
  sse_client& operator=(const sse_client&) = delete;
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return fd_ >= 0; }
  /// The payload of the next "data: ..." event, or "" at the end of the stream.
  std::string next() {
    for (;;) {
      auto at = buf_.find("data: ", scan_);
      if (at != std::string::npos) {
        auto end = buf_.find("\n\n", at);
        if (end != std::string::npos) {
          scan_ = end + 2;
          return buf_.substr(at + 6, end - at - 6);
        }
      }
      char tmp[4096];
      if (fd_ < 0) return "";
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return "";
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }
  const std::string& raw() const { return buf_; }

 private:
  int fd_;
  std::string buf_;
  size_t scan_ = 0;
};

}  // namespace tessera::test_support
