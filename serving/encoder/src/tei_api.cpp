// The text-embeddings-inference dialect: /predict, /invocations, / (Hugging Face's clients),
// /rerank (a one-label model) and /tokenize, following TEI v1.7.1 (router/src/http/types.rs, server.rs; core/src/tokenization.rs,
// infer.rs). docs/serving.md lists where tessera differs and why.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "encoder_job.hpp"
#include "tessera/serving/api.hpp"
#include "tessera/serving/utf8.hpp"

namespace tessera::serving {

using namespace detail;

namespace {

/// What a score becomes: TEI's rule (softmax over several labels, sigmoid over one), either
/// function forced (Hugging Face's parameters.function_to_apply), or the raw logit.
enum class score_function { tei, softmax, sigmoid, none };

struct predict_request {
  std::vector<tei_input> inputs;
  bool batch = false;  ///< "inputs" was a batch: the answer is a list per input
  bool truncate = false;
  truncation_side side = truncation_side::right;
  score_function function = score_function::tei;
  int64_t top_k = 0;  ///< keep this many labels (0 = all)
};

constexpr std::string_view inputs_forms =
    "a string, a pair of strings [\"text\", \"text_pair\"], or a batch of single texts and pairs "
    "[[\"text\"], [\"text\", \"text_pair\"], ...]";

/// TEI's reading of "inputs": a string is one input; a list whose first element is a string is
/// ONE input, a single text (one element) or a pair (two); a list whose first element is a list
/// is a batch, each element a list of one text or two. Anything else is refused, as TEI does.
std::optional<std::string> read_inputs(const json& in, predict_request& out) {
  auto describe = [](const json& j) { return std::string(json_kind(j)); };
  if (in.is_string()) {
    out.inputs.push_back({in.get<std::string>(), "", false});
    return std::nullopt;
  }
  if (!in.is_array()) return "\"inputs\" must be " + std::string(inputs_forms) + "; got " + describe(in);
  if (in.empty()) return "\"inputs\" is an empty list; it must be " + std::string(inputs_forms);
  if (in[0].is_string()) {
    if (in.size() > 2)
      return "\"inputs\" is a list of " + std::to_string(in.size()) +
             " strings: a list of strings is one input, a text or a [text, text_pair] pair; send a "
             "batch as [[\"text\"], [\"text\"], ...]";
    for (size_t i = 1; i < in.size(); ++i)
      if (!in[i].is_string())
        return "\"inputs\"[" + std::to_string(i) + "] is " + describe(in[i]) +
               ": a list starting with a string is one input, all its elements strings";
    tei_input x{in[0].get<std::string>(), "", in.size() == 2};
    if (x.pair) x.b = in[1].get<std::string>();
    out.inputs.push_back(std::move(x));
    return std::nullopt;
  }
  if (!in[0].is_array()) return "\"inputs\"[0] is " + describe(in[0]) + "; \"inputs\" must be " + std::string(inputs_forms);
  out.batch = true;
  for (size_t i = 0; i < in.size(); ++i) {
    const json& e = in[i];
    const std::string where = "\"inputs\"[" + std::to_string(i) + "]";
    if (!e.is_array())
      return where + " is " + describe(e) + ": in a batch every input is a list, [\"text\"] or [\"text\", \"text_pair\"]";
    if (e.empty() || e.size() > 2)
      return where + " has " + std::to_string(e.size()) + " elements; an input is [\"text\"] or [\"text\", \"text_pair\"]";
    for (const auto& t : e)
      if (!t.is_string()) return where + " holds " + describe(t) + "; an input holds strings only";
    tei_input x{e[0].get<std::string>(), "", e.size() == 2};
    if (x.pair) x.b = e[1].get<std::string>();
    out.inputs.push_back(std::move(x));
  }
  return std::nullopt;
}

/// The fields of a predict request, as TEI's PredictRequest deserialises them (and Hugging Face's
/// "parameters" on POST /). An unknown field is refused: TEI ignores it, but a field tessera does
/// not act on must not look accepted.
std::optional<std::string> read_predict(const json& req, bool hugging_face, bool auto_truncate,
                                        predict_request& out) {
  if (!req.is_object())
    return "the body must be a JSON object {\"inputs\": ...}; got " + std::string(json_kind(req));
  static const std::set<std::string, std::less<>> tei_fields = {"inputs", "truncate",
                                                                "truncation_direction", "raw_scores"};
  for (const auto& [key, value] : req.items())
    if (!tei_fields.count(key) && !(hugging_face && key == "parameters"))
      return "unknown field \"" + printable(key, 60) + "\"; a predict request takes \"inputs\", "
             "\"truncate\", \"truncation_direction\", \"raw_scores\"" +
             std::string(hugging_face ? ", \"parameters\"" : "");
  if (!req.contains("inputs")) return "missing field \"inputs\"";
  if (auto err = read_inputs(req["inputs"], out)) return err;
  out.truncate = auto_truncate;
  if (const auto it = req.find("truncate"); it != req.end() && !it->is_null()) {
    if (!it->is_boolean()) return "\"truncate\" must be true, false or null; got " + std::string(json_kind(*it));
    out.truncate = it->get<bool>();
  }
  if (const auto it = req.find("truncation_direction"); it != req.end()) {
    if (*it == "Right") out.side = truncation_side::right;
    else if (*it == "Left") out.side = truncation_side::left;
    else return "\"truncation_direction\" must be \"Left\" or \"Right\" (TEI's spelling)";
  }
  bool raw_scores = false;
  if (const auto it = req.find("raw_scores"); it != req.end()) {
    if (!it->is_boolean()) return "\"raw_scores\" must be true or false; got " + std::string(json_kind(*it));
    raw_scores = it->get<bool>();
  }
  out.function = raw_scores ? score_function::none : score_function::tei;
  if (const auto it = req.find("parameters"); it != req.end() && !it->is_null()) {
    if (!it->is_object()) return "\"parameters\" must be an object; got " + std::string(json_kind(*it));
    for (const auto& [key, value] : it->items()) {
      if (value.is_null()) continue;
      if (key == "top_k") {
        if (!value.is_number_integer() || value.get<int64_t>() < 1)
          return "parameters.top_k must be an integer >= 1";
        out.top_k = value.get<int64_t>();
      } else if (key == "function_to_apply") {
        if (raw_scores) return "give \"raw_scores\" or parameters.function_to_apply, not both";
        if (value == "softmax") out.function = score_function::softmax;
        else if (value == "sigmoid") out.function = score_function::sigmoid;
        else if (value == "none") out.function = score_function::none;
        else return "parameters.function_to_apply must be \"softmax\", \"sigmoid\" or \"none\"";
      } else {
        return "unknown parameter \"" + printable(key, 60) +
               "\"; text classification takes parameters top_k and function_to_apply";
      }
    }
  }
  return std::nullopt;
}

std::vector<float> apply(score_function f, std::vector<float> x) {
  if (f == score_function::tei) f = x.size() > 1 ? score_function::softmax : score_function::sigmoid;
  if (f == score_function::softmax && !x.empty()) {
    const float m = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (auto& v : x) sum += (v = std::exp(v - m));
    for (auto& v : x) v = static_cast<float>(v / sum);
  } else if (f == score_function::sigmoid) {
    for (auto& v : x) v = 1.0f / (1.0f + std::exp(-v));
  }
  return x;
}

/// The (code point) length TEI caps untruncated inputs at: max_input_length * 250 characters.
constexpr int64_t max_chars_per_token = 250;

std::string millis(double seconds) { return std::to_string(static_cast<int64_t>(seconds * 1e3)); }

}  // namespace

/// TEI's routes (and Hugging Face's POST /), on the service's encoder backends.
class tei_api final : public api, private encoder_parts {
 public:
  explicit tei_api(service& svc) : encoder_parts(svc) {}
  void add_routes(route_table& t) override;

