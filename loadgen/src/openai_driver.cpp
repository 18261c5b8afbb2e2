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

std::string fmt(double v, const char* f = "%.1f");

struct planned {
  double arrival = 0;
  int32_t prompt_tokens = 0, output_tokens = 0;  ///< as planned (prompt: 0 for a trace's text)
  std::string body;
};

// Texts of about n tokens: common words, a token each in GPT-2's and LLaMA's vocabularies (and
// n bytes... roughly) for chat; token ids for completions with prompt_ids. From the trace when it
// has rows (its first `requests` when that is set), else `requests` draws of the distributions.
std::vector<planned> make_plan(const llm_load_config& cfg) {
  splitmix64 rng(cfg.seed);
  splitmix64 prefix_rng(cfg.seed ^ 0x5eedULL);
  std::vector<planned> plan;
  double t = 0;
  std::vector<int32_t> prefix_ids;
  for (int32_t i = 0; i < cfg.shared_prefix_tokens; ++i)
    prefix_ids.push_back(static_cast<int32_t>(prefix_rng.uniform(cfg.id_lo, cfg.id_hi - 1)));
  const std::string prefix_text = cfg.shared_prefix_tokens > 0 ? make_text(cfg.shared_prefix_tokens + 2, prefix_rng) : "";
  const bool open = cfg.mode == loop_mode::open;
  int64_t n = cfg.requests;
  if (!cfg.trace.empty()) {
    n = n > 0 ? std::min<int64_t>(n, int64_t(cfg.trace.size())) : int64_t(cfg.trace.size());
  } else if (n <= 0) {
    // Enough for the duration: 1.5 x the expected arrivals (open), or a plan the closed loop cycles.
    n = open ? static_cast<int64_t>(cfg.rate * cfg.duration_seconds * 1.5) + 16 : 4096;
  }
  for (int64_t i = 0; i < n; ++i) {
    const llm_trace_row* row = cfg.trace.empty() ? nullptr : &cfg.trace[size_t(i)];
    const int32_t p = row ? row->prompt_tokens : cfg.prompt.draw(rng);
    const int32_t o = row && row->output_tokens > 0 ? row->output_tokens : cfg.output.draw(rng);
    json body{{"max_tokens", o}, {"ignore_eos", true}, {"stream", true},
              {"stream_options", {{"include_usage", true}}}, {"temperature", cfg.temperature}};
    if (!cfg.model.empty()) body["model"] = cfg.model;
    const std::string text = row && !row->prompt_text.empty() ? row->prompt_text : "";
    if (cfg.api == "chat") {
      json messages = json::array();
      if (!prefix_text.empty()) messages.push_back({{"role", "system"}, {"content", prefix_text}});
      messages.push_back({{"role", "user"}, {"content", text.empty() ? make_text(p + 2, rng) : text}});
      body["messages"] = messages;
    } else if (cfg.prompt_ids && text.empty()) {
      std::vector<int32_t> ids = prefix_ids;
      for (int32_t k = 0; k < p; ++k) ids.push_back(static_cast<int32_t>(rng.uniform(cfg.id_lo, cfg.id_hi - 1)));
      body["prompt"] = ids;
    } else {
      body["prompt"] = prefix_text + (prefix_text.empty() ? "" : " ") + (text.empty() ? make_text(p + 2, rng) : text);
    }
    if (row) {
      t = row->arrival_seconds * cfg.time_scale;
    } else if (open && cfg.rate > 0) {
      t += rng.exponential(cfg.rate);
    }
    // Open loop: nothing is planned to arrive after the duration.
    if (open && cfg.duration_seconds > 0 && t > cfg.duration_seconds) break;
    plan.push_back({t, text.empty() ? p : 0, o, body.dump()});
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
  size_t idx = 0;  // in the plan
  size_t seq = 0;  // in the order sent
  steady::time_point t0, first, last;
  bool got_first = false, done_marker = false, error_event = false;
  std::vector<double> gaps;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

class llm_runner {
 public:
  llm_runner(const llm_load_config& cfg, tcp::endpoint ep)
      : cfg_(cfg), ep_(ep), plan_(make_plan(cfg)), arrival_timer_(ioc_), progress_timer_(ioc_) {}

  size_t plan_size() const { return plan_.size(); }

  llm_report run() {
    start_ = steady::now();
    if (cfg_.progress) schedule_progress();
    if (cfg_.mode == loop_mode::closed) {
      for (int i = 0; i < std::max(1, cfg_.concurrency) && more_closed(); ++i) launch(next_++, steady::now());
    } else {
      schedule_arrivals();
    }
    ioc_.run();
    llm_report r;
    r.api = cfg_.api;
    r.workload = cfg_.trace.empty() ? "distributions" : cfg_.trace_name;
    r.time_scale = cfg_.time_scale;
    r.mode = cfg_.mode == loop_mode::open ? "open" : "closed";
    r.prompt = cfg_.prompt.describe();
    r.output = cfg_.output.describe();
    r.concurrency = cfg_.mode == loop_mode::closed ? cfg_.concurrency : 0;
    r.rate = cfg_.mode == loop_mode::open ? cfg_.rate : 0;
    if (!cfg_.trace.empty()) {
      // The trace's: its lengths' means, and the offered rate of the rows planned (arrivals scaled).
      double p = 0, o = 0;
      for (const auto& q : plan_) p += q.prompt_tokens, o += q.output_tokens;
      const double n = double(std::max<size_t>(plan_.size(), 1));
      r.prompt = "trace, mean " + fmt(p / n);
      if (plan_.size() && plan_.front().prompt_tokens == 0) r.prompt = "trace texts";
      r.output = "trace, mean " + fmt(o / n);
      const double span = plan_.empty() ? 0 : plan_.back().arrival - plan_.front().arrival;
      if (cfg_.mode == loop_mode::open) r.rate = span > 0 ? double(plan_.size() - 1) / span : 0;
    }
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
    r.slo_ttft_ms = cfg_.slo_ttft_ms;
    r.slo_tpot_ms = cfg_.slo_tpot_ms;
    r.good = good_;
    r.goodput_rps = r.duration_seconds > 0 ? static_cast<double>(good_) / r.duration_seconds : 0;
    // In the order sent (they finish in another).
    for (auto& [seq, row] : sent_rows_) r.requests.push_back(std::move(row));
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

  // Closed loop: another request to send (the plan cycles when the duration bounds the run).
  bool more_closed() const {
    if (cfg_.duration_seconds > 0 && std::chrono::duration<double>(steady::now() - start_).count() >= cfg_.duration_seconds)
      return false;
    return cycle_ || next_ < plan_.size();
  }

  void launch(size_t seq, steady::time_point t0) {
    const size_t idx = seq % plan_.size();
    ++sent_;
    ++in_flight_;
    auto s = std::make_shared<request_state>(ioc_);
    s->t0 = t0;
    s->idx = idx;
    s->seq = seq;
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
    const planned& p = plan_[s->idx];
    llm_trace_row row;
    row.arrival_seconds = std::chrono::duration<double>(s->t0 - start_).count();
    row.prompt_tokens = error || s->prompt_tokens <= 0 ? p.prompt_tokens : static_cast<int32_t>(s->prompt_tokens);
    row.output_tokens = error || s->completion_tokens <= 0 ? p.output_tokens : static_cast<int32_t>(s->completion_tokens);
    sent_rows_[s->seq] = row;
    if (error) {
      ++errors_;
      ++errors_by_kind_[error];
    } else {
      const auto now = steady::now();
      e2e_.push_back(std::chrono::duration<double>(now - s->t0).count());
      double ttft_ms = -1, tpot_ms = 0;  // one output token: no TPOT (0, as vLLM counts it)
      if (s->got_first) {
        ttft_.push_back(std::chrono::duration<double>(s->first - s->t0).count());
        ttft_ms = ttft_.back() * 1e3;
        if (s->completion_tokens > 1) {
          tpot_.push_back(std::chrono::duration<double>(now - s->first).count() /
                          static_cast<double>(s->completion_tokens - 1));
          tpot_ms = tpot_.back() * 1e3;
        }
      }
      if (ttft_ms >= 0 && (cfg_.slo_ttft_ms <= 0 || ttft_ms <= cfg_.slo_ttft_ms) &&
          (cfg_.slo_tpot_ms <= 0 || tpot_ms <= cfg_.slo_tpot_ms))
        ++good_;
      itl_.insert(itl_.end(), s->gaps.begin(), s->gaps.end());
      prompt_tokens_ += s->prompt_tokens;
      output_tokens_ += s->completion_tokens;
    }
    if (cfg_.mode == loop_mode::closed && more_closed()) return launch(next_++, steady::now());
    if (in_flight_ == 0 && (cfg_.mode == loop_mode::closed || next_ >= plan_.size())) {
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
  int64_t good_ = 0;
  std::map<size_t, llm_trace_row> sent_rows_;
  bool cycle_ = cfg_.mode == loop_mode::closed && cfg_.requests <= 0 && cfg_.trace.empty() && cfg_.duration_seconds > 0;
  bool finished_ = false;
};

std::string fmt(double v, const char* f) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

result<llm_report> run_llm_load(const llm_load_config& cfg) {
  if (cfg.requests < 0) return status::invalid("--requests must be >= 0");
  if (cfg.requests == 0 && cfg.trace.empty() && !(cfg.duration_seconds > 0))
    return status::invalid("--requests 0 needs a --duration or a --trace");
  if (cfg.duration_seconds < 0 || !std::isfinite(cfg.duration_seconds)) return status::invalid("--duration must be >= 0");
  if (!(cfg.time_scale > 0) || !std::isfinite(cfg.time_scale)) return status::invalid("--time-scale must be > 0");
  if (cfg.slo_ttft_ms < 0 || cfg.slo_tpot_ms < 0) return status::invalid("--slo-ttft-ms and --slo-tpot-ms must be >= 0");
  if (cfg.api != "chat" && cfg.api != "completions") return status::invalid("--api must be chat or completions");
  if (cfg.prompt_ids && cfg.api != "completions") return status::invalid("--prompt-ids needs --api completions");
  if (cfg.mode == loop_mode::open && cfg.trace.empty() && !(cfg.rate > 0)) return status::invalid("open loop needs --rate > 0");
  if (cfg.mode == loop_mode::closed && cfg.concurrency < 1) return status::invalid("--concurrency must be >= 1");
  if (cfg.id_lo < 0 || cfg.id_hi <= cfg.id_lo) return status::invalid("prompt id range must be 0 <= lo < hi");
  net::io_context resolve_ioc;
  tcp::resolver resolver(resolve_ioc);
  beast::error_code ec;
  auto results = resolver.resolve(cfg.host, std::to_string(cfg.port), ec);
  if (ec || results.empty()) return status::invalid("cannot resolve " + cfg.host + ": " + ec.message() + "; pass --host");
  llm_runner r(cfg, results.begin()->endpoint());
  if (r.plan_size() == 0) return status::invalid("no request arrives within --duration " + fmt(cfg.duration_seconds, "%g") + " s");
  return r.run();
}

std::string to_table(const llm_report& r) {
  std::ostringstream o;
  o << "api          " << r.api << " (streamed)\nmode         " << r.mode
    << (r.mode == "open" ? " (" + fmt(r.rate) + " req/s offered)" : " (" + std::to_string(r.concurrency) + " clients)")
    << (r.workload != "distributions" ? "\nworkload     " + r.workload + (r.time_scale != 1 ? ", arrivals x " + fmt(r.time_scale, "%g") : "") : "")
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
  if (r.has_slo())
    o << "\ngoodput      " << fmt(r.goodput_rps, "%.2f") << " req/s (" << r.good << " of " << r.ok << " ok requests within"
      << (r.slo_ttft_ms > 0 ? " TTFT <= " + fmt(r.slo_ttft_ms, "%g") + " ms" : "")
      << (r.slo_ttft_ms > 0 && r.slo_tpot_ms > 0 ? " and" : "")
      << (r.slo_tpot_ms > 0 ? " TPOT <= " + fmt(r.slo_tpot_ms, "%g") + " ms" : "") << ")";
  o << "\n";
  return o.str();
}

std::string llm_csv_header() {
  return "api,mode,concurrency,rate,prompt,output,shared_prefix,duration_s,sent,ok,errors,prompt_tokens,"
         "output_tokens,req_per_s,output_tok_per_s,total_tok_per_s,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,"
         "tpot_p50_ms,tpot_p99_ms,itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,slo_ttft_ms,slo_tpot_ms,good,goodput_rps,"
         "time_scale,workload\n";
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
    << fmt(r.itl.p99, "%.3f") << ',' << fmt(r.e2e.p50, "%.3f") << ',' << fmt(r.e2e.p99, "%.3f") << ',';
  // Without an SLO there is no goodput: empty fields, not a number that looks measured.
  if (r.has_slo())
    o << fmt(r.slo_ttft_ms, "%g") << ',' << fmt(r.slo_tpot_ms, "%g") << ',' << r.good << ',' << fmt(r.goodput_rps, "%.3f");
  else
    o << ",,,";
  std::string w = r.workload;
  std::replace(w.begin(), w.end(), ',', ';');
  std::replace(w.begin(), w.end(), '"', '\'');
  o << ',' << fmt(r.time_scale, "%g") << ',' << w << '\n';
  return o.str();
}

std::string to_json(const llm_report& r) {
  auto pct = [](const llm_report::pct& p) { return json{{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}}; };
  json j{{"api", r.api},
         {"mode", r.mode},
         {"workload", r.workload},
         {"time_scale", r.time_scale},
         {"concurrency", r.concurrency},
         {"rate", r.rate},
         {"prompt", r.prompt},
         {"output", r.output},
         {"shared_prefix", r.shared_prefix_tokens},
         {"duration_s", r.duration_seconds},
         {"sent", r.sent},
         {"ok", r.ok},
         {"errors", r.errors},
         {"errors_by_kind", r.errors_by_kind},
         {"prompt_tokens", r.prompt_tokens},
         {"output_tokens", r.output_tokens},
         {"req_per_s", r.requests_per_second},
         {"output_tok_per_s", r.output_tokens_per_second},
         {"total_tok_per_s", r.total_tokens_per_second},
         {"ttft_ms", pct(r.ttft)},
         {"tpot_ms", pct(r.tpot)},
         {"itl_ms", pct(r.itl)},
         {"e2e_ms", pct(r.e2e)}};
  if (r.has_slo())
    j["goodput"] = {{"slo_ttft_ms", r.slo_ttft_ms}, {"slo_tpot_ms", r.slo_tpot_ms}, {"good", r.good}, {"goodput_rps", r.goodput_rps}};
  return j.dump(2) + "\n";
}

}  // namespace tessera::loadgen
