// The OpenAI-compatible API of a decoder: /v1/completions, /v1/chat/completions, /v1/models,
// streaming as server-sent events, errors in OpenAI's shape. See service.hpp and docs/serving.md.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>

#include "tessera/serving/api.hpp"
#include "tessera/serving/openai_choices.hpp"
#include "tessera/common/log.hpp"
#include "tessera/serving/utf8.hpp"

namespace tessera::serving {

using namespace detail;

namespace {

/// An error as OpenAI writes it: {"error": {"message", "type", "param", "code"}}.
struct oai_error {
  unsigned status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" = null
  std::string code;   // "" = null
};

json error_json(const oai_error& e) {
  return json{{"error",
               {{"message", e.message},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

http_reply error_http(const oai_error& e) { return {e.status, "application/json", to_text(error_json(e))}; }

oai_error bad(std::string param, std::string message, std::string code = "") {
  return {400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

oai_error from_status(const status& st, std::string param) {
  switch (st.code()) {
    case errc::invalid_argument: {
      const bool context = st.message().find("maximum context length") != std::string::npos;
      return {400, st.message(), "invalid_request_error", std::move(param), context ? "context_length_exceeded" : ""};
    }
    case errc::overloaded: return {429, st.message(), "server_error", "", "overloaded"};
    case errc::cancelled: return {503, st.message(), "server_error", "", "unavailable"};
    default: return {500, st.to_string(), "server_error", "", ""};
  }
}

std::string random_id(std::string_view prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%04llx", static_cast<unsigned long long>(salt),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffff));
  return std::string(prefix) + buf;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The parameters both routes share, read and checked.
struct generation {
  llm_request req;
  bool stream = false;
  bool include_usage = false;
  bool max_tokens_given = false;
  openai_choices choices;  // n, best_of, logprobs, echo as the answer shows them
};

std::optional<oai_error> number_in(const json& j, const char* name, double lo, double hi, double& out) {
  if (!j.contains(name) || j[name].is_null()) return std::nullopt;
  if (!j[name].is_number())
    return bad(name, std::string("'") + name + "' must be a number, not " + std::string(json_kind(j[name])));
  double v = j[name].get<double>();
  if (!(v >= lo && v <= hi))
    return bad(name, std::string("'") + name + "' must be between " + to_text(lo) + " and " + to_text(hi) +
                         ", not " + to_text(j[name]));
  out = v;
  return std::nullopt;
}

std::optional<oai_error> integer_in(const json& j, const char* name, int64_t lo, int64_t hi, int64_t& out) {
  if (!j.contains(name) || j[name].is_null()) return std::nullopt;
  const json& v = j[name];
  if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
    return bad(name, std::string("'") + name + "' must be an integer, not " + to_text(v));
  const double d = v.get<double>();
  bool in_range;
  if (v.is_number_unsigned())
    in_range = v.get<uint64_t>() <= static_cast<uint64_t>(hi) && (lo <= 0 || v.get<uint64_t>() >= static_cast<uint64_t>(lo));
  else if (v.is_number_integer())
    in_range = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  else  // a whole float: compared as a double (2^63 itself is out)
    in_range = d >= static_cast<double>(lo) && d < static_cast<double>(hi) + (hi < (int64_t{1} << 53) ? 1.0 : 0.0);
  if (!in_range)
    return bad(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
                         std::to_string(hi) + ", not " + to_text(v));
  out = v.is_number_float() ? static_cast<int64_t>(d) : v.get<int64_t>();
  return std::nullopt;
}

std::optional<oai_error> read_generation(const json& j, bool chat, int32_t vocab, generation& g) {
  // Every field is known and either honoured or refused: nothing is silently ignored.
  static const std::vector<std::string> common{
      "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "n", "stop", "stop_token_ids",
      "ignore_eos", "stream", "stream_options", "presence_penalty", "frequency_penalty", "logit_bias",
      "repetition_penalty", "logprobs", "user"};
  static const std::vector<std::string> completions_only{"prompt", "echo", "best_of", "suffix"};
  static const std::vector<std::string> chat_only{"messages", "max_completion_tokens", "top_logprobs",
                                                  "tools", "tool_choice", "response_format",
                                                  "parallel_tool_calls", "functions", "function_call"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    auto known = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), key) != v.end(); };
    if (!known(common) && !known(chat ? chat_only : completions_only))
      return bad(key, "unrecognized request argument supplied: " + printable(key, 60));
  }
  int64_t i = 0;
  const char* max_name = chat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  // max_tokens 0 scores the prompt (completions with echo; checked below).
  if (auto e = integer_in(j, max_name, chat ? 1 : 0, 1 << 30, i)) return e;
  if (j.contains(max_name) && !j[max_name].is_null()) {
    g.req.max_tokens = static_cast<int32_t>(i);
    g.max_tokens_given = true;
  }
  g.req.sampling.temperature = 1.0;
  if (auto e = number_in(j, "temperature", 0, 2, g.req.sampling.temperature)) return e;
  if (auto e = number_in(j, "top_p", 0, 1, g.req.sampling.top_p)) return e;
  if (j.contains("top_p") && j["top_p"].is_number() && g.req.sampling.top_p <= 0)
    return bad("top_p", "'top_p' must be above 0 (1 keeps every token)");
  i = 0;
  if (auto e = integer_in(j, "top_k", -1, vocab, i)) return e;
  g.req.sampling.top_k = i < 0 ? 0 : static_cast<int32_t>(i);
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (auto e = integer_in(j, "seed", INT64_MIN, INT64_MAX, i)) return e;
    g.req.sampling.seed = static_cast<uint64_t>(i);
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      g.req.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (const auto& x : s) {
        if (!x.is_string()) return bad("stop", "'stop' must be a string or a list of up to 4 strings");
        g.req.stop.push_back(x.get<std::string>());
      }
    } else {
      return bad("stop", "'stop' must be a string or a list of up to 4 strings");
    }
  }
  if (j.contains("stop_token_ids") && !j["stop_token_ids"].is_null()) {
    const json& s = j["stop_token_ids"];
    if (!s.is_array() || s.size() > 64) return bad("stop_token_ids", "'stop_token_ids' must be a list of up to 64 token ids");
    for (const auto& x : s) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab)
        return bad("stop_token_ids", "'stop_token_ids' holds " + to_text(x) + "; token ids are 0.." + std::to_string(vocab - 1));
      g.req.stop_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
  }
  auto boolean = [&](const char* name, bool& out) -> std::optional<oai_error> {
    if (!j.contains(name) || j[name].is_null()) return std::nullopt;
    if (!j[name].is_boolean()) return bad(name, std::string("'") + name + "' must be true or false");
    out = j[name].get<bool>();
    return std::nullopt;
  };
  if (auto e = boolean("ignore_eos", g.req.ignore_eos)) return e;
  if (auto e = boolean("stream", g.stream)) return e;
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const json& o = j["stream_options"];
    if (!g.stream) return bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (!o.is_object()) return bad("stream_options", "'stream_options' must be an object");
    for (const auto& [key, value] : o.items()) {
      if (key != "include_usage" || !value.is_boolean())
        return bad("stream_options", "'stream_options' takes only 'include_usage': true|false");
      g.include_usage = value.get<bool>();
    }
  }
  // n, best_of, logprobs, top_logprobs, echo, the penalties and logit_bias (openai_choices.hpp).
  if (auto e = read_openai_choices(j, chat, vocab, g.stream, g.req, g.choices)) return bad(e->param, e->message);
  if (g.max_tokens_given && g.req.max_tokens == 0 && !g.choices.echo)
    return bad(max_name, "'max_tokens': 0 generates nothing; it is only allowed with 'echo': true (scoring the prompt)");
  if (j.contains("suffix") && !j["suffix"].is_null()) return bad("suffix", "'suffix' is not supported");
  for (const char* name : {"tools", "tool_choice", "functions", "function_call", "parallel_tool_calls"})
    if (j.contains(name) && !j[name].is_null()) return bad(name, std::string("'") + name + "' (tool calls) is not supported");
  if (j.contains("response_format") && !j["response_format"].is_null() &&
      !(j["response_format"].is_object() && j["response_format"].value("type", "") == "text" &&
        j["response_format"].size() == 1))
    return bad("response_format", "only 'response_format': {\"type\": \"text\"} is supported");
  if (j.contains("user") && !j["user"].is_null() && !j["user"].is_string()) return bad("user", "'user' must be a string");
  return std::nullopt;
}

std::optional<oai_error> read_messages(const json& j, std::vector<chat_message>& out) {
  if (!j.contains("messages")) return bad("messages", "'messages' is required");
  const json& ms = j["messages"];
  if (!ms.is_array() || ms.empty()) return bad("messages", "'messages' must be a non-empty list of messages");
  for (size_t i = 0; i < ms.size(); ++i) {
    const json& m = ms[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad(where, where + " must be an object with 'role' and 'content'");
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content") return bad(where + "." + key, where + "." + printable(key, 40) + " is not supported");
    if (!m.contains("role") || !m["role"].is_string()) return bad(where + ".role", where + ".role must be a string");
    std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant")
      return bad(where + ".role", where + ".role must be system, developer, user or assistant, not '" +
                                      printable(role, 40) + "'");
    chat_message msg{role, ""};
    const json c = m.contains("content") ? m["content"] : json(nullptr);
    if (c.is_string()) {
      msg.content = c.get<std::string>();
    } else if (c.is_array()) {
      for (const auto& part : c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          return bad(where + ".content", where + ".content: only parts {\"type\": \"text\", \"text\": \"...\"} are supported");
        msg.content += part["text"].get<std::string>();
      }
    } else if (!(c.is_null() && role == "assistant")) {
      return bad(where + ".content", where + ".content must be a string or a list of text parts");
    }
    out.push_back(std::move(msg));
  }
  return std::nullopt;
}

// What one request's answer is made of, across engine events.
struct oai_call {
  bool chat = false;
  std::string id, model;
  int64_t created = 0;
  generation g;
  std::shared_ptr<const llm_tokenizer> tokenizer;
  std::unique_ptr<choice_collector> collected;  // every choice's events (not streamed)
  // Streamed: per choice, its first chunk sent, its text's byte offset (text_offset), its end.
  std::vector<char> started, ended;
  std::vector<size_t> offset;
  size_t ended_count = 0;
  int32_t completion_tokens = 0;
  bool failed = false;
  std::string echo_text;  // the prompt's text, shown before each choice's with echo
};

json usage_json(int32_t prompt_tokens, int32_t completion_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

/// The logprobs object of some tokens of a choice (null when not asked for); `offset` is the
/// byte offset of the first one in the choice's text (completions' text_offset).
json logprobs_json(const oai_call& c, const std::vector<token_logprob>& tokens, size_t offset) {
  const openai_choices& x = c.g.choices;
  if (c.chat) return x.chat_logprobs ? chat_logprobs_json(*c.tokenizer, tokens, x.logprobs) : json(nullptr);
  return x.logprobs >= 0 ? completion_logprobs_json(*c.tokenizer, tokens, offset) : json(nullptr);
}

json chunk_json(const oai_call& c, int32_t index, const std::string& text, bool role, const json& finish,
                json logprobs = nullptr) {
  json choice;
  if (c.chat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (!text.empty() || role) delta["content"] = text;
    choice = {{"index", index}, {"delta", delta}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish}};
  } else {
    choice = {{"index", index}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish}};
  }
  return json{{"id", c.id},
              {"object", c.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", c.created},
              {"model", c.model},
              {"choices", json::array({choice})}};
}

std::string sse(const json& j) { return "data: " + to_text(j) + "\n\n"; }

}  // namespace

/// The OpenAI-compatible routes under /v1, on the service's decoder (service::set_llm); without
/// one, /v1 has no routes.
class openai_api final : public api {
 public:
  explicit openai_api(service& svc) : svc_(svc), llm_(svc.llm()), metrics_(svc.metrics()) {}
  void add_routes(route_table& t) override;

