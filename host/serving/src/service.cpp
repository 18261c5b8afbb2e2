// The HTTP API without sockets. See service.hpp.
#include "tessera/serving/service.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <nlohmann/json.hpp>

#include "tessera/common/log.hpp"
#include "tessera/serving/utf8.hpp"

namespace tessera::serving {

using json = nlohmann::json;

namespace {

struct api_error {
  unsigned status;
  std::string type;
  std::string message;
};

/// How a failed sequence shows over HTTP.
api_error map_status(const status& st) {
  switch (st.code()) {
    case errc::overloaded: return {429, "overloaded", st.message()};
    case errc::timeout: return {504, "timeout", st.message()};
    case errc::peer_failed:
    case errc::cancelled: return {503, "unhealthy", st.message()};
    case errc::invalid_argument: return {422, "validation", st.message()};
    default: return {500, "backend", st.to_string()};
  }
}

std::string_view strip_query(std::string_view target) {
  auto q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

/// JSON text that cannot throw on a bad string: every body that may hold client text (error
/// messages quoting it, a KServe "id") goes out through here. Invalid bytes become U+FFFD.
std::string to_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// Deeper nesting is refused before parsing: the request forms need 5 levels at most, and deep
/// values would otherwise reach recursive code (copies, dumps, flatten).
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

/// The checks every JSON body gets before the parser sees it, then the parse: a reply on error.
std::optional<http_reply> parse_body(service& svc, std::string_view body, json& out) {
  if (auto bad = find_invalid_utf8(body))
    return svc.error_reply(400, "bad_request", bad->describe("the request body"));
  // JSON never holds a raw NUL (inside strings it is written \u0000), and nlohmann's parser takes
  // one for the end of the input: '{"inputs": "a"}\0<anything>' would pass as valid.
  if (auto nul = body.find('\0'); nul != std::string_view::npos)
    return svc.error_reply(400, "bad_request",
                           "NUL byte at byte " + std::to_string(nul) +
                               " of the request body; JSON cannot hold one (inside a string write "
                               "\\u0000)");
  if (nests_deeper_than(body, max_json_depth))
    return svc.error_reply(400, "bad_request",
                           "JSON nested deeper than " + std::to_string(max_json_depth) + " levels");
  try {
    out = json::parse(body);
  } catch (const json::exception& e) {
    return svc.error_reply(400, "bad_request", std::string("malformed JSON: ") + e.what());
  }
  return std::nullopt;
}

/// a * b, or -1 when it overflows int64 (both >= 0).
int64_t checked_product(int64_t a, int64_t b) {
  int64_t p;
  return __builtin_mul_overflow(a, b, &p) ? -1 : p;
}

/// One input: a text or a pair of texts.
struct input_item {
  std::string a, b;
  bool pair = false;
};

std::vector<float> softmax(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  float m = x.empty() ? 0.0f : *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += (y[i] = std::exp(x[i] - m));
  for (auto& v : y) v = static_cast<float>(v / sum);
  return y;
}

void flatten(const json& j, std::vector<const json*>& out) {
  if (j.is_array()) {
    for (const auto& e : j) flatten(e, out);
  } else {
    out.push_back(&j);
  }
}

}  // namespace

/// Per-request fan-in: one slot per sequence; the last answer sends the reply.
struct call_state {
  std::vector<sequence_outcome> outcomes;
  std::atomic<size_t> remaining{0};
  reply_fn reply;
  std::function<http_reply(std::vector<sequence_outcome>&)> build;
  service* svc = nullptr;
  time_point start;
  std::atomic<bool> replied{false};
  bool watched = false;  // under the service's watch_mu_
  std::multimap<time_point, std::weak_ptr<call_state>>::iterator watch_entry;

  /// True for the one caller allowed to reply.
  bool claim_reply() { return !replied.exchange(true, std::memory_order_acq_rel); }

