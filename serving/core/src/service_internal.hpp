// What the API dialects of service (service_tei.cpp: text-embeddings-inference and Hugging
// Face's clients; service_kserve.cpp: KServe v2 / Open Inference Protocol) share: the body
// checks before JSON parsing, error kinds as each dialect spells them, and the per-request
// fan-in of sequence answers (the checks on what a dialect read are service members:
// check_batch_size, encode_text, check_length, check_healthy). Private to tessera_serving_core.
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