 private:
  /// Which TEI predict route: /predict (always predicts), POST / (Hugging Face's answer shape),
  /// /invocations (TEI's default route: predicts, or reranks for a one-label model).
  enum class predict_dialect { tei, hugging_face, tei_default };

  /// Counts the request and reads its JSON body; with no encoder or a bad body, answers the error
  /// and gives nothing.
  std::optional<json> open_request(std::string_view body, const reply_fn& reply) {
    metrics_.request_count.fetch_add(1, std::memory_order_relaxed);
    std::optional<detail::api_error> e = svc_.need_encoder();
    json req;
    if (!e) e = parse_body(body, req);
    if (e) {
      reply(svc_.inference_error(e->status, e->type, e->message));
      return std::nullopt;
    }
    return req;
  }
  void tei_predict(std::string_view body, predict_dialect dialect, const reply_fn& reply);
  void tei_tokenize(std::string_view body, const reply_fn& reply);
  void tei_rerank(const json& req, time_point start, const reply_fn& reply);
  void tei_infer(tei_job job, const reply_fn& reply) { encoder_infer(*this, std::move(job), reply); }
};

void tei_api::tei_predict(std::string_view body, predict_dialect dialect, const reply_fn& reply) {
  const time_point start = steady::now();
  auto fail = [&](unsigned status, std::string_view type, std::string_view message) {
    reply(svc_.inference_error(status, type, message));
  };
  auto opened = open_request(body, reply);
  if (!opened) return;
  json& req = *opened;
  // An embedding model: POST / and /invocations embed (or, on POST /, Hugging Face's
  // sentence-similarity shape), as TEI's default route does; /predict is TEI's 424.
  if (info_.task == "embedding") {
    if (dialect != predict_dialect::tei) return embed_default_route(svc_, body, start, reply);
    metrics_.tei.request_failure.add("model_type");
    return fail(424, error_kind::backend, "Model is not a classifier model");
  }
  // A one-label model is TEI's re-ranker: POST / and /invocations rerank there, as in TEI. On
  // POST / a body with "inputs" (Hugging Face's clients) still predicts: the fields differ.
  const bool reranker = router_.num_labels() == 1;
  if (reranker && (dialect == predict_dialect::tei_default ||
                   (dialect == predict_dialect::hugging_face && req.is_object() && !req.contains("inputs"))))
    return tei_rerank(req, start, reply);
  predict_request p;
  if (auto err = read_predict(req, dialect == predict_dialect::hugging_face, cfg_.auto_truncate, p))
    return fail(422, error_kind::validation, *err);
  tei_job job;
  job.batch = p.batch;
  job.truncate = p.truncate;
  job.side = p.side;
  job.start = start;
  job.inputs = std::move(p.inputs);
  const bool nest_single = dialect == predict_dialect::hugging_face;
  job.answer = [this, batch = p.batch, function = p.function, top_k = p.top_k, nest_single](
                   std::vector<sequence_outcome>& outs, json& body, size_t) -> std::optional<api_error> {
    json all = json::array();
    for (auto& o : outs) {
      std::vector<float> scores = apply(function, o.logits);
      for (float s : scores)
        if (std::isnan(s)) return api_error{424, std::string(error_kind::backend), "score is NaN"};
      // TEI sorts ascending and reverses: ties list the later label first.
      std::vector<int32_t> order(scores.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
      std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return scores[x] < scores[y]; });
      std::reverse(order.begin(), order.end());
      if (top_k > 0 && static_cast<size_t>(top_k) < order.size()) order.resize(static_cast<size_t>(top_k));
      json one = json::array();
      for (int32_t i : order) one.push_back({{"score", scores[i]}, {"label", svc_.label(i)}});
      all.push_back(std::move(one));
    }
    body = batch || nest_single ? std::move(all) : std::move(all[0]);
    return std::nullopt;
  };
  tei_infer(std::move(job), reply);
}