  void complete(size_t i, sequence_outcome o) {
    outcomes[i] = std::move(o);
    if (remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    svc->unwatch(*this);
    if (!claim_reply()) return;  // the watchdog answered already
    for (const auto& out : outcomes) {
      if (!out.st) {
        api_error e = map_status(out.st);
        reply(svc->error_reply(e.status, e.type, e.message));
        return;
      }
    }
    http_reply r;
    try {
      r = build(outcomes);
    } catch (const std::exception& e) {  // never on a backend's thread: answer, log, go on
      TESSERA_LOG_ERROR("building a reply failed: " << e.what());
      reply(svc->error_reply(500, "internal", "internal error while building the answer"));
      return;
    }
    auto& m = svc->metrics();
    m.request_success.fetch_add(1, std::memory_order_relaxed);
    m.request_duration.observe(to_seconds(steady::now() - start));
    reply(std::move(r));
  }
};

service::service(service_config cfg, router& r, std::shared_ptr<const tokenizer> tok,
                 model_info info, serving_metrics& metrics)
    : cfg_(cfg), router_(r), tokenizer_(std::move(tok)), info_(std::move(info)),
      metrics_(metrics) {
  watchdog_ = std::thread([this] { run_watchdog(); });
  if (info_.max_input_length <= 0 || info_.max_input_length > router_.max_sequence_length())
    info_.max_input_length = router_.max_sequence_length();
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
      call->reply(error_reply(504, "timeout",
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

http_reply service::error_reply(unsigned status, std::string_view type, std::string_view message) {
  metrics_.count_failure(type);
  http_reply r;
  r.status = status;
  r.body = to_text(json{{"error", message}, {"error_type", type}});
  return r;
}

void service::handle(std::string_view method, std::string_view target, std::string_view body,
                     reply_fn reply) {
  // The last resort: an exception from any route is answered 500 (once: a route may have replied
  // already) and logged; the process goes on serving.
  auto replied = std::make_shared<std::atomic<bool>>(false);
  reply_fn once = [replied, reply = std::move(reply)](http_reply r) {
    if (!replied->exchange(true)) reply(std::move(r));
  };
  std::string failure;
  try {
    return route(method, target, body, once);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  TESSERA_LOG_ERROR("request " << printable(method, 16) << " " << printable(target, 100)
                               << " failed: " << printable(failure));
  if (!replied->load()) once(error_reply(500, "internal", "internal error; the server goes on"));
}

void service::route(std::string_view method, std::string_view target, std::string_view body,
                    const reply_fn& reply) {
  std::string_view path = strip_query(target);
  auto wrong_method = [&](std::string_view allow) {
    http_reply r = error_reply(405, "method_not_allowed",
                               printable(method, 32) + " is not allowed on " + printable(path, 100) +
                                   "; use " + std::string(allow));
    r.allow = std::string(allow);
    reply(std::move(r));
  };
  const bool get = method == "GET";
  const bool post = method == "POST";

  if (path == "/predict" || path == "/tokenize") {
    if (!post) return wrong_method("POST");
    return predict(body, path == "/tokenize", reply);
  }
  if (path == "/health" || path == "/v2/health/ready" || path == "/v2/health/live") {
    if (!get) return wrong_method("GET");
    if (path == "/v2/health/live") return reply({200, "application/json", R"({"live":true})"});
    if (!router_.healthy())
      return reply(error_reply(503, "unhealthy", "no healthy backend" + degraded_detail()));
    if (path == "/health") {
      // TEI's meaning: 200 while the server can answer. A replica out of rotation is named.
      std::string detail = degraded_detail();
      if (detail.empty()) return reply({200, "application/json", ""});
      return reply({200, "application/json", json{{"status", "degraded"}, {"detail", detail.substr(2)}}.dump()});
    }
    return reply({200, "application/json", R"({"ready":true})"});
  }
  if (path == "/info") {
    if (!get) return wrong_method("GET");
    return reply(info_reply());
  }
  if (path == "/metrics") {
    if (!get) return wrong_method("GET");
    return reply({200, "text/plain; version=0.0.4", metrics_.to_prometheus(router_.gauges())});
  }
  if (path == "/v2" || path == "/v2/") {
    if (!get) return wrong_method("GET");
    return reply({200, "application/json",
                  to_text(json{{"name", "tessera"}, {"version", "0.1.0"}, {"extensions", json::array()}})});
  }
  if (starts_with(path, "/v2/models/")) {
    std::string_view rest = path.substr(11);
    std::string_view name = rest.substr(0, rest.find('/'));
    std::string_view tail = rest.substr(name.size());
    // "/v2/models/{name}/versions/{v}/..." addresses the same single version.
    if (starts_with(tail, "/versions/")) {
      auto after = tail.substr(10);
      auto slash = after.find('/');
      tail = slash == std::string_view::npos ? std::string_view() : after.substr(slash);
    }
    if (tail.empty() || tail == "/ready" || tail == "/infer") {
      if (name != info_.model_id)
        return reply(error_reply(404, "not_found",
                                 "model '" + printable(name, 100) + "' not found; this server has '" +
                                     info_.model_id + "'"));
      if (tail == "/infer") {
        if (!post) return wrong_method("POST");
        return kserve_infer(name, body, reply);
      }
      if (!get) return wrong_method("GET");
      if (tail == "/ready") {
        if (!router_.healthy()) return reply(error_reply(503, "unhealthy", "no healthy backend"));
        return reply({200, "application/json", R"({"ready":true})"});
      }
      return reply(kserve_model_reply());
    }
  }
  reply(error_reply(404, "not_found", "no route " + printable(path, 100)));
}

void service::predict(std::string_view body, bool tokenize_only, const reply_fn& reply) {
  const time_point start = steady::now();
  metrics_.request_count.fetch_add(1, std::memory_order_relaxed);
  json req;
  if (auto err = parse_body(*this, body, req)) return reply(std::move(*err));
  if (!req.is_object() || !req.contains("inputs"))
    return reply(error_reply(422, "validation",
                             "the body must be a JSON object with \"inputs\": a string, a list "
                             "of strings, or a list of [text, text_pair] pairs"));
  // Parse "inputs".
  std::vector<input_item> items;
  bool batch = false;
  const json& in = req["inputs"];
  auto item_of = [&](const json& e, input_item& out) -> std::optional<http_reply> {
    if (e.is_string()) {
      out.a = e.get<std::string>();
      if (out.a.empty()) return error_reply(400, "empty", "input is empty");
      return std::nullopt;
    }
    if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      out.a = e[0].get<std::string>();
      out.b = e[1].get<std::string>();
      out.pair = true;
      if (out.a.empty() || out.b.empty()) return error_reply(400, "empty", "input pair has an empty text");
      return std::nullopt;
    }
    return error_reply(422, "validation",
                       "each input must be a string or a [text, text_pair] list of two strings");
  };
  if (in.is_string()) {
    items.emplace_back();
    if (auto err = item_of(in, items.back())) return reply(std::move(*err));
  } else if (in.is_array()) {
    batch = true;
    if (in.empty()) return reply(error_reply(400, "empty", "inputs is an empty list"));
    if (static_cast<int64_t>(in.size()) > cfg_.max_client_batch_size)
      return reply(error_reply(
          422, "validation",
          "batch size " + std::to_string(in.size()) + " > maximum allowed batch size " +
              std::to_string(cfg_.max_client_batch_size)));
    items.resize(in.size());
    for (size_t i = 0; i < in.size(); ++i)
      if (auto err = item_of(in[i], items[i])) return reply(std::move(*err));
  } else {
    return reply(error_reply(422, "validation",
                             "\"inputs\" must be a string, a list of strings, or a list of "
                             "[text, text_pair] pairs"));
  }
  bool truncate = cfg_.auto_truncate, raw_scores = false;
  if (req.contains("truncate") && !req["truncate"].is_null()) {
    if (!req["truncate"].is_boolean())
      return reply(error_reply(422, "validation", "\"truncate\" must be true or false"));
    truncate = req["truncate"].get<bool>();
  }
  if (req.contains("raw_scores") && !req["raw_scores"].is_null()) {
    if (!req["raw_scores"].is_boolean())
      return reply(error_reply(422, "validation", "\"raw_scores\" must be true or false"));
    raw_scores = req["raw_scores"].get<bool>();
  }
  // Tokenize and validate lengths.
  const int32_t max_len = info_.max_input_length;
  std::vector<host::sequence_input> seqs;
  seqs.reserve(items.size());
  for (const auto& it : items) {
    auto enc = it.pair ? tokenizer_->encode_pair(it.a, it.b, truncate ? max_len : 0)
                       : tokenizer_->encode(it.a, truncate ? max_len : 0);
    if (!enc) return reply(error_reply(422, "tokenizer", enc.error().message()));
    if (static_cast<int32_t>(enc->token_ids.size()) > max_len)
      return reply(error_reply(
          422, "validation",
          "input validation error: inputs must have at most " + std::to_string(max_len) +
              " tokens. Given: " + std::to_string(enc->token_ids.size()) +
              "; pass \"truncate\": true to cut it"));
    metrics_.request_input_length.observe(static_cast<double>(enc->token_ids.size()));
    seqs.push_back(std::move(*enc));
  }
  metrics_.tokenization_duration.observe(to_seconds(steady::now() - start));

  if (tokenize_only) {
    json out = json::array();
    for (const auto& s : seqs) out.push_back(s.token_ids);
    metrics_.request_success.fetch_add(1, std::memory_order_relaxed);
    return reply({200, "application/json", to_text(out)});
  }
  if (!router_.healthy()) return reply(error_reply(503, "unhealthy", "no healthy backend"));

  auto call = std::make_shared<call_state>();
  call->outcomes.resize(seqs.size());
  call->remaining.store(seqs.size());
  call->reply = reply;
  call->svc = this;
  call->start = start;
  call->build = [this, batch, raw_scores](std::vector<sequence_outcome>& outs) {
    json all = json::array();
    for (auto& o : outs) {
      std::vector<float> scores = raw_scores ? o.logits : softmax(o.logits);
      std::vector<int32_t> order(scores.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t x, int32_t y) { return scores[x] > scores[y]; });
      json one = json::array();
      for (int32_t i : order) one.push_back({{"score", scores[i]}, {"label", label(i)}});
      all.push_back(std::move(one));
    }
    return http_reply{200, "application/json", to_text(batch ? all : all[0])};
  };
  submit_all(call, std::move(seqs));
}

void service::submit_all(std::shared_ptr<call_state> call, std::vector<host::sequence_input> seqs) {
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
    if (!st) r->fail(st);
  }
}

void service::kserve_infer(std::string_view name, std::string_view body, const reply_fn& reply) {
  const time_point start = steady::now();
  metrics_.request_count.fetch_add(1, std::memory_order_relaxed);
  json req;
  if (auto err = parse_body(*this, body, req)) return reply(std::move(*err));
  if (!req.is_object() || !req.contains("inputs") || !req["inputs"].is_array() ||
      req["inputs"].empty())
    return reply(error_reply(422, "validation",
                             "a KServe v2 infer request needs \"inputs\": [{\"name\", "
                             "\"shape\", \"datatype\", \"data\"}, ...]"));
  bool truncate = cfg_.auto_truncate;
  if (req.contains("parameters") && !req["parameters"].is_null()) {
    const json& params = req["parameters"];
    if (!params.is_object())
      return reply(error_reply(422, "validation", "\"parameters\" must be an object"));
    if (params.contains("truncate") && !params["truncate"].is_null()) {
      if (!params["truncate"].is_boolean())
        return reply(error_reply(422, "validation", "parameters.truncate must be true or false"));
      truncate = params["truncate"].get<bool>();
    }
  }
  const int32_t max_len = info_.max_input_length;
  const json* text = nullptr;
  const json* ids = nullptr;
  const json* types = nullptr;
  const json* mask = nullptr;
  for (const auto& t : req["inputs"]) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("data") ||
        !t.contains("datatype") || !t["datatype"].is_string())
      return reply(error_reply(422, "validation",
                               "every input needs string \"name\", \"datatype\" and \"data\""));
    std::string n = t["name"].get<std::string>();
    std::string dt = t["datatype"].get<std::string>();
    const json** slot = dt == "BYTES"               ? &text
                        : n == "input_ids"          ? &ids
                        : n == "token_type_ids"     ? &types
                        : n == "attention_mask"     ? &mask
                                                    : nullptr;
    if (!slot)
      return reply(error_reply(422, "validation",
                               "unknown input '" + printable(n, 100) +
                                   "'; use a BYTES input (text) or INT32/INT64 "
                                   "input_ids, token_type_ids, attention_mask"));
    if (*slot)
      return reply(error_reply(422, "validation",
                               "input '" + printable(n, 100) + "' given twice (or two BYTES inputs)"));
    *slot = &t;
    if (t.contains("shape") && !t["shape"].is_null()) {
      bool ok = t["shape"].is_array();
      if (ok)
        for (const auto& d : t["shape"]) ok = ok && d.is_number_integer() && d.get<int64_t>() >= 0;
      if (!ok)
        return reply(error_reply(422, "validation", "input '" + printable(n, 100) +
                                                        "': shape must be a list of integers >= 0"));
    }
  }
  if (text && ids)
    return reply(error_reply(422, "validation",
                             "give either a BYTES text input or input_ids, not both"));
  std::vector<int64_t> shape;
  const json* main = text ? text : ids;
  if (!main)
    return reply(error_reply(422, "validation", "no BYTES text input and no input_ids input"));
  if (main->contains("shape") && (*main)["shape"].is_array())
    for (const auto& d : (*main)["shape"]) shape.push_back(d.get<int64_t>());
  std::vector<const json*> flat;
  flatten((*main)["data"], flat);
  std::vector<host::sequence_input> seqs;
  if (text) {
    if (flat.empty()) return reply(error_reply(400, "empty", "the text input has no data"));
    if (!shape.empty()) {  // KServe: the shape describes the data
      int64_t count = 1;
      for (int64_t d : shape) count = count < 0 ? -1 : checked_product(count, d);
      if (count != static_cast<int64_t>(flat.size()))
        return reply(error_reply(422, "validation",
                                 "the BYTES input's shape does not match its " +
                                     std::to_string(flat.size()) + " data elements"));
    }
    bool pairs = shape.size() == 2 && shape[1] == 2;
    size_t n = pairs ? flat.size() / 2 : flat.size();
    if (static_cast<int64_t>(n) > cfg_.max_client_batch_size)
      return reply(error_reply(422, "validation",
                               "batch size " + std::to_string(n) + " > maximum allowed batch size " +
                                   std::to_string(cfg_.max_client_batch_size)));
    for (size_t i = 0; i < n; ++i) {
      const json* a = flat[pairs ? 2 * i : i];
      const json* b = pairs ? flat[2 * i + 1] : nullptr;
      if (!a->is_string() || (b && !b->is_string()))
        return reply(error_reply(422, "validation", "BYTES data must be strings"));
      if (a->get_ref<const std::string&>().empty())
        return reply(error_reply(400, "empty", "input " + std::to_string(i) + " is empty"));
      auto enc = b ? tokenizer_->encode_pair(a->get<std::string>(), b->get<std::string>(),
                                             truncate ? max_len : 0)
                   : tokenizer_->encode(a->get<std::string>(), truncate ? max_len : 0);
      if (!enc) return reply(error_reply(422, "tokenizer", enc.error().message()));
      seqs.push_back(std::move(*enc));
    }
  } else {
    std::string dt = (*ids)["datatype"].get<std::string>();
    if (dt != "INT32" && dt != "INT64")
      return reply(error_reply(422, "validation", "input_ids must be INT32 or INT64, not " + dt));
    if (shape.size() != 2 || shape[0] < 1 || shape[1] < 1 ||
        static_cast<int64_t>(flat.size()) != checked_product(shape[0], shape[1]))
      return reply(error_reply(422, "validation",
                               "input_ids needs shape [batch, length] matching its data (" +
                                   std::to_string(flat.size()) + " values)"));
    if (shape[0] > cfg_.max_client_batch_size)
      return reply(error_reply(422, "validation",
                               "batch size " + std::to_string(shape[0]) +
                                   " > maximum allowed batch size " +
                                   std::to_string(cfg_.max_client_batch_size)));
    std::vector<const json*> tflat, mflat;
    if (types) flatten((*types)["data"], tflat);
    if (mask) flatten((*mask)["data"], mflat);
    if ((types && tflat.size() != flat.size()) || (mask && mflat.size() != flat.size()))
      return reply(error_reply(422, "validation",
                               "token_type_ids and attention_mask need the shape of input_ids"));
    for (int64_t i = 0; i < shape[0]; ++i) {
      host::sequence_input s;
      for (int64_t j = 0; j < shape[1]; ++j) {
        size_t k = static_cast<size_t>(i * shape[1] + j);
        if (!flat[k]->is_number_integer() || (types && !tflat[k]->is_number_integer()) ||
            (mask && !mflat[k]->is_number_integer()))
          return reply(error_reply(422, "validation", "token inputs must hold integers"));
        if (mask && mflat[k]->get<int64_t>() == 0) continue;
        int64_t id = flat[k]->get<int64_t>();
        if (id < 0 || id > INT32_MAX || (info_.vocab_size > 0 && id >= info_.vocab_size))
          return reply(error_reply(422, "validation", "token id " + std::to_string(id) +
                                                          " out of range"));
        s.token_ids.push_back(static_cast<int32_t>(id));
        int64_t type = types ? tflat[k]->get<int64_t>() : 0;
        if (type < 0 || type > 1)
          return reply(error_reply(422, "validation", "token type id " + std::to_string(type) +
                                                          " out of range (0 or 1)"));
        s.token_type_ids.push_back(static_cast<int32_t>(type));
      }
      if (s.token_ids.empty())
        return reply(error_reply(400, "empty", "sequence " + std::to_string(i) + " has no tokens"));
      if (truncate) truncate_sequence(s, max_len, tokenizer_->sep_id());
      seqs.push_back(std::move(s));
    }
  }
  for (const auto& s : seqs)
    if (static_cast<int32_t>(s.token_ids.size()) > max_len)
      return reply(error_reply(
          422, "validation",
          "input validation error: inputs must have at most " + std::to_string(max_len) +
              " tokens. Given: " + std::to_string(s.token_ids.size()) +
              "; set parameters.truncate to true to cut it"));
  if (!router_.healthy()) return reply(error_reply(503, "unhealthy", "no healthy backend"));

