// The HTTP API without sockets: dispatch through the route table, the server's own routes (health,
// /info, /metrics), the shared checks, the request fan-in. The APIs are registered in
// api_registry.cpp. See service.hpp and api.hpp.
#include "tessera/serving/service.hpp"

#include "tessera/serving/api.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <stdexcept>

#include "tessera/common/log.hpp"
#include "tessera/serving/utf8.hpp"

namespace tessera::serving {

namespace detail {

api_error map_status(const status& st) {
  switch (st.code()) {
    case errc::overloaded: return {429, std::string(error_kind::overloaded), st.message()};
    case errc::timeout: return {504, std::string(error_kind::timeout), st.message()};
    case errc::cancelled: return {503, std::string(error_kind::unhealthy), st.message()};
    case errc::invalid_argument: return {413, std::string(error_kind::validation), st.message()};
    default: return {424, std::string(error_kind::backend), st.to_string()};
  }
}

std::string to_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {

/// Deeper nesting is refused before parsing: the request forms need 5 levels at most, and deep
/// values would otherwise reach recursive code (copies, dumps).
constexpr int max_json_depth = 32;

/// True when `body` nests arrays/objects deeper than `limit` (strings skipped; the JSON itself is
/// checked by the parser afterwards).
bool nests_deeper_than(std::string_view body, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

std::optional<api_error> parse_body(std::string_view body, json& out) {
  const std::string bad(error_kind::bad_request);
  if (auto invalid = find_invalid_utf8(body)) return api_error{400, bad, invalid->describe("the request body")};
  // JSON never holds a raw NUL (inside strings it is written \u0000), and nlohmann's parser takes
  // one for the end of the input: '{"inputs": "a"}\0<anything>' would pass as valid.
  if (auto nul = body.find('\0'); nul != std::string_view::npos)
    return api_error{400, bad,
                     "NUL byte at byte " + std::to_string(nul) +
                         " of the request body; JSON cannot hold one (inside a string write "
                         "\\u0000)"};
  if (nests_deeper_than(body, max_json_depth))
    return api_error{400, bad, "JSON nested deeper than " + std::to_string(max_json_depth) + " levels"};
  try {
    out = json::parse(body);
  } catch (const json::exception& e) {
    return api_error{400, bad, std::string("malformed JSON: ") + e.what()};
  }
  return std::nullopt;
}

int64_t checked_product(int64_t a, int64_t b) {
  int64_t p;
  return __builtin_mul_overflow(a, b, &p) ? -1 : p;
}

size_t count_chars(std::string_view utf8) {
  size_t n = 0;
  for (unsigned char c : utf8) n += (c & 0xC0) != 0x80;
  return n;
}

std::string_view json_kind(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

}  // namespace detail

using namespace detail;

void call_state::complete(size_t i, sequence_outcome o) {
  outcomes[i] = std::move(o);
  if (remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  svc->unwatch(*this);
  if (!claim_reply()) return;  // the watchdog answered already
  for (const auto& out : outcomes) {
    if (!out.st.ok()) {
      api_error e = map_status(out.st);
      fail(svc->inference_error(e.status, e.type, e.message));
      return;
    }
  }
  http_reply r;
  try {
    r = build(outcomes);
  } catch (const std::exception& e) {  // never on a backend's thread: answer, log, go on
    TESSERA_LOG_ERROR("building a reply failed: " << e.what());
    fail(svc->inference_error(500, error_kind::internal, "internal error while building the answer"));
    return;
  }
  auto& m = svc->metrics();
  if (r.status != 200) {
    m.count_failure(r.status == 424 ? error_kind::backend : error_kind::validation);
    return fail(std::move(r));
  }
  m.request_success.fetch_add(1, std::memory_order_relaxed);
  m.request_duration.observe(to_seconds(steady::now() - start));
  reply(std::move(r));
}

service::service(service_config cfg, router& r, std::shared_ptr<const tokenizer> tok,
                 model_info info, serving_metrics& metrics)
    : cfg_(cfg), router_(r), tokenizer_(std::move(tok)), info_(std::move(info)),
      metrics_(metrics) {
  watchdog_ = std::thread([this] { run_watchdog(); });
  if (info_.max_input_length <= 0 || info_.max_input_length > router_.max_sequence_length())
    info_.max_input_length = router_.max_sequence_length();
  metrics_.tei.max_input_length.store(info_.max_input_length);
  routes_ = std::make_unique<route_table>();
  add_own_routes(*routes_);
  apis_ = make_apis(*this);
  for (auto& a : apis_) a->add_routes(*routes_);
}

service::~service() {
  {
    std::lock_guard lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  watchdog_.join();
}

void service::watch(const std::shared_ptr<call_state>& call, time_point answer_by) {
  std::lock_guard lock(watch_mu_);
  bool first = watched_.empty() || answer_by < watched_.begin()->first;
  call->watch_entry = watched_.emplace(answer_by, call);
  call->watched = true;
  if (first) watch_cv_.notify_one();
}

void service::unwatch(call_state& call) {
  std::lock_guard lock(watch_mu_);
  if (!call.watched) return;
  watched_.erase(call.watch_entry);
  call.watched = false;
}

void service::run_watchdog() {
  std::unique_lock lock(watch_mu_);
  while (!watch_stop_) {
    if (watched_.empty()) {
      watch_cv_.wait(lock);
      continue;
    }
    auto it = watched_.begin();
    // A copy: wait_until reads the deadline after waking, when unwatch() may have erased the
    // entry (ASan: heap-use-after-free in every served test).
    const time_point next = it->first;
    if (steady::now() < next) {
      watch_cv_.wait_until(lock, next);
      continue;
    }
    std::shared_ptr<call_state> call = it->second.lock();
    watched_.erase(it);
    if (!call) continue;
    call->watched = false;
    lock.unlock();
    if (call->claim_reply())
      call->fail(inference_error(504, error_kind::timeout,
                              "no answer from the backend within the request deadline (" +
                                  std::to_string(to_seconds(cfg_.request_timeout)) +
                                  " s) plus " + std::to_string(to_seconds(cfg_.answer_grace)) +
                                  " s of grace"));
    lock.lock();
  }
}

std::string service::label(int32_t i) const {
  if (i >= 0 && static_cast<size_t>(i) < info_.labels.size()) return info_.labels[i];
  return "LABEL_" + std::to_string(i);
}

http_reply service::error_body(unsigned status, std::string_view type, std::string_view message) {
  http_reply r;
  r.status = status;
  r.body = to_text(json{{"error", message}, {"error_type", type}});
  return r;
}

http_reply service::error_reply(unsigned status, std::string_view type, std::string_view message) {
  metrics_.http_errors.add(type);
  return error_body(status, type, message);
}

http_reply service::wrong_method_reply(std::string_view method, std::string_view path, std::string_view allow) {
  http_reply r = error_reply(405, error_kind::method_not_allowed,
                             printable(method, 32) + " is not allowed on " + printable(path, 100) + "; use " +
                                 std::string(allow));
  r.allow = std::string(allow);
  return r;
}

http_reply service::inference_error(unsigned status, std::string_view type, std::string_view message) {
  metrics_.count_failure(type);
  return error_body(status, type, message);
}

void service::handle(std::string_view method, std::string_view target, std::string_view body,
                     reply_fn reply, request_headers headers) {
  // The last resort: an exception from any route is answered 500 (once: a route may have replied
  // already) and logged; the process goes on serving.
  auto replied = std::make_shared<std::atomic<bool>>(false);
  reply_fn once = [replied, reply = std::move(reply)](http_reply r) {
    if (!replied->exchange(true)) reply(std::move(r));
  };
  std::string failure;
  try {
    return route(method, target, body, headers, once);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  TESSERA_LOG_ERROR("request " << printable(method, 16) << " " << printable(target, 100)
                               << " failed: " << printable(failure));
  if (!replied->load()) once(error_reply(500, error_kind::internal, "internal error; the server goes on"));
}

void service::route(std::string_view method, std::string_view target, std::string_view body,
                    const request_headers& headers, const reply_fn& reply) {
  const std::string_view path = target.substr(0, target.find('?'));
  std::string allow;
  switch (routes_->dispatch({method, path, target, body, headers, reply}, allow)) {
    case route_table::outcome::handled: return;
    case route_table::outcome::wrong_method: return reply(wrong_method_reply(method, path, allow));
    case route_table::outcome::no_route: break;
  }
  reply(error_reply(404, error_kind::not_found, "no route " + printable(path, 100)));
}

void service::add_own_routes(route_table& t) {
  // Health on GET /health, / and /ping, as TEI does (POST / is the TEI API's). A decoder server
  // is healthy while its engine is; an encoder server while a backend can take requests, and a
  // replica out of rotation is named (TEI's meaning: 200 while the server can answer).
  auto health = [this](const route_call& c) {
    if (llm_.engine) {
      if (!llm_.engine->healthy()) return c.reply(error_reply(503, error_kind::unhealthy, "the decoder backend is down"));
      return c.reply({200, "application/json", ""});
    }
    if (!router_.healthy())
      return c.reply(error_reply(503, error_kind::unhealthy, "no healthy backend" + degraded_detail()));
    std::string detail = degraded_detail();
    if (detail.empty()) return c.reply({200, "application/json", ""});
    c.reply({200, "application/json", to_text(json{{"status", "degraded"}, {"detail", detail.substr(2)}})});
  };
  for (const char* p : {"/health", "/", "/ping"}) t.add("GET", p, health);
  t.add("GET", "/info", [this](const route_call& c) { c.reply(info_reply()); });
  t.add("GET", "/metrics", [this](const route_call& c) {
    auto gauges = router_.gauges();
    if (llm_.engine)
      for (auto& g : llm_.engine->gauges()) gauges.push_back(std::move(g));
    c.reply({200, "text/plain; version=0.0.4", metrics_.to_prometheus(gauges)});
  });
}

std::optional<api_error> service::check_batch_size(size_t inputs) const {
  if (static_cast<int64_t>(inputs) <= cfg_.max_client_batch_size) return std::nullopt;
  return api_error{413, std::string(error_kind::validation),
                   "batch size " + std::to_string(inputs) + " > maximum allowed batch size " +
                       std::to_string(cfg_.max_client_batch_size)};
}

std::optional<api_error> service::encode_text(std::string_view a, const std::string_view* b, bool truncate,
                                              truncation_side side, unsigned tokenizer_status,
                                              backends::sequence_input& out) const {
  if (auto e = need_encoder()) return e;
  const int32_t cut = truncate ? info_.max_input_length : 0;
  auto enc = b ? tokenizer_->encode_pair(a, *b, cut, side) : tokenizer_->encode(a, cut, side);
  if (!enc.ok()) return api_error{tokenizer_status, std::string(error_kind::tokenizer), enc.error().message()};
  out = std::move(*enc);
  return std::nullopt;
}

std::optional<api_error> service::need_encoder() const {
  if (tokenizer_) return std::nullopt;
  return api_error{404, std::string(error_kind::not_found),
                   "model " + info_.model_id + " is a decoder: this route needs an encoder model; "
                   "use /v1/completions or /v1/chat/completions"};
}

std::optional<api_error> service::check_length(size_t tokens, std::string_view field,
                                               std::string_view how_to_truncate) const {
  const int32_t max_len = info_.max_input_length;
  if (static_cast<int64_t>(tokens) <= max_len) return std::nullopt;
  return api_error{413, std::string(error_kind::validation),
                   "Input validation error: " + std::string(field) + " must have at most " + std::to_string(max_len) +
                       " tokens. Given: " + std::to_string(tokens) + "; " + std::string(how_to_truncate) +
                       " to cut it"};
}

std::optional<api_error> service::check_healthy() const {
  if (router_.healthy()) return std::nullopt;
  return api_error{503, std::string(error_kind::unhealthy), "no healthy backend"};
}

void service::submit_all(std::shared_ptr<call_state> call, std::vector<backends::sequence_input> seqs) {
  const time_point now = steady::now();
  if (cfg_.request_timeout > duration::zero())
    watch(call, now + cfg_.request_timeout + cfg_.answer_grace);
  for (size_t i = 0; i < seqs.size(); ++i) {
    auto r = std::make_unique<inference_request>();
    r->input = std::move(seqs[i]);
    r->arrival = now;
    if (cfg_.request_timeout > duration::zero()) r->deadline = now + cfg_.request_timeout;
    r->done = [call, i](sequence_outcome o) { call->complete(i, std::move(o)); };
    status st = router_.submit(r);
    if (!st.ok()) r->fail(st);
  }
}

std::string service::degraded_detail() const {
  std::string out;
  for (size_t i = 0; i < router_.num_backends(); ++i) {
    auto& b = router_.backend_batcher(i).backend();
    for (const auto& r : b.replicas())
      if (r.state != "up")
        out += "; " + b.info().name + " replica " + std::to_string(r.index) + " " + r.state +
               (r.detail.empty() ? "" : ": " + r.detail);
  }
  return out;
}

http_reply service::info_reply() const {
  int32_t labels = info_.task == "embedding" ? 0 : router_.num_labels();
  json id2label = json::object(), label2id = json::object();
  for (int32_t i = 0; i < labels; ++i) {
    id2label[std::to_string(i)] = label(i);
    label2id[label(i)] = i;
  }
  json backends = json::array();
  int64_t max_tokens = 0, max_requests = 0, max_queued = 0;
  bool requests_unlimited = false;
  for (size_t i = 0; i < router_.num_backends(); ++i) {
    auto& b = router_.backend_batcher(i);
    auto bi = b.backend().info();
    max_tokens = std::max<int64_t>(max_tokens, b.config().token_budget);
    max_requests = std::max<int64_t>(max_requests, b.config().max_batch_size);
    requests_unlimited |= b.config().kind == policy_kind::token_budget && b.config().max_batch_size <= 0;
    max_queued += static_cast<int64_t>(b.config().max_queue_requests);
    json replicas = json::array();
    for (const auto& r : b.backend().replicas())
      replicas.push_back({{"index", r.index},
                          {"state", r.state},
                          {"detail", r.detail},
                          {"tiles", r.tiles},
                          {"pids", r.pids},
                          {"incarnations", r.incarnations},
                          {"recoveries", r.recoveries},
                          {"last_recovery_seconds", r.last_recovery_seconds}});
    backends.push_back({{"name", bi.name},
                        {"kind", bi.kind},
                        {"healthy", b.backend().healthy()},
                        {"replicas", replicas},
                        {"batching", policy_kind_name(b.config().kind)},
                        {"max_batch_size", b.config().max_batch_size},
                        {"token_budget", b.config().token_budget},
                        {"max_queue_delay_ms", to_seconds(b.config().max_queue_delay) * 1e3}});
  }
  json previous = nullptr;
  if (journal_ && journal_->previous().present) {
    const auto& p = journal_->previous();
    previous = json::object();
    previous["pid"] = p.pid;
    previous["started_unix"] = p.started_unix;
    previous["accepted"] = p.accepted;
    previous["answered"] = p.answered;
    previous["unanswered"] = p.unanswered();
    previous["message"] = p.describe();
  }
  // TEI's fields first (TEI v1.7.1's Info), then tessera's own. A one-label classifier is a
  // "reranker" in TEI's terms; an embedding model says its pooling.
  json model_type = info_.task == "embedding"
                        ? json{{"embedding", {{"pooling", info_.pooling}}}}
                        : json{{labels == 1 ? "reranker" : "classifier",
                                {{"id2label", id2label}, {"label2id", label2id}}}};
  json out{{"model_id", info_.model_id},
           {"model_sha", nullptr},
           {"model_dtype", info_.dtype},
           {"model_type", model_type},
           {"max_concurrent_requests", max_queued},
           {"max_input_length", info_.max_input_length},
           {"max_batch_tokens", max_tokens},
           {"max_batch_requests", requests_unlimited ? json(nullptr) : json(max_requests)},
           {"max_client_batch_size", cfg_.max_client_batch_size},
           {"auto_truncate", cfg_.auto_truncate},
           {"tokenization_workers", cfg_.tokenization_workers},
           {"version", "0.1.0"},
           {"sha", nullptr},
           {"docker_label", nullptr},
           {"previous_instance", previous},
           {"payload_limit", cfg_.max_body_bytes},
           {"routing", router_.config().strategy == routing_strategy::hybrid_length
                           ? "hybrid"
                           : "least-outstanding"},
           {"backends", backends}};
  if (llm_.engine) out["llm_replicas"] = llm_.engine->describe();
  return {200, "application/json", to_text(out)};
}

}  // namespace tessera::serving
