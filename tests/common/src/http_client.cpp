// The test HTTP client. See http_client.hpp.
#include "tessera/test/http_client.hpp"

#include <cctype>
#include <utility>  // before Asio: Boost 1.74 awaitable.hpp needs std::exchange

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tessera::test_support {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

struct http_connection::impl {
  std::string host;
  uint16_t port;
  net::io_context ioc;
  std::unique_ptr<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  std::vector<std::pair<std::string, std::string>> headers;

  void connect() {
    stream = std::make_unique<beast::tcp_stream>(ioc);
    stream->connect(tcp::endpoint(net::ip::make_address(host), port));
    buffer.clear();
  }

  http_response read_response() {
    http_response out;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    beast::error_code ec;
    stream->expires_after(std::chrono::seconds(60));
    http::read(*stream, buffer, parser, ec);
    if (ec) {
      out.error = ec.message();
      stream.reset();
      return out;
    }
    auto& res = parser.get();
    out.status = res.result_int();
    out.body = res.body();
    out.content_type = std::string(res[http::field::content_type]);
    out.allow = std::string(res[http::field::allow]);
    out.www_authenticate = std::string(res[http::field::www_authenticate]);
    out.keep_alive = res.keep_alive();
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(f.value());
    }
    if (!out.keep_alive) stream.reset();
    return out;
  }
};

int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

http_connection::http_connection(std::string host, uint16_t port) : impl_(std::make_unique<impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
}

http_connection::~http_connection() = default;

http_response http_connection::request(const std::string& method, const std::string& target,
                                       const std::string& body) {
  try {
    if (!impl_->stream) impl_->connect();
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, impl_->host);
    req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    for (const auto& [name, value] : impl_->headers) req.set(name, value);
    req.body() = body;
    req.prepare_payload();
    beast::error_code ec;
    http::write(*impl_->stream, req, ec);
    if (ec) {
      // A closed keep-alive connection: reconnect once.
      impl_->connect();
      http::write(*impl_->stream, req, ec);
      if (ec) return {0, "", "", "", false, ec.message()};
    }
    return impl_->read_response();
  } catch (const std::exception& e) {
    impl_->stream.reset();
    return {0, "", "", "", false, e.what()};
  }
}

http_response http_connection::raw(const std::string& bytes) {
  try {
    if (!impl_->stream) impl_->connect();
    beast::error_code ec;
    net::write(impl_->stream->socket(), net::buffer(bytes), ec);
    if (ec) return {0, "", "", "", false, ec.message()};
    return impl_->read_response();
  } catch (const std::exception& e) {
    impl_->stream.reset();
    return {0, "", "", "", false, e.what()};
  }
}

void http_connection::set_header(std::string name, std::string value) {
  impl_->headers.emplace_back(std::move(name), std::move(value));
}

double metric_value(const std::string& metrics, const std::string& name) {
  auto at = metrics.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(metrics.substr(at + name.size() + 2));
}

}  // namespace tessera::test_support
