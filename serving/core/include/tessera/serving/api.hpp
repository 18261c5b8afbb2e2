// tessera/serving/api.hpp: what an HTTP API of the service is made of. Every API (TEI, KServe v2,
// OpenAI, the next one) is a class deriving from `api` in its own file, registered with one line
// in serving/core/src/api_registry.cpp; at construction the service asks each to add its routes
// to the route table, and dispatches every request through it:
//
//   class my_api final : public api {
//    public:
//     explicit my_api(service& svc) : svc_(svc) {}
//     void add_routes(route_table& t) override {
//       t.add("POST", "/classify", [this](const route_call& c) { classify(c); });
//       t.add_prefix("/my/v1", [this](const route_call& c) { sub_route(c); });  // its own 404/405
//     }
//    ...
//   };
//   // api_registry.cpp:  std::unique_ptr<api> make_my_api(service&);  and one entry in the list
//
// Exact routes are matched first (a path registered for other methods only answers 405 with the
// Allow header), then the longest prefix; nothing matched answers 404. Besides the table, this
// header holds what the APIs share: the body checks before JSON parsing, error kinds as each
// dialect spells them, and the per-request fan-in of sequence answers (`call_state`); the checks
// on what a dialect read are service members (check_batch_size, encode_text, check_length,
// check_healthy, submit_all).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/serving/service.hpp"

namespace tessera::serving {

/// One request as a route sees it.
struct route_call {
  std::string_view method;
  std::string_view path;    ///< the target without its query
  std::string_view target;  ///< as sent
  std::string_view body;
  const request_headers& headers;
  const reply_fn& reply;
};

using route_handler = std::function<void(const route_call&)>;

class route_table {
 public:
  /// `method` on the exact `path`. Registering a (method, path) twice is a programming error
  /// (std::logic_error at start-up, naming both).
  void add(std::string_view method, std::string path, route_handler h);
  /// Every path equal to `prefix` or below it (`prefix/...`), any method: the handler does its
  /// own sub-routing, 404s and 405s (an API whose errors have their own shape, as OpenAI's).
  void add_prefix(std::string prefix, route_handler h);

  enum class outcome { handled, wrong_method, no_route };
  /// Calls the matching handler. wrong_method: `allow` is set to the path's methods ("GET, POST").
  outcome dispatch(const route_call& call, std::string& allow) const;
  /// Every exact path and prefix, sorted (for docs and tests).
  std::vector<std::string> paths() const;

 private:
  std::map<std::string, std::map<std::string, route_handler, std::less<>>, std::less<>> exact_;
  std::vector<std::pair<std::string, route_handler>> prefixes_;  // longest first
};

/// An HTTP API served by `service`.
class api {
 public:
  virtual ~api() = default;
  virtual void add_routes(route_table& table) = 0;
};

/// What an API on the encoder backends reads of its service, as references (they follow the
/// service). TEI and KServe derive from it.
struct encoder_parts {
  explicit encoder_parts(service& svc)
      : svc_(svc), cfg_(svc.config()), router_(svc.backends()), tokenizer_(svc.encoder_tokenizer()),
        info_(svc.info()), metrics_(svc.metrics()) {}
  service& svc_;
  const service_config& cfg_;
  router& router_;
  const std::shared_ptr<const tokenizer>& tokenizer_;
  const model_info& info_;
  serving_metrics& metrics_;
};

/// Every API the service serves, in registration order (api_registry.cpp).
std::vector<std::unique_ptr<api>> make_apis(service& svc);

}  // namespace tessera::serving

namespace tessera::serving::detail {

using json = nlohmann::json;

/// error_type values. The first six are text-embeddings-inference's, spelled as its ErrorType
/// serialises (capitalised); the rest are tessera's own, for errors TEI has no kind for.
namespace error_kind {
inline constexpr std::string_view unhealthy = "Unhealthy";    // 503
inline constexpr std::string_view backend = "Backend";        // 424
inline constexpr std::string_view overloaded = "Overloaded";  // 429
inline constexpr std::string_view validation = "Validation";  // 413 (TEI), 422 (request shape)
inline constexpr std::string_view tokenizer = "Tokenizer";    // 422
inline constexpr std::string_view empty = "Empty";            // 400 (TEI: /rerank without texts)
inline constexpr std::string_view bad_request = "bad_request";  // 400: not JSON / not UTF-8
inline constexpr std::string_view not_found = "not_found";
inline constexpr std::string_view method_not_allowed = "method_not_allowed";
inline constexpr std::string_view timeout = "timeout";        // 504
inline constexpr std::string_view internal = "internal";      // 500: a bug, logged
}  // namespace error_kind

struct api_error {
  unsigned status;
  std::string type;
  std::string message;
};

/// How a failed sequence shows over HTTP (TEI's codes: a failed batch is the backend's failure,
/// 424; shutting down is 503; a full queue 429).
api_error map_status(const status& st);

/// JSON text that cannot throw on a bad string: every body that may hold client text (error
/// messages quoting it, a KServe "id") goes out through here. Invalid bytes become U+FFFD.
std::string to_text(const json& j);

/// The checks every JSON body gets (UTF-8, no raw NUL, nesting depth), then the parse. The
/// error, if any, as an api_error (400 bad_request).
std::optional<api_error> parse_body(std::string_view body, json& out);

/// a * b, or -1 when it overflows int64 (both >= 0).
int64_t checked_product(int64_t a, int64_t b);

/// Unicode characters in UTF-8 text (TEI's x-compute-characters counts these).
size_t count_chars(std::string_view utf8);

/// "a string", "a number", ... for error messages about a JSON value's type.
std::string_view json_kind(const json& j);

}  // namespace tessera::serving::detail

namespace tessera::serving {

/// Per-request fan-in: one slot per sequence; the last answer sends the reply.
struct call_state {
  std::vector<sequence_outcome> outcomes;
  std::atomic<size_t> remaining{0};
  reply_fn reply;
  std::function<http_reply(std::vector<sequence_outcome>&)> build;
  /// Called with the status of an error answer (a failed sequence, the watchdog's 504, a
  /// non-200 from build), before it is sent; may be empty.
  std::function<void(unsigned status)> on_error;
  service* svc = nullptr;
  time_point start;
  std::atomic<bool> replied{false};
  bool watched = false;  // under the service's watch_mu_
  std::multimap<time_point, std::weak_ptr<call_state>>::iterator watch_entry;

  /// The fan-in of one request's `n` sequences, answered through `reply`.
  static std::shared_ptr<call_state> make(size_t n, reply_fn reply, service* svc, time_point start) {
    auto c = std::make_shared<call_state>();
    c->outcomes.resize(n);
    c->remaining.store(n);
    c->reply = std::move(reply);
    c->svc = svc;
    c->start = start;
    return c;
  }
  /// True for the one caller allowed to reply.
  bool claim_reply() { return !replied.exchange(true, std::memory_order_acq_rel); }
  void complete(size_t i, sequence_outcome o);
  void fail(http_reply r) {
    if (on_error) on_error(r.status);
    reply(std::move(r));
  }
};

}  // namespace tessera::serving
