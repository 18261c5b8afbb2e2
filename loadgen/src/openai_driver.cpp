// The OpenAI streaming load driver on Beast. See openai_driver.hpp.
#include "tessera/loadgen/openai_driver.hpp"

#include "driver.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

namespace tessera::loadgen {

using json = nlohmann::json;

result<length_dist> length_dist::parse(std::string_view t) {
  auto number = [](std::string_view s, int32_t& out) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string_view::npos) return false;
    out = std::stoi(std::string(s));
    return out >= 1;
  };
  length_dist d;
  std::string_view inner = t;
  if (inner.size() > 3 && inner.substr(0, 2) == "U[" && inner.back() == ']') inner = inner.substr(2, inner.size() - 3);
  auto sep = inner.find_first_of(",-");
  if (sep == std::string_view::npos) {
    if (inner != t || !number(t, d.lo)) return status::invalid("length '" + std::string(t) + "': write N or U[lo,hi] (or lo-hi)");
    d.hi = d.lo;
    return d;
  }
  d.kind = uniform;
  if (!number(inner.substr(0, sep), d.lo) || !number(inner.substr(sep + 1), d.hi) || d.hi < d.lo)
    return status::invalid("length '" + std::string(t) + "': write N or U[lo,hi] with 1 <= lo <= hi");
  return d;
}

std::string length_dist::describe() const {
  return kind == fixed ? std::to_string(lo) : "U[" + std::to_string(lo) + "," + std::to_string(hi) + "]";
}

namespace {

struct planned {
  double arrival = 0;
  std::string body;
};

// Texts of about n tokens: common words, a token each in GPT-2's and LLaMA's vocabularies (and
// n bytes... roughly) for chat; token ids for completions with prompt_ids.
std::vector<planned> make_plan(const llm_load_config& cfg) {
  splitmix64 rng(cfg.seed);
  splitmix64 prefix_rng(cfg.seed ^ 0x5eedULL);
  std::vector<planned> plan;
  double t = 0;
  std::vector<int32_t> prefix_ids;
  for (int32_t i = 0; i < cfg.shared_prefix_tokens; ++i)
    prefix_ids.push_back(static_cast<int32_t>(prefix_rng.uniform(cfg.id_lo, cfg.id_hi - 1)));
  const std::string prefix_text = cfg.shared_prefix_tokens > 0 ? make_text(cfg.shared_prefix_tokens + 2, prefix_rng) : "";
  for (int64_t i = 0; i < cfg.requests; ++i) {
    const int32_t p = cfg.prompt.draw(rng), o = cfg.output.draw(rng);
    json body{{"max_tokens", o}, {"ignore_eos", true}, {"stream", true},
              {"stream_options", {{"include_usage", true}}}, {"temperature", cfg.temperature}};
    if (!cfg.model.empty()) body["model"] = cfg.model;
    if (cfg.api == "chat") {
      json messages = json::array();
      if (!prefix_text.empty()) messages.push_back({{"role", "system"}, {"content", prefix_text}});
      messages.push_back({{"role", "user"}, {"content", make_text(p + 2, rng)}});
      body["messages"] = messages;
    } else if (cfg.prompt_ids) {
      std::vector<int32_t> ids = prefix_ids;
      for (int32_t k = 0; k < p; ++k) ids.push_back(static_cast<int32_t>(rng.uniform(cfg.id_lo, cfg.id_hi - 1)));
      body["prompt"] = ids;
    } else {
      body["prompt"] = prefix_text + (prefix_text.empty() ? "" : " ") + make_text(p + 2, rng);
    }
    if (cfg.mode == loop_mode::open && cfg.rate > 0) t += rng.exponential(cfg.rate);
    plan.push_back({t, body.dump()});
  }
  return plan;
}

struct request_state : std::enable_shared_from_this<request_state> {
  explicit request_state(net::io_context& ioc) : stream(ioc) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  http::request<http::string_body> req;
  http::response_parser<http::string_body> parser;
  std::function<size_t(uint64_t, beast::string_view, beast::error_code&)> on_chunk;
  std::string sse;
  size_t scan = 0;
  steady::time_point t0, first, last;
  bool got_first = false, done_marker = false, error_event = false;
  std::vector<double> gaps;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

class llm_runner {
 public:
  llm_runner(const llm_load_config& cfg, tcp::endpoint ep)
      : cfg_(cfg), ep_(ep), plan_(make_plan(cfg)), arrival_timer_(ioc_), progress_timer_(ioc_) {}