void tei_api::tei_rerank(const json& req, time_point start, const reply_fn& reply) {
  auto fail = [&](unsigned status, std::string_view type, std::string_view message) {
    reply(svc_.inference_error(status, type, message));
  };
  // TEI's RerankRequest. As on /predict, an unknown field is refused rather than ignored.
  if (!req.is_object())
    return fail(422, error_kind::validation,
                "the body must be a JSON object {\"query\": ..., \"texts\": [...]}; got " + std::string(json_kind(req)));
  static const std::set<std::string, std::less<>> fields = {"query", "texts", "truncate", "truncation_direction",
                                                            "raw_scores", "return_text"};
  for (const auto& [key, value] : req.items())
    if (!fields.count(key))
      return fail(422, error_kind::validation,
                  "unknown field \"" + printable(key, 60) +
                      "\"; a rerank request takes \"query\", \"texts\", \"truncate\", \"truncation_direction\", "
                      "\"raw_scores\", \"return_text\"");
  const auto query = req.find("query");
  if (query == req.end() || !query->is_string()) return fail(422, error_kind::validation, "\"query\" must be a string");
  const auto texts = req.find("texts");
  if (texts == req.end() || !texts->is_array() ||
      !std::all_of(texts->begin(), texts->end(), [](const json& t) { return t.is_string(); }))
    return fail(422, error_kind::validation, "\"texts\" must be a list of strings");
  tei_job job;
  job.batch = true;
  job.start = start;
  job.truncate = cfg_.auto_truncate;
  if (const auto it = req.find("truncate"); it != req.end() && !it->is_null()) {
    if (!it->is_boolean()) return fail(422, error_kind::validation, "\"truncate\" must be true, false or null");
    job.truncate = it->get<bool>();
  }
  if (const auto it = req.find("truncation_direction"); it != req.end()) {
    if (*it == "Right") job.side = truncation_side::right;
    else if (*it == "Left") job.side = truncation_side::left;
    else return fail(422, error_kind::validation, "\"truncation_direction\" must be \"Left\" or \"Right\" (TEI's spelling)");
  }
  bool raw_scores = false, return_text = false;
  for (auto [name, flag] : {std::pair{"raw_scores", &raw_scores}, std::pair{"return_text", &return_text}})
    if (const auto it = req.find(name); it != req.end()) {
      if (!it->is_boolean()) return fail(422, error_kind::validation, "\"" + std::string(name) + "\" must be true or false");
      *flag = it->get<bool>();
    }
  // TEI's order: no texts (400 "empty"), then a model that is not a re-ranker (424), then the
  // batch size (413), each counted in te_request_failure.
  auto& te = metrics_.tei;
  if (texts->empty()) {
    te.request_failure.add("validation");
    return fail(400, error_kind::empty, "`texts` cannot be empty");
  }
  if (router_.num_labels() != 1) {
    te.request_failure.add("model_type");
    return fail(424, error_kind::backend, "model is not a re-ranker model");
  }
  for (const auto& t : *texts) job.inputs.push_back({query->get<std::string>(), t.get<std::string>(), true});
  job.answer = [raw_scores, return_text, texts = *texts](std::vector<sequence_outcome>& outs, json& body,
                                                         size_t) -> std::optional<api_error> {
    std::vector<float> scores;
    for (auto& o : outs) {
      if (o.logits.empty()) return api_error{424, std::string(error_kind::backend), "no score"};
      const float s = apply(raw_scores ? score_function::none : score_function::tei, {o.logits[0]})[0];
      if (std::isnan(s)) return api_error{424, std::string(error_kind::backend), "score is NaN"};
      scores.push_back(s);
    }
    // TEI sorts ascending and reverses: ties list the later text first.
    std::vector<size_t> order(scores.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return scores[x] < scores[y]; });
    std::reverse(order.begin(), order.end());
    body = json::array();
    for (size_t i : order) {
      json rank{{"index", i}, {"score", scores[i]}};
      if (return_text) rank["text"] = texts[i];
      body.push_back(std::move(rank));
    }
    return std::nullopt;
  };
  tei_infer(std::move(job), reply);
}

