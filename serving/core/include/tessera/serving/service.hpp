// tessera/serving/service.hpp: the HTTP API without the sockets: routes, JSON in and out,
// validation, tokenization, submission to the router, error mapping. http_server.hpp puts it on
// a socket; tests may call it directly. docs/serving.md lists every route, field and error, and
// where tessera differs from text-embeddings-inference (TEI) or KServe on purpose.
//
// APIs (one class and source file each, registered in core/src/api_registry.cpp; api.hpp says how
// to add one):
//   TEI (encoder/src/tei_api.cpp), as TEI v1.7.1 for a sequence-classification model:
//     POST /predict, /invocations  {"inputs": "text" | ["text", "text_pair"] (one pair)
//                                   | [["text"], ["text", "text_pair"], ...] (a batch),
//                                   "truncate": bool|null, "truncation_direction": "Left"|"Right",
//                                   "raw_scores": bool}
//                                  -> [{"score","label"}] sorted by score (softmax; sigmoid for one
//                                     label; raw logits with raw_scores), a list per batch input
//     POST /          the same, but a single input answers [[{"score","label"}]] (Hugging Face's
//                     clients), and "parameters": {"top_k", "function_to_apply"} are honoured
//     POST /tokenize  {"inputs": "text" | ["text", ...], "add_special_tokens": bool}
//                     -> [[{"id","text","special","start","stop"}]] (byte offsets)
//     GET /info, /health, / and /ping (health), /metrics (Prometheus text)
//   Embedding models (encoder/src/embed_api.cpp): POST /embed, /embed_all, /embed_sparse (refused),
//     /similarity, /v1/embeddings (OpenAI's, as TEI serves it); docs/serving.md has the fields.
//   KServe v2 / Open Inference Protocol (encoder/src/kserve_api.cpp): GET /v2, /v2/health/{live,ready},
//     /v2/models/{name}[/versions/1][/ready]; POST /v2/models/{name}[/versions/1]/infer in JSON
//     or with the binary tensor data extension (Inference-Header-Content-Length).
// Errors: {"error": "...", "error_type": "..."} with TEI's codes and spellings where TEI has them
// (413 Validation, 422 Tokenizer, 424 Backend, 429 Overloaded, 503 Unhealthy), else 400
// bad_request, 401 (http_server), 404 not_found, 405 method_not_allowed, 422 Validation (a
// request that does not have the documented shape), 504 timeout.
//
//   service svc(service_config{}, router, tokenizer, model_info{.model_id = "bert"}, m);
//   svc.handle("POST", "/predict", R"({"inputs":"hi"})", [](http_reply r) { send(r); });
#pragma once

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/serving/chat_template.hpp"
#include "tessera/serving/clock.hpp"
#include "tessera/serving/journal.hpp"
#include "tessera/serving/llm_engine.hpp"
#include "tessera/serving/metrics.hpp"
#include "tessera/serving/reply_stream.hpp"
#include "tessera/serving/router.hpp"
#include "tessera/serving/tokenizer.hpp"

namespace tessera::serving {

/// What /info and /v2/models/{name} say about the model.
struct model_info {
  std::string model_id = "bert";        ///< also the KServe model name
  std::vector<std::string> labels;      ///< id2label; LABEL_i when shorter than num_labels
  int32_t max_input_length = 512;       ///< tokens, specials included
  int32_t vocab_size = 0;               ///< token ids given over KServe must be below it (0 = unchecked)
  std::string dtype = "float32";        ///< TEI's model_dtype: "float32", "bfloat16" or "int8"
  /// What the encoder is for (models::encoder_task): "classifier", "embedding" or "reranker";
  /// the routes that do not fit it answer TEI's 424 (embed_api.cpp, tei_api.cpp).
  std::string task = "classifier";
  std::string pooling;                  ///< an embedding model's pooling ("mean", "cls", ...)
  int32_t hidden_size = 0;              ///< an embedding model's vector width
  bool normalize = false;               ///< an embedding model's folder has a Normalize module
  std::map<std::string, std::string> prompts;  ///< sentence-transformers prompts by name
  std::string default_prompt_name;      ///< applied when a request names none ("" = none)
};

struct service_config {
  int32_t max_client_batch_size = 32;   ///< inputs per request; more -> 422
  duration request_timeout = std::chrono::seconds(30);  ///< per-sequence deadline; 0 = none
  /// A request its backend has not answered this long after its deadline (a stalled backend)
  /// is answered 504; the late answer is dropped.
  duration answer_grace = std::chrono::seconds(1);
  bool auto_truncate = false;           ///< truncate when the request does not say
  size_t max_body_bytes = 2 << 20;      ///< reported in /info; enforced by http_server
  int32_t tokenization_workers = 1;     ///< threads that tokenize (http_server: its I/O threads)
};

struct call_state;  // one request's fan-in of sequence answers (api.hpp)
class api;
class route_table;
namespace detail {
struct api_error;  // an error answer (api.hpp)
}

/// A decoder behind the OpenAI-compatible routes (llm/src/openai_api.cpp).
struct llm_api {
  llm_endpoint* engine = nullptr;  ///< an engine or an llm_router; not owned; outlives the service's requests
  std::shared_ptr<const llm_tokenizer> tokenizer;
  std::string model_id;
  chat_format chat = chat_format::plain;
  int64_t created_unix = 0;  ///< /v1/models "created"
};

struct http_reply {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string allow;  ///< the Allow header of a 405
  std::string www_authenticate;  ///< the WWW-Authenticate header of a 401
  /// More response headers (TEI's x-*-time, KServe's Inference-Header-Content-Length).
  std::vector<std::pair<std::string, std::string>> headers;
  /// Set: a streamed answer; `body` is ignored and the stream's chunks follow the headers.
  std::shared_ptr<reply_stream> stream;
};

/// The request headers the API reads.
struct request_headers {
  /// KServe binary tensor data extension: the length of the JSON part of the body ("" = none).
  std::string_view inference_header_content_length;
  /// Set by http_server: registers what to do if the client disconnects before its answer is
  /// complete (the server then watches the connection). Empty without a socket.
  std::function<void(std::function<void()>)> on_disconnect;
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
              reply_fn reply, request_headers headers = {});

