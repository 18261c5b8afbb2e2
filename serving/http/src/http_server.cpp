// The Beast HTTP/1.1 server. The only translation unit of tessera_serving that includes Beast.
// One session class serves both a plain TCP stream and a TLS stream (Beast's ssl_stream over
// OpenSSL); the two differ only in how a connection starts (detect TLS, handshake) and ends.
#include "tessera/serving/http_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>

#include <cerrno>

#include <utility>  // before Asio: Boost 1.74 awaitable.hpp needs std::exchange
#include <algorithm>
#include <array>
#include <atomic>
#include <optional>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_set>

#include "tessera/common/log.hpp"
#include "tessera/serving/access.hpp"
#include "tls_context.hpp"

namespace tessera::serving {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

std::string_view as_view(beast::string_view s) { return {s.data(), s.size()}; }

// What the server holds of a session of either stream type.
class session_base : public std::enable_shared_from_this<session_base> {
 public:
  virtual ~session_base() = default;
  virtual void start() = 0;
  /// On the session's strand: close if idle, else close after the pending answer.
  virtual void shutdown_when_idle() = 0;
};

struct http_server::impl {
  server_config cfg;
  service svc;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  std::atomic<bool> stopping{false};
  std::atomic<int> busy{0};  // requests read and not yet written
  std::mutex sessions_mu;
  std::unordered_set<std::shared_ptr<session_base>> sessions;
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::unique_ptr<request_journal> journal;
  bool started = false;
  bool stopped = false;
  uint16_t bound_port = 0;
  std::optional<net::ssl::context> tls;  // set: the port speaks HTTPS only
  std::optional<api_key_check> key;      // set: requests need the key (access.hpp)

  impl(server_config c, router& r, std::shared_ptr<const tokenizer> tok, model_info info,
       serving_metrics& m)
      : cfg(with_workers(std::move(c))), svc(cfg.api, r, std::move(tok), std::move(info), m),
        acceptor(net::make_strand(ioc)) {}

  /// The API tokenizes on the I/O threads: /info reports them as TEI's tokenization_workers.
  static server_config with_workers(server_config c) {
    c.api.tokenization_workers = std::max(1, c.io_threads);
    return c;
  }
  void do_accept();
  void forget(const std::shared_ptr<session_base>& s) {
    std::lock_guard lock(sessions_mu);
    sessions.erase(s);
  }

  /// The answer to a request that may not pass (a missing or wrong API key), else nothing.
  std::optional<http_reply> refuse(std::string_view method, std::string_view target,
                                   std::string_view authorization) {
    if (!key || is_public_route(target, method) || key->accepts(authorization)) return std::nullopt;
    http_reply r = svc.error_reply(
        401, "unauthorized",
        std::string(authorization.empty() ? "missing" : "wrong") +
            " API key: send the header 'Authorization: Bearer <key>' with the key the server "
            "was started with (--api-key / --api-key-file)");
    r.www_authenticate = "Bearer";
    return r;
  }
};

template <class Stream>
class session final : public session_base {
  static constexpr bool is_tls = std::is_same_v<Stream, tls_stream>;

 public:
  template <class... StreamArgs>
  explicit session(http_server::impl& server, StreamArgs&&... args)
      : stream_(std::forward<StreamArgs>(args)...), server_(server) {}

  void start() override {
    net::dispatch(stream_.get_executor(), [self = self()] {
      if constexpr (is_tls)
        self->detect_tls();
      else
        self->do_read();
    });
  }

  void shutdown_when_idle() override {
    net::post(stream_.get_executor(), [self = self()] {
      if (!self->busy_) self->close();
    });
  }

 private:
  std::shared_ptr<session> self() { return std::static_pointer_cast<session>(shared_from_this()); }
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  // A TLS port first looks at the client's first bytes: a ClientHello goes on to the handshake
  // (with the bytes already read); anything else (plain HTTP) gets a clear-text 400 and the
  // connection is closed. Neither waits longer than the handshake timeout, and neither holds up
  // another session.
  void detect_tls() {
    lowest().expires_after(server_.cfg.tls_handshake_timeout);
    beast::async_detect_ssl(lowest(), buffer_, [self = self()](beast::error_code ec, bool tls) {
      if (ec) return self->close();
      if (!tls) {
        self->busy_ = true;
        return self->write(self->server_.svc.error_reply(
                               400, "tls_required",
                               "this port speaks HTTPS only: use https://"),
                           false, 11, true, /*in_clear=*/true);
      }
      self->stream_.async_handshake(
          net::ssl::stream_base::server, self->buffer_.data(),
          [self](beast::error_code ec, std::size_t used) { self->on_handshake(ec, used); });
    });
  }