  llm_report run() {
    start_ = steady::now();
    if (cfg_.progress) schedule_progress();
    if (cfg_.mode == loop_mode::closed) {
      for (int i = 0; i < std::max(1, cfg_.concurrency) && next_ < plan_.size(); ++i) launch(next_++, steady::now());
    } else {
      schedule_arrivals();
    }
    ioc_.run();
    llm_report r;
    r.api = cfg_.api;
    r.mode = cfg_.mode == loop_mode::open ? "open" : "closed";
    r.prompt = cfg_.prompt.describe();
    r.output = cfg_.output.describe();
    r.concurrency = cfg_.mode == loop_mode::closed ? cfg_.concurrency : 0;
    r.rate = cfg_.mode == loop_mode::open ? cfg_.rate : 0;
    r.shared_prefix_tokens = cfg_.shared_prefix_tokens;
    r.duration_seconds = std::chrono::duration<double>(end_ - start_).count();
    r.sent = sent_;
    r.ok = static_cast<int64_t>(e2e_.size());
    r.errors = errors_;
    r.errors_by_kind = errors_by_kind_;
    r.first_error = first_error_;
    r.prompt_tokens = prompt_tokens_;
    r.output_tokens = output_tokens_;
    if (r.duration_seconds > 0) {
      r.requests_per_second = static_cast<double>(r.ok) / r.duration_seconds;
      r.output_tokens_per_second = static_cast<double>(output_tokens_) / r.duration_seconds;
      r.total_tokens_per_second = static_cast<double>(output_tokens_ + prompt_tokens_) / r.duration_seconds;
    }
    r.ttft = summarize(ttft_);
    r.tpot = summarize(tpot_);
    r.itl = summarize(itl_);
    r.e2e = summarize(e2e_);
    return r;
  }

 private:
  static llm_report::pct summarize(std::vector<double> v) {
    const latency_summary s = summarize_ms(std::move(v));
    return {s.p50, s.p90, s.p99, s.mean};
  }

  void schedule_arrivals() {
    detail::fire_due_arrivals(
        arrival_timer_, start_, next_, plan_.size(), [this](size_t i) { return plan_[i].arrival; },
        [this](size_t i, steady::time_point due) { launch(i, due); }, [] { return false; }, [] {});
  }

  void launch(size_t idx, steady::time_point t0) {
    ++sent_;
    ++in_flight_;
    auto s = std::make_shared<request_state>(ioc_);
    s->t0 = t0;
    s->req = {http::verb::post, cfg_.api == "chat" ? "/v1/chat/completions" : "/v1/completions", 11};
    s->req.set(http::field::host, cfg_.host);
    s->req.set(http::field::content_type, "application/json");
    s->req.body() = plan_[idx].body;
    s->req.prepare_payload();
    s->parser.body_limit(64 << 20);
    s->on_chunk = [this, raw = s.get()](uint64_t, beast::string_view body, beast::error_code&) {
      raw->sse.append(body.data(), body.size());
      events(*raw);
      return body.size();
    };
    s->parser.on_chunk_body(s->on_chunk);
    s->stream.expires_after(std::chrono::duration_cast<steady::duration>(
        std::chrono::duration<double>(cfg_.request_timeout_seconds)));
    s->stream.async_connect(ep_, [this, s](beast::error_code ec) {
      if (ec) return finish(s, "connect");
      beast::error_code ignored;
      s->stream.socket().set_option(tcp::no_delay(true), ignored);
      http::async_write(s->stream, s->req, [this, s](beast::error_code ec, std::size_t) {
        if (ec) return finish(s, ec == beast::error::timeout ? "timeout" : "write");
        read_more(s);
      });
    });
  }

  void read_more(const std::shared_ptr<request_state>& s) {
    http::async_read_some(s->stream, s->buffer, s->parser, [this, s](beast::error_code ec, std::size_t) {
      if (ec) return finish(s, ec == beast::error::timeout ? "timeout" : "read");
      if (!s->parser.is_done()) return read_more(s);
      const unsigned st = s->parser.get().result_int();
      if (st != 200) {
        if (first_error_.empty()) first_error_ = s->parser.get().body().substr(0, 300);
        return finish(s, std::to_string(st).c_str());
      }
      if (s->error_event) return finish(s, "stream-error");
      if (!s->done_marker) return finish(s, "no-[DONE]");
      finish(s, nullptr);
    });
  }

