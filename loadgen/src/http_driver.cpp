// The HTTP load driver on Beast. See http_driver.hpp.
#include "tessera/loadgen/http_driver.hpp"

#include "driver.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <iostream>
#include <memory>

namespace tessera::loadgen {

namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size() + 8);
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o;
}

class runner;

struct connection : std::enable_shared_from_this<connection> {
  explicit connection(net::io_context& ioc) : stream(ioc) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  http::request<http::string_body> req;
  std::optional<http::response_parser<http::string_body>> parser;
  bool connected = false;
};

class runner {
 public:
  runner(const driver_config& cfg, const std::vector<planned_request>& plan, tcp::endpoint ep)
      : cfg_(cfg), plan_(plan), ep_(ep), arrival_timer_(ioc_), progress_timer_(ioc_),
        stop_timer_(ioc_) {
    bodies_.reserve(plan_.size());
    for (const auto& p : plan_)
      bodies_.push_back("{\"inputs\":\"" + json_escape(p.text) + "\",\"truncate\":" +
                        (cfg_.truncate ? "true" : "false") + "}");
  }

  run_report run() {
    start_ = steady::now();
    if (cfg_.duration_seconds > 0) {
      stop_timer_.expires_after(std::chrono::duration_cast<steady::duration>(
          std::chrono::duration<double>(cfg_.duration_seconds)));
      stop_timer_.async_wait([this](beast::error_code ec) {
        if (!ec) stop_sending();
      });
    }
    if (cfg_.progress) schedule_progress();
    if (cfg_.mode == loop_mode::closed) {
      int n = std::max(1, cfg_.connections);
      for (int i = 0; i < n; ++i) {
        auto c = std::make_shared<connection>(ioc_);
        ++open_connections_;
        closed_next(c);
      }
    } else {
      schedule_arrivals();
    }
    ioc_.run();
    run_report r;
    r.mode = cfg_.mode == loop_mode::open ? "open" : "closed";
    r.mix = cfg_.mix_name;
    r.offered_rate = cfg_.offered_rate;
    r.connections = cfg_.mode == loop_mode::open ? max_open_ : cfg_.connections;
    r.duration_seconds = std::chrono::duration<double>(end_ - start_).count();
    r.sent = sent_;
    r.errors = errors_;
    r.unsent = unsent_;
    r.errors_by_kind = errors_by_kind_;
    summarize(r, std::move(latencies_));
    return r;
  }

 private:
  bool plan_left() const {
    if (stopped_) return false;
    if (cfg_.mode == loop_mode::closed) {
      if (cfg_.max_requests > 0) return sent_ < cfg_.max_requests;
      if (cfg_.duration_seconds > 0) return true;  // cycle the plan until the time is up
      return static_cast<size_t>(sent_) < plan_.size();
    }
    return next_arrival_ < plan_.size();
  }

  void stop_sending() {
    stopped_ = true;
    arrival_timer_.cancel();
    unsent_ += static_cast<int64_t>(backlog_.size());
    backlog_.clear();
    maybe_finish();
  }

  void maybe_finish() {
    if (in_flight_ > 0 || plan_left() || !backlog_.empty()) return;
    if (finished_) return;
    finished_ = true;
    end_ = steady::now();
    arrival_timer_.cancel();
    progress_timer_.cancel();
    stop_timer_.cancel();
    for (auto& c : idle_) {
      beast::error_code ignored;
      c->stream.socket().close(ignored);
    }
    idle_.clear();
  }

  // Closed loop: the connection takes the next request of the plan, or retires.
  void closed_next(const std::shared_ptr<connection>& c) {
    if (!plan_left()) {
      beast::error_code ignored;
      c->stream.socket().close(ignored);
      return maybe_finish();
    }
    size_t idx = static_cast<size_t>(sent_) % plan_.size();
    send(c, idx, steady::now());
  }

  // Open loop: fire every request whose arrival time has come, then sleep until the next.
  void schedule_arrivals() {
    detail::fire_due_arrivals(
        arrival_timer_, start_, next_arrival_, plan_.size(), [this](size_t i) { return plan_[i].arrival_seconds; },
        [this](size_t i, steady::time_point due) { dispatch_open(i, due); }, [this] { return stopped_; },
        [this] { maybe_finish(); });
  }

  void dispatch_open(size_t idx, steady::time_point due) {
    if (!idle_.empty()) {
      auto c = idle_.back();
      idle_.pop_back();
      return send(c, idx, due);
    }
    if (open_connections_ < std::max(1, cfg_.connections)) {
      ++open_connections_;
      max_open_ = std::max(max_open_, open_connections_);
      return send(std::make_shared<connection>(ioc_), idx, due);
    }
    backlog_.push_back({idx, due});  // every connection busy: waits, its latency grows
  }

  void connection_free(const std::shared_ptr<connection>& c) {
    if (cfg_.mode == loop_mode::closed) return closed_next(c);
    if (!backlog_.empty()) {
      auto [idx, due] = backlog_.front();
      backlog_.pop_front();
      return send(c, idx, due);
    }
    if (c->connected) idle_.push_back(c);
    else --open_connections_;
    maybe_finish();
  }

