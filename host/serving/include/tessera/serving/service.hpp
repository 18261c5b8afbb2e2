// tessera/serving/service.hpp: the HTTP API without the sockets: routes, JSON in and out,
// validation, tokenization, submission to the router, error mapping. http_server.hpp puts it on
// a socket; tests may call it directly.
//
// Routes (Hugging Face text-embeddings-inference where they overlap, and KServe v2):
//   POST /predict   {"inputs": "text" | ["a", "b"] (two inputs) | [["q", "p"]] (a pair),
//                    "truncate": bool, "raw_scores": bool}
//                   -> [{"label","score"}] sorted by score (softmax, or raw logits), a list per
//                      input when "inputs" is a list
//   POST /tokenize  {"inputs": same forms} -> [[ids...], ...] (one list per input)
//   GET  /info, /health, /metrics (Prometheus text)
//   GET  /v2/health/ready, /v2/health/live, /v2/models/{name}, /v2/models/{name}/ready
//   POST /v2/models/{name}/infer  (BYTES "text" input, shape [N] or [N,2] for pairs; or INT32/INT64
//                                  "input_ids" [N,L] with optional token_type_ids/attention_mask)
// Errors: {"error": "...", "error_type": "..."}: 400 empty / malformed JSON, 401 missing or wrong
// API key (http_server, before the service sees the request), 404 unknown route or
// model, 405 wrong method, 413 body too large (http_server), 422 validation / too long without
// truncation / too many inputs / tokenizer, 429 overloaded, 503 unhealthy, 504 timeout,
// 500 backend.
//
//   service svc(service_config{}, router, make_toy_tokenizer(), model_info{.model_id = "toy"}, m);
//   svc.handle("POST", "/predict", R"({"inputs":"hi"})", [](http_reply r) { send(r); });
#pragma once

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/serving/clock.hpp"
#include "tessera/serving/journal.hpp"
#include "tessera/serving/metrics.hpp"
#include "tessera/serving/router.hpp"
#include "tessera/serving/tokenizer.hpp"

namespace tessera::serving {

/// What /info and /v2/models/{name} say about the model.
struct model_info {
  std::string model_id = "bert";        ///< also the KServe model name
  std::vector<std::string> labels;      ///< id2label; LABEL_i when shorter than num_labels
  int32_t max_input_length = 512;       ///< tokens, specials included
  int32_t vocab_size = 0;               ///< token ids given over KServe must be below it (0 = unchecked)
};

struct service_config {
  int32_t max_client_batch_size = 32;   ///< inputs per request; more -> 422
  duration request_timeout = std::chrono::seconds(30);  ///< per-sequence deadline; 0 = none
  /// A request its backend has not answered this long after its deadline (a stalled backend)
  /// is answered 504; the late answer is dropped.
  duration answer_grace = std::chrono::seconds(1);
  bool auto_truncate = false;           ///< truncate when the request does not say
  size_t max_body_bytes = 2 << 20;      ///< reported in /info; enforced by http_server
};

struct call_state;  // one request's fan-in of sequence answers (service.cpp)

struct http_reply {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string allow;  ///< the Allow header of a 405
  std::string www_authenticate;  ///< the WWW-Authenticate header of a 401
};

using reply_fn = std::function<void(http_reply)>;

class service {
 public:
  service(service_config cfg, router& r, std::shared_ptr<const tokenizer> tok, model_info info,
          serving_metrics& metrics);
  ~service();
  service(const service&) = delete;
  service& operator=(const service&) = delete;

  /// Handles one request. `reply` is called exactly once, on this thread or a backend's. Throws
  /// nothing a route throws: such a request is answered 500 {"error_type": "internal"} and logged.
  void handle(std::string_view method, std::string_view target, std::string_view body,
              reply_fn reply);

  /// {"error": message, "error_type": type} with `status`; counts the failure in the metrics.
  http_reply error_reply(unsigned status, std::string_view type, std::string_view message);

  const service_config& config() const { return cfg_; }
  /// Reports the previous host process of this journal in /info (not owned; may be null).
  void set_journal(const request_journal* j) { journal_ = j; }
  serving_metrics& metrics() { return metrics_; }

 private:
  friend struct call_state;
  void route(std::string_view method, std::string_view target, std::string_view body,
             const reply_fn& reply);
  void submit_all(std::shared_ptr<call_state> call, std::vector<host::sequence_input> seqs);
  void predict(std::string_view body, bool tokenize_only, const reply_fn& reply);
  void kserve_infer(std::string_view name, std::string_view body, const reply_fn& reply);
  /// "; <backend> replica <i> <state>: <why>" for every replica not up ("" when all are).
  std::string degraded_detail() const;
  http_reply info_reply() const;
  http_reply kserve_model_reply() const;
  std::string label(int32_t i) const;
  void watch(const std::shared_ptr<call_state>& call, time_point answer_by);
  void unwatch(call_state& call);
  void run_watchdog();

  service_config cfg_;
  router& router_;
  std::shared_ptr<const tokenizer> tokenizer_;
  model_info info_;
  serving_metrics& metrics_;
  const request_journal* journal_ = nullptr;

  // Stalled-backend watchdog: requests by the time they must be answered.
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::multimap<time_point, std::weak_ptr<call_state>> watched_;
  bool watch_stop_ = false;
  std::thread watchdog_;
};

}  // namespace tessera::serving