  /// {"error": message, "error_type": type} with `status`, for a request that is not an
  /// inference request (counted in tessera_http_errors; inference failures count apart).
  http_reply error_reply(unsigned status, std::string_view type, std::string_view message);

  const service_config& config() const { return cfg_; }
  /// Reports the previous host process of this journal in /info (not owned; may be null).
  void set_journal(const request_journal* j) { journal_ = j; }
  serving_metrics& metrics() { return metrics_; }
  /// Serves a decoder on /v1/completions, /v1/chat/completions and /v1/models (and health
  /// follows the engine). Call before the first request.
  void set_llm(llm_api api) { llm_ = std::move(api); }

 // What the APIs (api.hpp) use: the parts, and the checks every API runs on what it read,
  // worded once.
  router& backends() const { return router_; }
  /// The encoder's tokenizer; null when the service serves a decoder only (the OpenAI routes).
  const std::shared_ptr<const tokenizer>& encoder_tokenizer() const { return tokenizer_; }
  /// An error for an encoder route (TEI, KServe) when no encoder model is served, else nothing.
  std::optional<detail::api_error> need_encoder() const;
  const model_info& info() const { return info_; }
  const llm_api& llm() const { return llm_; }
  const route_table& routes() const { return *routes_; }
  /// 405 for `method` on `path`, with the Allow header.
  http_reply wrong_method_reply(std::string_view method, std::string_view path, std::string_view allow);
  /// error_reply for an inference request: counted in tessera_request_failure.
  http_reply inference_error(unsigned status, std::string_view type, std::string_view message);
  static http_reply error_body(unsigned status, std::string_view type, std::string_view message);
  /// Submits a request's sequences; the deadline watchdog answers 504 for a stalled backend.
  void submit_all(std::shared_ptr<call_state> call, std::vector<backends::sequence_input> seqs);
  /// 413 Validation when a request holds more inputs than max_client_batch_size.
  std::optional<detail::api_error> check_batch_size(size_t inputs) const;
  /// Tokenizes a text (or a pair, `b` non-null), cut to max_input_length when `truncate`;
  /// a tokenizer failure is `tokenizer_status` Tokenizer (TEI answers 422, KServe 400).
  std::optional<detail::api_error> encode_text(std::string_view a, const std::string_view* b, bool truncate,
                                               truncation_side side, unsigned tokenizer_status,
                                               backends::sequence_input& out) const;
  /// 413 Validation when a sequence is longer than max_input_length; `field` and
  /// `how_to_truncate` are the dialect's words ("`inputs`", "pass \"truncate\": true").
  std::optional<detail::api_error> check_length(size_t tokens, std::string_view field,
                                                std::string_view how_to_truncate) const;
  /// 503 Unhealthy when no backend can take a request.
  std::optional<detail::api_error> check_healthy() const;
  /// "; <backend> replica <i> <state>: <why>" for every replica not up ("" when all are).
  std::string degraded_detail() const;
  /// id2label[i], or LABEL_i.
  std::string label(int32_t i) const;

 private:
  friend struct call_state;

  void route(std::string_view method, std::string_view target, std::string_view body,
             const request_headers& headers, const reply_fn& reply);
  /// The server's own routes: health, /info, /metrics.
  void add_own_routes(route_table& t);
  http_reply info_reply() const;
  void watch(const std::shared_ptr<call_state>& call, time_point answer_by);
  void unwatch(call_state& call);
  void run_watchdog();

  service_config cfg_;
  router& router_;
  std::shared_ptr<const tokenizer> tokenizer_;
  model_info info_;
  serving_metrics& metrics_;
  const request_journal* journal_ = nullptr;
  llm_api llm_;
  std::unique_ptr<route_table> routes_;
  std::vector<std::unique_ptr<api>> apis_;

  // Stalled-backend watchdog: requests by the time they must be answered.
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::multimap<time_point, std::weak_ptr<call_state>> watched_;
  bool watch_stop_ = false;
  std::thread watchdog_;
};

}  // namespace tessera::serving