 private:
  void openai_route(std::string_view method, std::string_view path, std::string_view body,
                    const request_headers& headers, const reply_fn& reply);
  void openai_generate(std::string_view body, bool chat, const request_headers& headers,
                       const reply_fn& reply);

  service& svc_;
  const llm_api& llm_;
  serving_metrics& metrics_;
};

void openai_api::openai_route(std::string_view method, std::string_view path, std::string_view body,
                           const request_headers& headers, const reply_fn& reply) {
  auto wrong = [&](std::string_view allow) {
    http_reply r = error_http({405, printable(method, 16) + " is not allowed on " + printable(path, 100) +
                                        "; use " + std::string(allow),
                               "invalid_request_error", "", "method_not_allowed"});
    r.allow = std::string(allow);
    metrics_.http_errors.add(error_kind::method_not_allowed);
    reply(std::move(r));
  };
  auto model_json = [&] {
    return json{{"id", llm_.model_id}, {"object", "model"}, {"created", llm_.created_unix}, {"owned_by", "tessera"},
                {"max_model_len", llm_.engine->max_context()}};
  };
  if (path == "/v1/models") {
    if (method != "GET") return wrong("GET");
    return reply({200, "application/json", to_text(json{{"object", "list"}, {"data", json::array({model_json()})}})});
  }
  if (path.substr(0, 11) == "/v1/models/") {
    if (method != "GET") return wrong("GET");
    if (path.substr(11) != llm_.model_id)
      return reply(error_http({404, "The model '" + printable(path.substr(11), 100) + "' does not exist; this server serves '" +
                                        llm_.model_id + "'",
                               "invalid_request_error", "model", "model_not_found"}));
    return reply({200, "application/json", to_text(model_json())});
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (method != "POST") return wrong("POST");
    return openai_generate(body, path == "/v1/chat/completions", headers, reply);
  }
  metrics_.http_errors.add(error_kind::not_found);
  reply(error_http({404, "no route " + printable(path, 100) +
                             "; this server has /v1/completions, /v1/chat/completions and /v1/models",
                    "invalid_request_error", "", "not_found"}));
}

void openai_api::openai_generate(std::string_view body, bool chat, const request_headers& headers,
                              const reply_fn& reply) {
  metrics_.request_count.fetch_add(1, std::memory_order_relaxed);
  auto fail = [&](const oai_error& e) {
    metrics_.count_failure(e.type);
    reply(error_http(e));
  };
  json j;
  if (auto err = parse_body(body, j)) return fail(bad("", err->message));
  if (!j.is_object()) return fail(bad("", "the request body must be a JSON object, not " + std::string(json_kind(j))));
  auto call = std::make_shared<oai_call>();
  call->chat = chat;
  call->model = llm_.model_id;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) return fail(bad("model", "'model' must be a string"));
    if (j["model"].get<std::string>() != llm_.model_id)
      return fail({404, "The model '" + printable(j["model"].get<std::string>(), 100) +
                            "' does not exist; this server serves '" + llm_.model_id + "'",
                   "invalid_request_error", "model", "model_not_found"});
  }
  generation& g = call->g;
  if (auto e = read_generation(j, chat, llm_.tokenizer->vocab_size(), g)) return fail(*e);
  // The prompt's tokens.
  std::vector<int32_t> prompt;
  if (chat) {
    std::vector<chat_message> messages;
    if (auto e = read_messages(j, messages)) return fail(*e);
    auto ids = llm_.tokenizer->encode(render_chat(llm_.chat, messages), true);
    if (!ids) return fail(bad("messages", ids.error().message()));
    prompt = std::move(*ids);
  } else {
    if (!j.contains("prompt")) return fail(bad("prompt", "'prompt' is required"));
    json p = j["prompt"];
    if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = json(p[0]);
    if (p.is_string()) {
      auto ids = llm_.tokenizer->encode(p.get<std::string>(), true);
      if (!ids) return fail(bad("prompt", ids.error().message()));
      prompt = std::move(*ids);
    } else if (p.is_array() && !p.empty() && p[0].is_number()) {
      for (const auto& t : p) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= llm_.tokenizer->vocab_size())
          return fail(bad("prompt", "'prompt' as token ids holds " + to_text(t) + "; ids are 0.." +
                                        std::to_string(llm_.tokenizer->vocab_size() - 1)));
        prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
    } else if (p.is_array() && p.size() > 1) {
      return fail(bad("prompt", "only one prompt per request is supported; send one request per prompt"));
    } else {
      return fail(bad("prompt", "'prompt' must be a string or a list of token ids"));
    }
    if (!g.max_tokens_given) g.req.max_tokens = 16;  // OpenAI's default for completions
  }
  if (prompt.empty()) return fail(bad(chat ? "messages" : "prompt", "the prompt has no tokens"));
  if (chat && !g.max_tokens_given)  // up to the end of the context
    g.req.max_tokens = static_cast<int32_t>(std::max<int64_t>(1, llm_.engine->max_context() - static_cast<int64_t>(prompt.size())));
  g.req.prompt = std::move(prompt);
  call->id = random_id(chat ? "chatcmpl-" : "cmpl-");
  call->created = unix_now();
  const time_point start = steady::now();

  std::shared_ptr<reply_stream> stream;
  if (g.stream) stream = std::make_shared<reply_stream>();
  service* self = &svc_;
  call->tokenizer = llm_.tokenizer;
  if (g.choices.echo) call->echo_text = llm_.tokenizer->decode(g.req.prompt);
  const size_t count = static_cast<size_t>(std::max(g.req.n, 1));
  if (stream) {
    call->started.assign(count, 0);
    call->ended.assign(count, 0);
    call->offset.assign(count, 0);
    g.req.on_event = [call, stream, self, start](llm_event ev) {
      if (call->failed || ev.index < 0 || static_cast<size_t>(ev.index) >= call->ended.size()) return;
      const size_t i = static_cast<size_t>(ev.index);
      std::string out;
      if (!call->started[i]) {
        call->started[i] = 1;
        if (call->chat) out += sse(chunk_json(*call, ev.index, "", true, nullptr));
        if (call->g.choices.echo) {  // the prompt first, with its log-probabilities
          const std::string& text = call->echo_text;
          json lp = logprobs_json(*call, ev.prompt_logprobs, 0);
          for (const auto& t : ev.prompt_logprobs) call->offset[i] += call->tokenizer->token_bytes(t.token).size();
          out += sse(chunk_json(*call, ev.index, text, false, nullptr, std::move(lp)));
        }
      }
      if (!ev.text.empty() || !ev.logprobs.empty()) {
        json lp = logprobs_json(*call, ev.logprobs, call->offset[i]);
        for (const auto& t : ev.logprobs) call->offset[i] += call->tokenizer->token_bytes(t.token).size();
        out += sse(chunk_json(*call, ev.index, ev.text, false, nullptr, std::move(lp)));
      }
      if (ev.finished) {
        if (ev.finish_reason == "error" || ev.finish_reason == "cancelled") {
          oai_error e = from_status(ev.error.ok() ? status::internal("generation failed") : ev.error, "");
          self->metrics().count_failure(e.type);
          out += sse(error_json(e));
          out += "data: [DONE]\n\n";
          call->failed = true;
          stream->write(std::move(out));
          stream->close();
          return;
        }
        out += sse(chunk_json(*call, ev.index, "", false, ev.finish_reason));
        call->ended[i] = 1;
        call->completion_tokens += ev.completion_tokens;
        if (++call->ended_count == call->ended.size()) {
          if (call->g.include_usage) {
            json u = chunk_json(*call, 0, "", false, nullptr);
            u["choices"] = json::array();
            u["usage"] = usage_json(ev.prompt_tokens, call->completion_tokens);
            out += sse(u);
          }
          self->metrics().request_success.fetch_add(1, std::memory_order_relaxed);
          self->metrics().request_duration.observe(to_seconds(steady::now() - start));
          out += "data: [DONE]\n\n";
        }
      }
      stream->write(std::move(out));
      if (call->ended_count == call->ended.size()) stream->close();
    };
  } else {
    call->collected = std::make_unique<choice_collector>(static_cast<int32_t>(count));
    g.req.on_event = [call, reply, self, start](llm_event ev) {
      if (!call->collected->add(ev)) return;
      const choice_collector& col = *call->collected;
      if (const auto* f = col.failed()) {
        oai_error e = from_status(f->error.ok() ? status::internal("generation failed") : f->error, "");
        self->metrics().count_failure(e.type);
        return reply(error_http(e));
      }
      const openai_choices& x = call->g.choices;
      json choices = json::array();
      int32_t index = 0;
      for (size_t k : col.best(x.n)) {  // best_of: the n best; else all of them, in order
        const auto& c = col.choices()[k];
        std::string text = c.text;
        std::vector<token_logprob> lps;
        if (x.echo) {
          text = call->echo_text + text;
          lps = c.prompt_logprobs;
        }
        lps.insert(lps.end(), c.logprobs.begin(), c.logprobs.end());
        json lp = logprobs_json(*call, lps, 0);
        choices.push_back(call->chat ? json{{"index", index},
                                            {"message", {{"role", "assistant"}, {"content", text}}},
                                            {"logprobs", lp},
                                            {"finish_reason", c.finish_reason}}
                                     : json{{"index", index}, {"text", text}, {"logprobs", lp},
                                            {"finish_reason", c.finish_reason}});
        ++index;
      }
      json out{{"id", call->id},
               {"object", call->chat ? "chat.completion" : "text_completion"},
               {"created", call->created},
               {"model", call->model},
               {"choices", choices},
               {"usage", usage_json(col.prompt_tokens(), col.completion_tokens())}};
      self->metrics().request_success.fetch_add(1, std::memory_order_relaxed);
      self->metrics().request_duration.observe(to_seconds(steady::now() - start));
      reply({200, "application/json", to_text(out)});
    };
  }
  auto id = llm_.engine->submit(std::move(g.req));
  if (!id) return fail(from_status(id.error(), chat ? "messages" : "prompt"));
  // A client that goes away stops its generation (its KV blocks are freed at the next step).
  llm_endpoint* engine = llm_.engine;
  const uint64_t seq = *id;
  if (headers.on_disconnect) headers.on_disconnect([engine, seq] { engine->cancel(seq); });
  if (stream) {
    stream->on_cancel([engine, seq] { engine->cancel(seq); });
    http_reply r;
    r.content_type = "text/event-stream";
    r.stream = stream;
    reply(std::move(r));
  }
}

void openai_api::add_routes(route_table& t) {
  t.add_prefix("/v1", [this](const route_call& c) {
    if (!llm_.engine)
      return c.reply(svc_.error_reply(404, error_kind::not_found, "no route " + printable(c.path, 100)));
    openai_route(c.method, c.path, c.body, c.headers, c.reply);
  });
}

std::unique_ptr<api> make_openai_api(service& svc) { return std::make_unique<openai_api>(svc); }

}  // namespace tessera::serving
