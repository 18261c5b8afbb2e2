// The Beast HTTP/1.1 server. The only translation unit of tessera_serving that includes Beast.
#include "tessera/serving/http_server.hpp"

#include <utility>  // before Asio: Boost 1.74 awaitable.hpp needs std::exchange
#include <array>
#include <atomic>
#include <optional>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "tessera/common/log.hpp"

namespace tessera::serving {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

class session;

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
  std::unordered_set<std::shared_ptr<session>> sessions;
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::unique_ptr<request_journal> journal;
  bool started = false;
  bool stopped = false;
  uint16_t bound_port = 0;

  impl(server_config c, router& r, std::shared_ptr<const tokenizer> tok, model_info info,
       serving_metrics& m)
      : cfg(std::move(c)), svc(cfg.api, r, std::move(tok), std::move(info), m),
        acceptor(net::make_strand(ioc)) {}

  void do_accept();
  void forget(const std::shared_ptr<session>& s) {
    std::lock_guard lock(sessions_mu);
    sessions.erase(s);
  }
};

class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, http_server::impl& server)
      : stream_(std::move(socket)), server_(server) {}

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  /// On the session's strand: close if idle, else close after the pending answer.
  void shutdown_when_idle() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->busy_) self->close();
    });
  }

 private:
  void do_read() {
    if (server_.stopping.load()) return close();
    parser_.emplace();
    parser_->body_limit(server_.cfg.api.max_body_bytes);
    stream_.expires_after(server_.cfg.idle_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       self->on_read(ec);
                     });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::operation_aborted ||
        ec == beast::error::timeout || ec == net::error::connection_reset ||
        ec == net::error::eof)
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
    server_.busy.fetch_add(1);
    counted_ = true;
    stream_.expires_never();
    std::string method(req.method_string());
    std::string target(req.target());
    // Requests that do work are journalled (accepted now, answered when the reply is made).
    const uint64_t journal_id = server_.journal && method == "POST" ? server_.journal->accepted() : 0;
    auto replied = std::make_shared<std::atomic<bool>>(false);
    try {
      server_.svc.handle(method, target, req.body(),
                         [self = shared_from_this(), keep_alive, version, journal_id,
                          replied](http_reply r) {
                           if (replied->exchange(true)) return;
                           if (journal_id) self->server_.journal->answered(journal_id, r.status);
                           net::post(self->stream_.get_executor(),
                                     [self, keep_alive, version, r = std::move(r)]() mutable {
                                       self->write(std::move(r), keep_alive, version, false);
                                     });
                         });
    } catch (const std::exception& e) {
      // The last resort at the handler boundary: answer 500, log, keep the process serving.
      TESSERA_LOG_ERROR("request handler threw: " << e.what());
      if (!replied->exchange(true))
        write(server_.svc.error_reply(500, "internal", "internal error; the server goes on"),
              false, version, true);
    }
  }

  void write(http_reply r, bool keep_alive, unsigned version, bool drain_after) {
    res_ = {};
    res_.version(version);
    res_.result(static_cast<http::status>(r.status));
    res_.set(http::field::server, "tessera");
    res_.set(http::field::content_type, r.content_type);
    if (!r.allow.empty()) res_.set(http::field::allow, r.allow);
    res_.keep_alive(keep_alive && !drain_after && !server_.stopping.load());
    res_.body() = std::move(r.body);
    res_.prepare_payload();
    stream_.expires_after(std::chrono::seconds(30));
    http::async_write(stream_, res_,
                      [self = shared_from_this(), drain_after](beast::error_code ec, std::size_t) {
                        self->on_write(ec, drain_after);
                      });
  }

  void on_write(beast::error_code ec, bool drain_after) {
    busy_ = false;
    if (counted_) {
      counted_ = false;
      server_.busy.fetch_sub(1);
    }
    if (ec) return close();
    if (drain_after) return drain();
    if (!res_.keep_alive()) {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      return close();
    }
    do_read();
  }

  // After an early error answer (413, 400) the client may still be sending its body: read and
  // discard it for a while, so that closing does not reset the connection before the client
  // has read the answer.
  void drain() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(2));
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) return self->close();
                              self->drain_more();
                            });
  }
  void drain_more() {
    stream_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) return self->close();
                              self->drain_more();
                            });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().close(ignored);
    server_.forget(shared_from_this());
  }

  beast::tcp_stream stream_;
  http_server::impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  std::array<char, 16384> scratch_;
  bool busy_ = false;     // a request is being answered
  bool counted_ = false;  // counted in server_.busy
  bool closed_ = false;
};

void http_server::impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || stopping.load()) return;
      TESSERA_LOG_WARN("accept failed: " << ec.message());
    } else {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto s = std::make_shared<session>(std::move(socket), *this);
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
  if (!m.cfg.journal.empty()) {
    auto j = request_journal::open(m.cfg.journal);
    if (!j) return j.error();
    m.journal = std::move(*j);
    m.svc.set_journal(m.journal.get());
    if (m.journal->previous().present && m.journal->previous().unanswered() > 0)
      TESSERA_LOG_WARN("restarted: " << m.journal->previous().describe());
  }
  beast::error_code ec;
  auto address = net::ip::make_address(m.cfg.address, ec);
  if (ec) return status::invalid("bad bind address '" + m.cfg.address + "': " + ec.message());
  tcp::endpoint ep(address, m.cfg.port);
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return status::io_error("cannot listen on " + m.cfg.address + ":" + std::to_string(m.cfg.port) +
                            ": " + ec.message() + "; pass another --port");
  m.bound_port = m.acceptor.local_endpoint().port();
  m.started = true;
  m.work.emplace(m.ioc.get_executor());
  m.do_accept();
  int n = std::max(1, m.cfg.io_threads);
  for (int i = 0; i < n; ++i) m.threads.emplace_back([&m] { m.ioc.run(); });
  return status::ok();
}

void http_server::wait() {
  std::unique_lock lock(impl_->done_mu);
  impl_->done_cv.wait(lock, [&] { return impl_->stopped || !impl_->started; });
}

status http_server::run() {
  TESSERA_RETURN_IF_ERROR(start());
  wait();
  return status::ok();
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