std::optional<std::string> check_token_ids(const std::vector<int32_t>& ids, int32_t vocab_size) {
  if (ids.empty()) return "Input validation error: `inputs` cannot be empty (a list of no token ids)";
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || (vocab_size > 0 && ids[i] >= vocab_size))
      return "token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
             " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")";
  return std::nullopt;
}

void encoder_infer(encoder_parts& parts, tei_job job, const reply_fn& reply) {
  service& svc_ = parts.svc_;
  const model_info& info_ = parts.info_;
  serving_metrics& metrics_ = parts.metrics_;
  auto fail = [&](unsigned status, std::string_view type, std::string_view message) {
    reply(svc_.inference_error(status, type, message));
  };
  // From here on the request counts in TEI's te_* metrics too (TEI counts a request once its body
  // has deserialised), failures labelled as TEI labels them.
  auto& te = metrics_.tei;
  (job.batch ? te.request_count_batch : te.request_count_single).fetch_add(1, std::memory_order_relaxed);
  auto te_fail = [&](std::string_view err, unsigned status, std::string_view type, std::string_view message) {
    te.request_failure.add(err);
    fail(status, type, message);
  };
  auto te_reject = [&](std::string_view err, const api_error& e) { te_fail(err, e.status, e.type, e.message); };
  if (job.batch)
    if (auto e = svc_.check_batch_size(job.inputs.size())) return te_reject("batch_size", *e);
  // Tokenize and validate, input by input (the first failing input answers, as in TEI).
  const int32_t max_len = info_.max_input_length;
  std::vector<backends::sequence_input> seqs;
  seqs.reserve(job.inputs.size());
  size_t chars = 0, tokens = 0;
  for (const auto& in : job.inputs) {
    backends::sequence_input seq;
    if (in.is_ids) {  // final token ids (TEI's EncodingInput::Ids): no specials added, checked, cut if asked
      if (auto e = check_token_ids(in.ids, info_.vocab_size)) return te_fail("tokenization", 422, error_kind::validation, *e);
      seq.token_ids = in.ids;
      if (job.truncate && static_cast<int64_t>(seq.token_ids.size()) > max_len) {
        const auto cut = seq.token_ids.size() - static_cast<size_t>(max_len);
        if (job.side == truncation_side::left) seq.token_ids.erase(seq.token_ids.begin(), seq.token_ids.begin() + static_cast<std::ptrdiff_t>(cut));
        else seq.token_ids.resize(static_cast<size_t>(max_len));
      }
    } else {
      if (in.a.empty() && in.b.empty())
        return te_fail("tokenization", 413, error_kind::validation, "Input validation error: `inputs` cannot be empty");
      const size_t n = count_chars(in.a) + count_chars(in.b);
      chars += n;
      const int64_t char_limit = static_cast<int64_t>(max_len) * max_chars_per_token;
      if (!job.truncate && static_cast<int64_t>(n) > char_limit)
        return te_fail("tokenization", 413, error_kind::validation,
                    "Input validation error: `inputs` must have at most " + std::to_string(char_limit) +
                        " characters. Given: " + std::to_string(n) + "; pass \"truncate\": true to cut it");
      const std::string_view b = in.b;
      if (auto e = svc_.encode_text(in.a, in.pair ? &b : nullptr, job.truncate, job.side, 422, seq))
        return te_reject("tokenization", *e);
    }
    if (auto e = svc_.check_length(seq.token_ids.size(), "`inputs`", "pass \"truncate\": true"))
      return te_reject("tokenization", *e);
    seq.every_token = job.every_token;
    tokens += seq.token_ids.size();
    metrics_.request_input_length.observe(static_cast<double>(seq.token_ids.size()));
    te.request_input_length.observe(static_cast<double>(seq.token_ids.size()));
    seqs.push_back(std::move(seq));
  }
  const time_point start = job.start;
  const double tokenization_seconds = to_seconds(steady::now() - start);
  metrics_.tokenization_duration.observe(tokenization_seconds);
  if (auto e = svc_.check_healthy()) return te_reject("inference", *e);

  auto call = call_state::make(seqs.size(), reply, &svc_, start);
  call->on_error = [&te](unsigned status) { te.request_failure.add(status == 429 ? "overloaded" : "inference"); };
  call->build = [&svc_, &metrics_, batch = job.batch, answer = std::move(job.answer), chars, tokens, tokenization_seconds,
                 start](std::vector<sequence_outcome>& outs) {
    // TEI's x-compute-tokens; OpenAI's usage.prompt_tokens reads it from here too.
    double queue = 0, inference = 0, modelled = 0;
    for (auto& o : outs) {
      queue += o.queue_seconds;
      inference += o.inference_seconds;
      modelled = std::max(modelled, o.modelled_seconds);
    }
    json body;
    if (auto err = answer(outs, body, tokens)) return svc_.error_body(err->status, err->type, err->message);
    http_reply r{200, "application/json", to_text(body)};
    const double n = static_cast<double>(std::max<size_t>(1, outs.size()));
    const double total_seconds = to_seconds(steady::now() - start);
    const std::string total = millis(total_seconds);
    auto& te = metrics_.tei;
    (batch ? te.request_success_batch : te.request_success_single).fetch_add(1, std::memory_order_relaxed);
    te.request_duration.observe(total_seconds);
    te.request_tokenization_duration.observe(tokenization_seconds);
    te.request_queue_duration.observe(queue / n);
    te.request_inference_duration.observe(inference / n);
    // TEI's timing headers (milliseconds; a batch reports the mean queue and inference time).
    r.headers = {{"x-compute-type", "cpu"},
                 {"x-compute-time", total},
                 {"x-compute-characters", std::to_string(chars)},
                 {"x-compute-tokens", std::to_string(tokens)},
                 {"x-total-time", total},
                 {"x-tokenization-time", millis(tokenization_seconds)},
                 {"x-queue-time", millis(queue / n)},
                 {"x-inference-time", millis(inference / n)}};
    // The modelled clock (tessera's): the slowest of its batches on the modelled device, in ms.
    if (modelled > 0) {
      char text[32];
      std::snprintf(text, sizeof text, "%.9g", modelled * 1e3);
      r.headers.emplace_back("x-modelled-time", text);
    }
    return r;
  };
  svc_.submit_all(call, std::move(seqs));
}