  void on_handshake(beast::error_code ec, std::size_t used) {
    if (ec) {
      TESSERA_LOG_DEBUG("TLS handshake failed: " << ec.message());
      return close();
    }
    buffer_.consume(used);
    handshake_done_ = true;
    do_read();
  }

  void do_read() {
    if (server_.stopping.load()) return close();
    parser_.emplace();
    parser_->body_limit(server_.cfg.api.max_body_bytes);
    refused_.reset();
    lowest().expires_after(server_.cfg.idle_timeout);
    // The header first: a request without the key is refused before its body is read.
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = self()](beast::error_code ec, std::size_t) {
                              self->on_header(ec);
                            });
  }

  // A refused request keeps its connection only when its body is small enough to read and drop
  // (a declared length up to 64 KiB); a larger or chunked body is never read: 401, then close.
  void on_header(beast::error_code ec) {
    if (!ec) {
      auto& req = parser_->get();
      refused_ = server_.refuse(as_view(req.method_string()), as_view(req.target()),
                                as_view(req[http::field::authorization]));
      if (refused_ && !parser_->is_done()) {
        auto length = parser_->content_length();
        if (!length || *length > std::min<uint64_t>(64 << 10, server_.cfg.api.max_body_bytes)) {
          busy_ = true;
          return write(std::move(*refused_), false, req.version(), true);
        }
      }
    }
    if (ec || parser_->is_done()) return on_read(ec);
    http::async_read(stream_, buffer_, *parser_,
                     [self = self()](beast::error_code ec, std::size_t) {
                       self->on_read(ec);
                     });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::operation_aborted ||
        ec == beast::error::timeout || ec == net::error::connection_reset ||
        ec == net::error::eof || ec == net::ssl::error::stream_truncated)
      return close();
    if (ec == http::error::body_limit) {
      busy_ = true;
      return write(server_.svc.error_reply(
                       413, "payload_too_large",
                       "request body larger than the limit of " +
                           std::to_string(server_.cfg.api.max_body_bytes) + " bytes"),
                   false, 11, true);
    }
    if (ec) {
      if (!parser_->is_header_done() && buffer_.size() == 0) return close();
      busy_ = true;
      return write(server_.svc.error_reply(400, "bad_request", "malformed HTTP request: " + ec.message()),
                   false, 11, true);
    }
    auto& req = parser_->get();
    const bool keep_alive = req.keep_alive();
    const unsigned version = req.version();
    busy_ = true;
    if (refused_) return write(std::move(*refused_), keep_alive, version, false);
    server_.busy.fetch_add(1);
    counted_ = true;
    lowest().expires_never();
    std::string method(req.method_string());
    std::string target(req.target());
    request_headers headers;
    headers.inference_header_content_length = as_view(req["Inference-Header-Content-Length"]);
    const uint64_t request_number = ++requests_;
    headers.on_disconnect = [weak = weak_from_this(), request_number](std::function<void()> f) {
      auto base = weak.lock();
      if (!base) return;
      auto self = std::static_pointer_cast<session>(base);
      net::post(self->stream_.get_executor(), [self, request_number, f = std::move(f)]() mutable {
        self->watch_disconnect(request_number, std::move(f));
      });
    };
    // Requests that do work are journalled (accepted now, answered when the reply is made).
    const uint64_t journal_id = server_.journal && method == "POST" ? server_.journal->accepted() : 0;
    auto replied = std::make_shared<std::atomic<bool>>(false);
    try {
      server_.svc.handle(method, target, req.body(),
                         [self = self(), keep_alive, version, journal_id,
                          replied](http_reply r) {
                           if (replied->exchange(true)) return;
                           if (journal_id) self->server_.journal->answered(journal_id, r.status);
                           net::post(self->stream_.get_executor(),
                                     [self, keep_alive, version, r = std::move(r)]() mutable {
                                       self->write(std::move(r), keep_alive, version, false);
                                     });
                         },
                         headers);
    } catch (const std::exception& e) {
      // The last resort at the handler boundary: answer 500, log, keep the process serving.
      TESSERA_LOG_ERROR("request handler threw: " << e.what());
      if (!replied->exchange(true))
        write(server_.svc.error_reply(500, "internal", "internal error; the server goes on"),
              false, version, true);
    }
  }

  // A request that may take long (an LLM generation) asked to hear of its client going away:
  // wait until the socket is readable and peek; end of stream or an error means the client has
  // gone (bytes mean a pipelined request: stop watching). Stale wake-ups of an earlier request
  // are ignored.
  void watch_disconnect(uint64_t request_number, std::function<void()> f) {
    if (closed_ || request_number != requests_ || !busy_) return;
    disconnect_ = std::move(f);
    lowest().socket().async_wait(tcp::socket::wait_read, [self = self(), request_number](beast::error_code ec) {
      if (self->closed_ || request_number != self->requests_ || !self->disconnect_) return;
      char byte;
      ssize_t n = ec ? 0 : ::recv(self->lowest().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) return;  // data: a pipelined request, not a disconnect
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        auto f = std::move(self->disconnect_);
        return self->watch_disconnect(request_number, std::move(f));
      }
      auto f = std::move(self->disconnect_);
      self->disconnect_ = nullptr;
      if (f) f();
      if (self->stream_reply_) self->stream_reply_->cancel();
      self->close();
    });
  }

  // A streamed answer: the headers with chunked transfer encoding, then each chunk the producer
  // writes, then the last chunk; the connection closes after it.
  void write_stream(http_reply r, unsigned version) {
    stream_reply_ = std::move(r.stream);
    sres_ = {};
    sres_.version(version);
    sres_.result(static_cast<http::status>(r.status));
    sres_.set(http::field::server, "tessera");
    sres_.set(http::field::content_type, r.content_type);
    sres_.set(http::field::cache_control, "no-cache");
    for (const auto& [name, value] : r.headers) sres_.set(name, value);
    sres_.keep_alive(false);
    sres_.chunked(true);
    sser_.emplace(sres_);
    lowest().expires_never();
    stream_reply_->set_wake([weak = weak_from_this()] {
      auto base = weak.lock();
      if (!base) return;
      auto self = std::static_pointer_cast<session>(base);
      net::post(self->stream_.get_executor(), [self] { self->pump(); });
    });
    chunk_writing_ = true;
    http::async_write_header(stream_, *sser_, [self = self()](beast::error_code ec, std::size_t) {
      self->chunk_writing_ = false;
      if (ec) return self->stream_failed();
      self->pump();
    });
  }

  void pump() {
    if (closed_ || chunk_writing_ || !stream_reply_) return;
    bool last = false;
    std::string data = stream_reply_->take(last);
    if (!data.empty()) {
      chunk_ = std::move(data);
      chunk_writing_ = true;
      net::async_write(stream_, http::make_chunk(net::buffer(chunk_)),
                       [self = self()](beast::error_code ec, std::size_t) {
                         self->chunk_writing_ = false;
                         if (ec) return self->stream_failed();
                         self->pump();
                       });
      return;
    }
    if (!last) return;
    chunk_writing_ = true;
    disconnect_ = nullptr;  // the answer is complete: a client closing now has not gone early
    net::async_write(stream_, http::make_chunk_last(), [self = self()](beast::error_code ec, std::size_t) {
      self->chunk_writing_ = false;
      // The client may have read the last chunk and closed already (close() ran first).
      if (auto s = std::move(self->stream_reply_)) s->set_wake(nullptr);
      self->disconnect_ = nullptr;
      self->done_counting();
      if (ec || self->closed_) return self->close();
      self->end();
    });
  }

  void stream_failed() {
    if (auto s = std::move(stream_reply_)) {
      s->set_wake(nullptr);
      s->cancel();
    }
    disconnect_ = nullptr;
    done_counting();
    close();
  }

  void done_counting() {
    busy_ = false;
    if (counted_) {
      counted_ = false;
      server_.busy.fetch_sub(1);
    }
  }

  // `in_clear`: on a TLS session, write to the TCP stream under it (the answer to plain HTTP).
  void write(http_reply r, bool keep_alive, unsigned version, bool drain_after, bool in_clear = false) {
    if (r.stream) return write_stream(std::move(r), version);
    res_ = {};
    res_.version(version);
    res_.result(static_cast<http::status>(r.status));
    res_.set(http::field::server, "tessera");
    res_.set(http::field::content_type, r.content_type);
    if (!r.allow.empty()) res_.set(http::field::allow, r.allow);
    if (!r.www_authenticate.empty()) res_.set(http::field::www_authenticate, r.www_authenticate);
    for (const auto& [name, value] : r.headers) res_.set(name, value);
    res_.keep_alive(keep_alive && !drain_after && !server_.stopping.load());
    res_.body() = std::move(r.body);
    res_.prepare_payload();
    lowest().expires_after(std::chrono::seconds(30));
    auto done = [self = self(), drain_after](beast::error_code ec, std::size_t) {
      self->on_write(ec, drain_after);
    };
    if (is_tls && in_clear)
      http::async_write(lowest(), res_, std::move(done));
    else
      http::async_write(stream_, res_, std::move(done));
  }

  void on_write(beast::error_code ec, bool drain_after) {
    done_counting();
    disconnect_ = nullptr;
    if (ec) return close();
    if (drain_after) return drain();
    if (!res_.keep_alive()) return end();
    do_read();
  }

  // The last answer is written: say so (TLS close_notify, then TCP FIN) and close.
  void end() {
    if constexpr (is_tls) {
      if (handshake_done_) {
        lowest().expires_after(std::chrono::seconds(2));
        return stream_.async_shutdown([self = self()](beast::error_code) { self->close(); });
      }
    }
    beast::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    close();
  }

  // After an early error answer (413, 400) the client may still be sending its body: read and
  // discard it for a while, so that closing does not reset the connection before the client
  // has read the answer. The bytes are discarded unread, so TLS records need no decrypting.
  void drain() {
    beast::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    lowest().expires_after(std::chrono::seconds(2));
    drain_more();
  }
  void drain_more() {
    lowest().async_read_some(net::buffer(scratch_),
                             [self = self()](beast::error_code ec, std::size_t) {
                               if (ec) return self->close();
                               self->drain_more();
                             });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (auto s = std::move(stream_reply_)) {  // cut mid-stream (server stop, client gone)
      s->set_wake(nullptr);
      s->cancel();
      done_counting();
    }
    beast::error_code ignored;
    lowest().socket().close(ignored);
    server_.forget(shared_from_this());
  }

  Stream stream_;
  http_server::impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  std::array<char, 16384> scratch_;
  bool busy_ = false;     // a request is being answered
  bool counted_ = false;  // counted in server_.busy
  bool closed_ = false;
  bool handshake_done_ = false;  // TLS: a close_notify is owed at the end
  std::optional<http_reply> refused_;  // the 401 of the request being read
  uint64_t requests_ = 0;                        // requests read on this connection
  std::function<void()> disconnect_;             // the current request's client-gone hook
  std::shared_ptr<reply_stream> stream_reply_;   // a streamed answer being sent
  http::response<http::empty_body> sres_;
  std::optional<http::response_serializer<http::empty_body>> sser_;
  std::string chunk_;
  bool chunk_writing_ = false;
};