  std::string model = std::string(name);
  json id = req.contains("id") ? req["id"] : json();
  auto call = std::make_shared<call_state>();
  call->outcomes.resize(seqs.size());
  call->remaining.store(seqs.size());
  call->reply = reply;
  call->svc = this;
  call->start = start;
  call->build = [model, id](std::vector<sequence_outcome>& outs) {
    size_t labels = outs.empty() ? 0 : outs[0].logits.size();
    std::vector<float> data;
    for (auto& o : outs) data.insert(data.end(), o.logits.begin(), o.logits.end());
    json out{{"model_name", model},
             {"model_version", "1"},
             {"outputs", json::array({json{{"name", "logits"},
                                           {"datatype", "FP32"},
                                           {"shape", {outs.size(), labels}},
                                           {"data", data}}})}};
    if (!id.is_null()) out["id"] = id;
    return http_reply{200, "application/json", to_text(out)};
  };
  submit_all(call, std::move(seqs));
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
  int32_t labels = router_.num_labels();
  json id2label = json::object(), label2id = json::object();
  for (int32_t i = 0; i < labels; ++i) {
    id2label[std::to_string(i)] = label(i);
    label2id[label(i)] = i;
  }
  json backends = json::array();
  int64_t max_tokens = 0, max_requests = 0, max_queued = 0;
  for (size_t i = 0; i < router_.num_backends(); ++i) {
    auto& b = router_.backend_batcher(i);
    auto bi = b.backend().info();
    max_tokens = std::max<int64_t>(max_tokens, b.config().token_budget);
    max_requests = std::max<int64_t>(max_requests, b.config().max_batch_size);
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
  json out{{"previous_instance", previous},
           {"model_id", info_.model_id},
           {"model_sha", nullptr},
           {"model_dtype", "float32"},
           {"model_type", {{"classifier", {{"id2label", id2label}, {"label2id", label2id}}}}},
           {"max_concurrent_requests", max_queued},
           {"max_input_length", info_.max_input_length},
           {"max_batch_tokens", max_tokens},
           {"max_batch_requests", max_requests},
           {"max_client_batch_size", cfg_.max_client_batch_size},
           {"payload_limit", cfg_.max_body_bytes},
           {"auto_truncate", cfg_.auto_truncate},
           {"routing", router_.config().strategy == routing_strategy::hybrid_length
                           ? "hybrid"
                           : "least-outstanding"},
           {"backends", backends},
           {"version", "0.1.0"}};
  return {200, "application/json", to_text(out)};
}

http_reply service::kserve_model_reply() const {
  json out{{"name", info_.model_id},
           {"versions", {"1"}},
           {"platform", "tessera"},
           {"inputs",
            json::array({json{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {-1}}},
                         json{{"name", "input_ids"}, {"datatype", "INT64"}, {"shape", {-1, -1}}},
                         json{{"name", "token_type_ids"}, {"datatype", "INT64"}, {"shape", {-1, -1}}},
                         json{{"name", "attention_mask"}, {"datatype", "INT64"}, {"shape", {-1, -1}}}})},
           {"outputs", json::array({json{{"name", "logits"},
                                         {"datatype", "FP32"},
                                         {"shape", {-1, router_.num_labels()}}}})}};
  return {200, "application/json", to_text(out)};
}

}  // namespace tessera::serving