  void send(std::shared_ptr<connection> c, size_t idx, steady::time_point t0) {
    ++sent_;
    ++in_flight_;
    c->req = {http::verb::post, cfg_.target, 11};
    c->req.set(http::field::host, cfg_.host);
    c->req.set(http::field::content_type, "application/json");
    c->req.keep_alive(true);
    c->req.body() = bodies_[idx];
    c->req.prepare_payload();
    c->stream.expires_after(std::chrono::duration_cast<steady::duration>(
        std::chrono::duration<double>(cfg_.request_timeout_seconds)));
    if (!c->connected) {
      c->stream.async_connect(ep_, [this, c, t0](beast::error_code ec) {
        if (ec) return fail(c, "connect");
        c->connected = true;
        beast::error_code ignored;
        c->stream.socket().set_option(tcp::no_delay(true), ignored);
        write(c, t0);
      });
      return;
    }
    write(c, t0);
  }

  void write(std::shared_ptr<connection> c, steady::time_point t0) {
    http::async_write(c->stream, c->req, [this, c, t0](beast::error_code ec, std::size_t) {
      if (ec) return fail(c, ec == beast::error::timeout ? "timeout" : "write");
      c->parser.emplace();
      c->parser->body_limit(16 << 20);
      http::async_read(c->stream, c->buffer, *c->parser,
                       [this, c, t0](beast::error_code ec, std::size_t) {
                         if (ec) return fail(c, ec == beast::error::timeout ? "timeout" : "read");
                         --in_flight_;
                         auto& res = c->parser->get();
                         if (res.result_int() == 200) {
                           latencies_.push_back(
                               std::chrono::duration<double>(steady::now() - t0).count());
                           // tessera's modelled clock: the request's batch on the modelled device (ms).
                           if (auto h = res.find("x-modelled-time"); h != res.end())
                             modelled_.push_back(std::atof(std::string(h->value()).c_str()) / 1e3);
                         } else {
                           ++errors_;
                           ++errors_by_kind_[std::to_string(res.result_int())];
                         }
                         if (!res.keep_alive()) {
                           beast::error_code ignored;
                           c->stream.socket().close(ignored);
                           c->connected = false;
                           c->buffer.clear();
                         }
                         connection_free(c);
                       });
    });
  }

  void fail(const std::shared_ptr<connection>& c, const char* kind) {
    --in_flight_;
    ++errors_;
    ++errors_by_kind_[kind];
    beast::error_code ignored;
    c->stream.socket().close(ignored);
    auto fresh = std::make_shared<connection>(ioc_);  // reconnect on the next request
    connection_free(fresh);
  }

  void schedule_progress() {
    progress_timer_.expires_after(std::chrono::seconds(1));
    progress_timer_.async_wait([this](beast::error_code ec) {
      if (ec || finished_) return;
      double t = std::chrono::duration<double>(steady::now() - start_).count();
      int64_t ok = static_cast<int64_t>(latencies_.size());
      std::fprintf(stderr, "[loadgen] %6.1f s  sent %lld  ok %lld  errors %lld  in flight %lld  %.0f req/s\n",
                   t, static_cast<long long>(sent_), static_cast<long long>(ok),
                   static_cast<long long>(errors_), static_cast<long long>(in_flight_),
                   static_cast<double>(ok - last_ok_));
      last_ok_ = ok;
      schedule_progress();
    });
  }

  const driver_config& cfg_;
  const std::vector<planned_request>& plan_;
  tcp::endpoint ep_;
  net::io_context ioc_;
  net::steady_timer arrival_timer_, progress_timer_, stop_timer_;
  std::vector<std::string> bodies_;
  std::vector<std::shared_ptr<connection>> idle_;
  std::deque<std::pair<size_t, steady::time_point>> backlog_;
  steady::time_point start_, end_;
  size_t next_arrival_ = 0;
  int open_connections_ = 0, max_open_ = 0;
  int64_t sent_ = 0, in_flight_ = 0, errors_ = 0, last_ok_ = 0, unsent_ = 0;
  std::map<std::string, int64_t> errors_by_kind_;
  std::vector<double> latencies_, modelled_;

 public:
  std::vector<double> take_modelled() { return std::move(modelled_); }

 private:
  bool stopped_ = false, finished_ = false;
};

// GET `target` once (the server's /metrics around a run); "" when it cannot be read.
std::string get_text(const tcp::endpoint& ep, const std::string& host, const std::string& target) {
  try {
    net::io_context ioc;
    beast::tcp_stream s(ioc);
    s.expires_after(std::chrono::seconds(5));
    s.connect(ep);
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, host);
    http::write(s, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> p;
    p.body_limit(64 << 20);
    http::read(s, buf, p);
    beast::error_code ignored;
    s.socket().shutdown(tcp::socket::shutdown_both, ignored);
    return p.get().result_int() == 200 ? p.get().body() : std::string();
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

result<run_report> run_load(const driver_config& cfg, const std::vector<planned_request>& plan) {
  if (plan.empty()) return status::invalid("nothing to send: the plan is empty");
  if (cfg.connections < 1) return status::invalid("--connections must be >= 1");
  net::io_context resolve_ioc;
  tcp::resolver resolver(resolve_ioc);
  beast::error_code ec;
  auto results = resolver.resolve(cfg.host, std::to_string(cfg.port), ec);
  if (ec || results.empty())
    return status::invalid("cannot resolve " + cfg.host + ": " + ec.message() + "; pass --host");
  const tcp::endpoint ep = results.begin()->endpoint();
  const std::string before = get_text(ep, cfg.host, "/metrics");
  runner r(cfg, plan, ep);
  run_report report = r.run();
  summarize_modelled(report, r.take_modelled(), before, before.empty() ? std::string() : get_text(ep, cfg.host, "/metrics"));
  return report;
}

}  // namespace tessera::loadgen