namespace {
// Processes the host starts while it serves (a restarted tile, tessera-gpu) must not inherit the
// HTTP sockets: a child holding a client's connection keeps it open after the server closes it.
void close_on_exec(int fd) {
  if (int flags = fcntl(fd, F_GETFD); flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}
}  // namespace

void http_server::impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || stopping.load()) return;
      TESSERA_LOG_WARN("accept failed: " << ec.message());
    } else {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      close_on_exec(socket.native_handle());
      std::shared_ptr<session_base> s;
      if (tls)
        s = std::make_shared<session<tls_stream>>(*this, std::move(socket), *tls);
      else
        s = std::make_shared<session<beast::tcp_stream>>(*this, std::move(socket));
      {
        std::lock_guard lock(sessions_mu);
        sessions.insert(s);
      }
      s->start();
    }
    if (!stopping.load()) do_accept();
  });
}

http_server::http_server(server_config cfg, router& r, std::shared_ptr<const tokenizer> tok,
                         model_info info, serving_metrics& metrics)
    : impl_(std::make_unique<impl>(std::move(cfg), r, std::move(tok), std::move(info), metrics)) {}

http_server::~http_server() { stop(); }

service& http_server::api() { return impl_->svc; }

uint16_t http_server::port() const { return impl_->bound_port; }