  // Complete "data: ..." events: text pieces time the tokens, the usage counts them.
  void events(request_state& s) {
    for (;;) {
      auto at = s.sse.find("data: ", s.scan);
      if (at == std::string::npos) return;
      auto end = s.sse.find("\n\n", at);
      if (end == std::string::npos) return;
      s.scan = end + 2;
      std::string_view payload(s.sse.data() + at + 6, end - at - 6);
      if (payload == "[DONE]") {
        s.done_marker = true;
        continue;
      }
      json j = json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) s.error_event = true;
      if (j.contains("usage") && j["usage"].is_object()) {
        s.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        s.completion_tokens = j["usage"].value("completion_tokens", 0);
      }
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) continue;
      const json& c = j["choices"][0];
      std::string text;
      if (c.contains("text") && c["text"].is_string()) text = c["text"];
      if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
        text = c["delta"]["content"];
      if (text.empty()) continue;
      const auto now = steady::now();
      if (!s.got_first) {
        s.got_first = true;
        s.first = now;
      } else {
        s.gaps.push_back(std::chrono::duration<double>(now - s.last).count());
      }
      s.last = now;
    }
  }

  void finish(const std::shared_ptr<request_state>& s, const char* error) {
    --in_flight_;
    beast::error_code ignored;
    s->stream.socket().close(ignored);
    if (error) {
      ++errors_;
      ++errors_by_kind_[error];
    } else {
      const auto now = steady::now();
      e2e_.push_back(std::chrono::duration<double>(now - s->t0).count());
      if (s->got_first) {
        ttft_.push_back(std::chrono::duration<double>(s->first - s->t0).count());
        if (s->completion_tokens > 1)
          tpot_.push_back(std::chrono::duration<double>(now - s->first).count() /
                          static_cast<double>(s->completion_tokens - 1));
      }
      itl_.insert(itl_.end(), s->gaps.begin(), s->gaps.end());
      prompt_tokens_ += s->prompt_tokens;
      output_tokens_ += s->completion_tokens;
    }
    if (cfg_.mode == loop_mode::closed && next_ < plan_.size()) return launch(next_++, steady::now());
    if (in_flight_ == 0 && next_ >= plan_.size()) {
      end_ = steady::now();
      arrival_timer_.cancel();
      progress_timer_.cancel();
      finished_ = true;
    }
  }

  void schedule_progress() {
    progress_timer_.expires_after(std::chrono::seconds(1));
    progress_timer_.async_wait([this](beast::error_code ec) {
      if (ec || finished_) return;
      std::fprintf(stderr, "[loadgen] %6.1f s  sent %lld  ok %zu  errors %lld  in flight %lld  tokens %lld\n",
                   std::chrono::duration<double>(steady::now() - start_).count(), static_cast<long long>(sent_),
                   e2e_.size(), static_cast<long long>(errors_), static_cast<long long>(in_flight_),
                   static_cast<long long>(output_tokens_));
      schedule_progress();
    });
  }

  const llm_load_config& cfg_;
  tcp::endpoint ep_;
  std::vector<planned> plan_;
  net::io_context ioc_;
  net::steady_timer arrival_timer_, progress_timer_;
  size_t next_ = 0;
  steady::time_point start_, end_;
  int64_t sent_ = 0, in_flight_ = 0, errors_ = 0, prompt_tokens_ = 0, output_tokens_ = 0;
  std::map<std::string, int64_t> errors_by_kind_;
  std::string first_error_;
  std::vector<double> ttft_, tpot_, itl_, e2e_;
  bool finished_ = false;
};

std::string fmt(double v, const char* f = "%.1f") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