void tei_api::tei_tokenize(std::string_view body, const reply_fn& reply) {
  auto fail = [&](unsigned status, std::string_view type, std::string_view message) {
    reply(svc_.inference_error(status, type, message));
  };
  auto opened = open_request(body, reply);
  if (!opened) return;
  json& req = *opened;
  if (!req.is_object())
    return fail(422, error_kind::validation, "the body must be a JSON object {\"inputs\": ...}");
  for (const auto& [key, value] : req.items())
    if (key != "inputs" && key != "add_special_tokens")
      return fail(422, error_kind::validation,
                  "unknown field \"" + printable(key, 60) +
                      "\"; a tokenize request takes \"inputs\" and \"add_special_tokens\"");
  if (!req.contains("inputs")) return fail(422, error_kind::validation, "missing field \"inputs\"");
  bool add_special_tokens = true;
  if (const auto it = req.find("add_special_tokens"); it != req.end()) {
    if (!it->is_boolean()) return fail(422, error_kind::validation, "\"add_special_tokens\" must be true or false");
    add_special_tokens = it->get<bool>();
  }
  // TEI's TokenizeInput: a string, or a list of strings (each one input; no pairs here).
  const json& in = req["inputs"];
  std::vector<std::string> texts;
  if (in.is_string()) {
    texts.push_back(in.get<std::string>());
  } else if (in.is_array() && std::all_of(in.begin(), in.end(), [](const json& e) { return e.is_string(); })) {
    if (in.empty()) return fail(413, error_kind::validation, "Input validation error: `inputs` cannot be empty");
    if (static_cast<int64_t>(in.size()) > cfg_.max_client_batch_size)
      return fail(413, error_kind::validation,
                  "batch size " + std::to_string(in.size()) + " > maximum allowed batch size " +
                      std::to_string(cfg_.max_client_batch_size));
    for (const auto& e : in) texts.push_back(e.get<std::string>());
  } else {
    return fail(422, error_kind::validation, "\"inputs\" must be a string or a list of strings");
  }
  json out = json::array();
  const int64_t char_limit = static_cast<int64_t>(info_.max_input_length) * max_chars_per_token;
  for (const auto& text : texts) {
    if (text.empty()) return fail(413, error_kind::validation, "Input validation error: `inputs` cannot be empty");
    if (const auto n = static_cast<int64_t>(count_chars(text)); n > char_limit)
      return fail(413, error_kind::validation,
                  "Input validation error: `inputs` must have at most " + std::to_string(char_limit) +
                      " characters. Given: " + std::to_string(n));
    auto tokens = tokenizer_->tokenize(text, add_special_tokens);
    if (!tokens) return fail(422, error_kind::tokenizer, tokens.error().message());
    json one = json::array();
    for (const auto& t : *tokens)
      one.push_back({{"id", t.id},
                     {"text", t.text},
                     {"special", t.special},
                     {"start", t.special ? json(nullptr) : json(t.start)},
                     {"stop", t.special ? json(nullptr) : json(t.stop)}});
    out.push_back(std::move(one));
  }
  metrics_.request_success.fetch_add(1, std::memory_order_relaxed);
  reply({200, "application/json", to_text(out)});
}

void tei_api::add_routes(route_table& t) {
  t.add("POST", "/predict", [this](const route_call& c) { tei_predict(c.body, predict_dialect::tei, c.reply); });
  t.add("POST", "/invocations",
        [this](const route_call& c) { tei_predict(c.body, predict_dialect::tei_default, c.reply); });
  // POST / answers predictions in the shape Hugging Face's clients read (GET / is health).
  t.add("POST", "/", [this](const route_call& c) { tei_predict(c.body, predict_dialect::hugging_face, c.reply); });
  t.add("POST", "/tokenize", [this](const route_call& c) { tei_tokenize(c.body, c.reply); });
  t.add("POST", "/rerank", [this](const route_call& c) {
    metrics_.request_count.fetch_add(1, std::memory_order_relaxed);
    const time_point start = steady::now();
    json req;
    if (auto err = parse_body(c.body, req)) return c.reply(svc_.inference_error(err->status, err->type, err->message));
    tei_rerank(req, start, c.reply);
  });
}

std::unique_ptr<api> make_tei_api(service& svc) { return std::make_unique<tei_api>(svc); }

}  // namespace tessera::serving