status http_server::start() {
  auto& m = *impl_;
  if (m.started) return status::invalid("http_server already started");
  if (!m.cfg.tls_cert.empty()) {
    m.tls.emplace(net::ssl::context::tls_server);
    TESSERA_RETURN_IF_ERROR(configure_tls(m.tls->native_handle(), m.cfg.tls_cert, m.cfg.tls_key));
  }
  if (!m.cfg.api_key.empty()) {
    TESSERA_RETURN_IF_ERROR(validate_api_key(m.cfg.api_key));
    m.key.emplace(m.cfg.api_key);
  }
  if (!m.cfg.journal.empty()) {
    auto j = request_journal::open(m.cfg.journal);
    if (!j) return j.error();
    m.journal = std::move(*j);
    m.svc.set_journal(m.journal.get());
    if (m.journal->previous().present && m.journal->previous().unanswered() > 0)
      TESSERA_LOG_WARN("restarted: " << m.journal->previous().describe());
  }
  beast::error_code ec;
  auto address = net::ip::make_address(m.cfg.address == "localhost" ? "127.0.0.1" : m.cfg.address, ec);
  if (ec) return status::invalid("bad bind address '" + m.cfg.address + "': " + ec.message());
  tcp::endpoint ep(address, m.cfg.port);
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (!ec) close_on_exec(m.acceptor.native_handle());
  if (ec)
    return status::io_error("cannot listen on " + m.cfg.address + ":" + std::to_string(m.cfg.port) +
                            ": " + ec.message() + "; pass another --port");
  m.bound_port = m.acceptor.local_endpoint().port();
  m.started = true;
  m.work.emplace(m.ioc.get_executor());
  m.do_accept();
  int n = std::max(1, m.cfg.io_threads);
  for (int i = 0; i < n; ++i) m.threads.emplace_back([&m] { m.ioc.run(); });
  return ok_status();
}