result<llm_report> run_llm_load(const llm_load_config& cfg) {
  if (cfg.requests < 1) return status::invalid("--requests must be >= 1");
  if (cfg.api != "chat" && cfg.api != "completions") return status::invalid("--api must be chat or completions");
  if (cfg.prompt_ids && cfg.api != "completions") return status::invalid("--prompt-ids needs --api completions");
  if (cfg.mode == loop_mode::open && !(cfg.rate > 0)) return status::invalid("open loop needs --rate > 0");
  if (cfg.mode == loop_mode::closed && cfg.concurrency < 1) return status::invalid("--concurrency must be >= 1");
  if (cfg.id_lo < 0 || cfg.id_hi <= cfg.id_lo) return status::invalid("prompt id range must be 0 <= lo < hi");
  net::io_context resolve_ioc;
  tcp::resolver resolver(resolve_ioc);
  beast::error_code ec;
  auto results = resolver.resolve(cfg.host, std::to_string(cfg.port), ec);
  if (ec || results.empty()) return status::invalid("cannot resolve " + cfg.host + ": " + ec.message() + "; pass --host");
  llm_runner r(cfg, results.begin()->endpoint());
  return r.run();
}

std::string to_table(const llm_report& r) {
  std::ostringstream o;
  o << "api          " << r.api << " (streamed)\nmode         " << r.mode
    << (r.mode == "open" ? " (" + fmt(r.rate) + " req/s offered)" : " (" + std::to_string(r.concurrency) + " clients)")
    << "\nprompt       " << r.prompt << " tokens" << (r.shared_prefix_tokens ? " + a shared prefix of " + std::to_string(r.shared_prefix_tokens) : "")
    << "\noutput       " << r.output << " tokens\nduration     " << fmt(r.duration_seconds, "%.2f") << " s"
    << "\nsent         " << r.sent << "\nok           " << r.ok << "\nerrors       " << r.errors;
  for (const auto& [k, n] : r.errors_by_kind) o << "\n  " << k << ": " << n;
  if (!r.first_error.empty()) o << "\n  first error answer: " << r.first_error;
  o << "\ntokens       prompt " << r.prompt_tokens << "  output " << r.output_tokens
    << "\nthroughput   " << fmt(r.requests_per_second, "%.2f") << " req/s  " << fmt(r.output_tokens_per_second)
    << " output tok/s  " << fmt(r.total_tokens_per_second) << " total tok/s";
  auto line = [&](const char* name, const llm_report::pct& p) {
    o << "\n" << name << " ms  p50 " << fmt(p.p50, "%.2f") << "  p90 " << fmt(p.p90, "%.2f") << "  p99 "
      << fmt(p.p99, "%.2f") << "  mean " << fmt(p.mean, "%.2f");
  };
  line("TTFT    ", r.ttft);
  line("TPOT    ", r.tpot);
  line("ITL     ", r.itl);
  line("e2e     ", r.e2e);
  o << "\n";
  return o.str();
}

std::string llm_csv_header() {
  return "api,mode,concurrency,rate,prompt,output,shared_prefix,duration_s,sent,ok,errors,prompt_tokens,"
         "output_tokens,req_per_s,output_tok_per_s,total_tok_per_s,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,"
         "tpot_p50_ms,tpot_p99_ms,itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms\n";
}

std::string to_csv_row(const llm_report& r) {
  std::ostringstream o;
  // Lengths as "lo-hi" (no comma to quote).
  auto plain = [](std::string d) {
    if (d.rfind("U[", 0) == 0) d = d.substr(2, d.size() - 3);
    std::replace(d.begin(), d.end(), ',', '-');
    return d;
  };
  o << r.api << ',' << r.mode << ',' << r.concurrency << ',' << r.rate << ',' << plain(r.prompt) << ','
    << plain(r.output) << ',' << r.shared_prefix_tokens << ',' << fmt(r.duration_seconds, "%.3f") << ',' << r.sent << ',' << r.ok << ','
    << r.errors << ',' << r.prompt_tokens << ',' << r.output_tokens << ',' << fmt(r.requests_per_second, "%.3f") << ','
    << fmt(r.output_tokens_per_second, "%.2f") << ',' << fmt(r.total_tokens_per_second, "%.2f") << ','
    << fmt(r.ttft.p50, "%.3f") << ',' << fmt(r.ttft.p90, "%.3f") << ',' << fmt(r.ttft.p99, "%.3f") << ','
    << fmt(r.tpot.p50, "%.3f") << ',' << fmt(r.tpot.p99, "%.3f") << ',' << fmt(r.itl.p50, "%.3f") << ','
    << fmt(r.itl.p99, "%.3f") << ',' << fmt(r.e2e.p50, "%.3f") << ',' << fmt(r.e2e.p99, "%.3f") << '\n';
  return o.str();
}

}  // namespace tessera::loadgen