void http_server::wait() {
  std::unique_lock lock(impl_->done_mu);
  impl_->done_cv.wait(lock, [&] { return impl_->stopped || !impl_->started; });
}

status http_server::run() {
  TESSERA_RETURN_IF_ERROR(start());
  wait();
  return ok_status();
}

void http_server::stop(std::chrono::milliseconds grace) {
  auto& m = *impl_;
  {
    std::lock_guard lock(m.done_mu);
    if (!m.started || m.stopped || m.stopping.exchange(true)) return;
  }
  net::post(m.acceptor.get_executor(), [&m] {
    beast::error_code ignored;
    m.acceptor.close(ignored);
  });
  {
    std::lock_guard lock(m.sessions_mu);
    for (auto& s : m.sessions) s->shutdown_when_idle();
  }
  // Requests already read are answered before the io threads end.
  auto until = steady::now() + grace;
  while (m.busy.load() > 0 && steady::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  {
    std::lock_guard lock(m.sessions_mu);
    for (auto& s : m.sessions) s->shutdown_when_idle();
  }
  m.work.reset();
  // Sessions still open after a second (answers past the grace period) are cut.
  auto cut = steady::now() + std::chrono::seconds(1);
  for (;;) {
    {
      std::lock_guard lock(m.sessions_mu);
      if (m.sessions.empty()) break;
    }
    if (steady::now() > cut) {
      m.ioc.stop();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& t : m.threads)
    if (t.joinable()) t.join();
  {
    std::lock_guard lock(m.done_mu);
    m.stopped = true;
  }
  m.done_cv.notify_all();
}

}  // namespace tessera::serving
