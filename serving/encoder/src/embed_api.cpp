// Embedding models over HTTP, following TEI v1.7.1 (router/src/http/types.rs, server.rs;
// core/src/infer.rs): /embed (pooled vectors; normalize, dimensions, prompt_name, truncate),
// /embed_all (every token's vector), /embed_sparse (refused: no SPLADE head), /similarity
// (cosine of normalized vectors), POST / and /invocations (embed, or Hugging Face's
// sentence-similarity body), and OpenAI's /v1/embeddings (float or base64, dimensions, usage).
// The routes that do not fit the loaded model answer TEI's 424; docs/serving.md lists them.
#include <openssl/evp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <set>

#include "encoder_job.hpp"
#include "tessera/models/embedding.hpp"
#include "tessera/serving/api.hpp"
#include "tessera/serving/utf8.hpp"

namespace tessera::serving {

using namespace detail;

namespace {

/// What a route answers per input: the pooled vector, or every token's vector.
enum class embed_output { pooled, every_token };

/// What the embed routes read besides the inputs.
struct embed_fields {
  bool normalize = true;
  std::optional<int64_t> dimensions;
};

api_error validation(std::string message) { return {422, std::string(error_kind::validation), std::move(message)}; }

constexpr std::string_view input_forms =
    "a string, a list of strings, a list of token ids, or a list of lists of token ids";

/// TEI's EmbeddingInput (and OpenAI's `input`): a string (one input), a list of strings (a batch),
/// a list of token ids (one input) or a list of lists of token ids (a batch). `field` names it.
std::optional<api_error> read_input(const json& in, std::string_view field, std::vector<tei_input>& out,
                                    bool& batch) {
  std::string name = "\"";
  name.append(field).append("\"");
  auto read_ids = [&](const json& list, const std::string& where, tei_input& x) -> std::optional<api_error> {
    x.is_ids = true;
    for (const auto& v : list) {
      if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
        return validation(where + " holds " + std::string(json_kind(v)) + "; a list of token ids holds integers only");
      x.ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    return std::nullopt;
  };
  if (in.is_string()) {
    out.push_back({in.get<std::string>()});
    batch = false;
    return std::nullopt;
  }
  if (!in.is_array()) return validation(name + " must be " + std::string(input_forms) + "; got " + std::string(json_kind(in)));
  if (in.empty()) return api_error{400, std::string(error_kind::empty), "`" + std::string(field) + "` cannot be empty"};
  if (in[0].is_number()) {
    tei_input x;
    if (auto e = read_ids(in, name, x)) return e;
    out.push_back(std::move(x));
    batch = false;
    return std::nullopt;
  }
  batch = true;
  const bool texts = in[0].is_string();
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string where = name + "[" + std::to_string(i) + "]";
    const json& e = in[i];
    if (texts) {
      if (!e.is_string()) return validation(where + " is " + std::string(json_kind(e)) + " in a list of strings");
      out.push_back({e.get<std::string>()});
    } else {
      if (!e.is_array())
        return validation(where + " is " + std::string(json_kind(e)) + "; " + name + " must be " + std::string(input_forms));
      tei_input x;
      if (auto err = read_ids(e, where, x)) return err;
      out.push_back(std::move(x));
    }
  }
  return std::nullopt;
}

/// "truncate" (bool or null) and "truncation_direction" (TEI takes "Left"/"left", "Right"/"right").
std::optional<api_error> read_truncation(const json& req, bool auto_truncate, tei_job& job) {
  job.truncate = auto_truncate;
  if (const auto it = req.find("truncate"); it != req.end() && !it->is_null()) {
    if (!it->is_boolean()) return validation("\"truncate\" must be true, false or null; got " + std::string(json_kind(*it)));
    job.truncate = it->get<bool>();
  }
  if (const auto it = req.find("truncation_direction"); it != req.end()) {
    if (*it == "Right" || *it == "right") job.side = truncation_side::right;
    else if (*it == "Left" || *it == "left") job.side = truncation_side::left;
    else return validation("\"truncation_direction\" must be \"Left\" or \"Right\"");
  }
  return std::nullopt;
}

/// "prompt_name" (or the model's default prompt): its text goes before every text input, as
/// sentence-transformers does; token ids are final and take no prompt.
std::optional<api_error> apply_prompt(const json& req, const model_info& info, std::vector<tei_input>& inputs) {
  std::string name = info.default_prompt_name;
  bool asked = false;
  if (const auto it = req.find("prompt_name"); it != req.end() && !it->is_null()) {
    if (!it->is_string()) return validation("\"prompt_name\" must be a string or null; got " + std::string(json_kind(*it)));
    name = it->get<std::string>();
    asked = true;
  }
  if (name.empty()) return std::nullopt;
  const auto p = info.prompts.find(name);
  if (p == info.prompts.end()) {
    std::string known;
    for (const auto& [k, v] : info.prompts) known += (known.empty() ? "" : ", ") + ("\"" + k + "\"");
    return validation("prompt \"" + printable(name, 60) + "\" is not one of the model's prompts (" +
                      (known.empty() ? "it has none" : known) + ")");
  }
  for (auto& in : inputs) {
    if (in.is_ids) {
      if (asked) return validation("\"prompt_name\" applies to text inputs; token ids are final and take no prompt");
      continue;
    }
    in.a = p->second + in.a;
  }
  return std::nullopt;
}

/// "dimensions": a positive integer up to the model's width, or null.
std::optional<api_error> read_dimensions(const json& req, int32_t hidden, embed_fields& f) {
  const auto it = req.find("dimensions");
  if (it == req.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() < 1)
    return validation("\"dimensions\" must be a positive integer or null; got " + it->dump());
  if (it->get<int64_t>() > hidden)
    return validation("\"dimensions\" is " + std::to_string(it->get<int64_t>()) + " but the model's embeddings have " +
                      std::to_string(hidden) + " dimensions");
  f.dimensions = it->get<int64_t>();
  return std::nullopt;
}

/// An unknown field is refused (TEI ignores it; a field tessera does not act on must not look accepted).
std::optional<api_error> check_fields(const json& req, const std::set<std::string, std::less<>>& fields,
                                      std::string_view what) {
  if (!req.is_object())
    return validation("the body must be a JSON object; got " + std::string(json_kind(req)));
  for (const auto& [key, value] : req.items())
    if (!fields.count(key)) {
      std::string list;
      for (const auto& f : fields) list += (list.empty() ? "\"" : ", \"") + f + "\"";
      return validation("unknown field \"" + printable(key, 60) + "\"; " + std::string(what) + " takes " + list);
    }
  return std::nullopt;
}

/// The pooled vector as TEI answers it: cut to `dimensions` (Matryoshka), then scaled to unit
/// length when `normalize` (the sum of squares in double, as TEI; a zero vector stays zero).
std::vector<float> finish_vector(std::vector<float> v, const embed_fields& f) {
  if (f.dimensions) v.resize(static_cast<size_t>(*f.dimensions));
  if (f.normalize) models::l2_normalize(v.data(), 1, static_cast<int64_t>(v.size()));
  return v;
}

std::optional<api_error> check_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return api_error{424, std::string(error_kind::backend), "the embedding holds NaN or infinity"};
  return std::nullopt;
}

/// Little-endian float32 bytes in base64, as OpenAI's encoding_format "base64" (OpenSSL's encoder).
std::string base64_floats(const std::vector<float>& v) {
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + static_cast<size_t>(b)] = static_cast<char>((u >> (8 * b)) & 0xFF);
  }
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace

/// The embedding routes, on the service's encoder backends.
class embed_api final : public api, private encoder_parts {
 public:
  explicit embed_api(service& svc) : encoder_parts(svc) {}

  void add_routes(route_table& t) override {
    t.add("POST", "/embed", [this](const route_call& c) { counted(c, [&](time_point s) { embed(c.body, s, embed_output::pooled, c.reply); }); });
    t.add("POST", "/embed_all",
          [this](const route_call& c) { counted(c, [&](time_point s) { embed(c.body, s, embed_output::every_token, c.reply); }); });
    t.add("POST", "/embed_sparse", [this](const route_call& c) { counted(c, [&](time_point) { embed_sparse(c.reply); }); });
    t.add("POST", "/similarity", [this](const route_call& c) {
      counted(c, [&](time_point s) {
        json req;
        if (auto err = parse_body(c.body, req)) return fail(c.reply, *err);
        similarity(req, s, c.reply);
      });
    });
    t.add("POST", "/v1/embeddings", [this](const route_call& c) {
      metrics_.request_count.fetch_add(1, std::memory_order_relaxed);
      openai_embeddings(c.body, steady::now(), openai_reply(c.reply));
    });
  }

  /// POST / and /invocations on an embedding model (tei_api.cpp hands them over).
  void default_route(std::string_view body, time_point start, const reply_fn& reply) {
    json req;
    if (auto err = parse_body(body, req)) return fail(reply, *err);
    const auto in = req.is_object() ? req.find("inputs") : req.end();
    if (in != req.end() && in->is_object()) return similarity(req, start, reply);
    embed(body, start, embed_output::pooled, reply);
  }

 private:
  void fail(const reply_fn& reply, const api_error& e) { reply(svc_.inference_error(e.status, e.type, e.message)); }

  /// Counts the request, answers a decoder server's 404, then runs `f`.
  template <class F>
  void counted(const route_call& c, F f) {
    metrics_.request_count.fetch_add(1, std::memory_order_relaxed);
    if (auto e = svc_.need_encoder()) return fail(c.reply, *e);
    f(steady::now());
  }

  /// TEI's 424 when the model is not an embedding model (counted as te_request_failure model_type).
  std::optional<api_error> need_embedding() const {
    if (info_.task == "embedding") return std::nullopt;
    metrics_.tei.request_failure.add("model_type");
    return api_error{424, std::string(error_kind::backend), "Model is not an embedding model"};
  }

  void embed(std::string_view body, time_point start, embed_output output, const reply_fn& reply) {
    json req;
    if (auto err = parse_body(body, req)) return fail(reply, *err);
    if (auto e = need_embedding()) return fail(reply, *e);
    static const std::set<std::string, std::less<>> pooled_fields = {
        "inputs", "truncate", "truncation_direction", "prompt_name", "normalize", "dimensions"};
    static const std::set<std::string, std::less<>> all_fields = {"inputs", "truncate", "truncation_direction",
                                                                  "prompt_name"};
    const bool pooled = output == embed_output::pooled;
    if (auto e = check_fields(req, pooled ? pooled_fields : all_fields, pooled ? "/embed" : "/embed_all"))
      return fail(reply, *e);
    if (!req.contains("inputs")) return fail(reply, validation("missing field \"inputs\""));
    tei_job job;
    job.start = start;
    job.every_token = !pooled;
    if (auto e = read_input(req["inputs"], "inputs", job.inputs, job.batch)) return fail(reply, *e);
    if (auto e = read_truncation(req, cfg_.auto_truncate, job)) return fail(reply, *e);
    if (auto e = apply_prompt(req, info_, job.inputs)) return fail(reply, *e);
    embed_fields f;
    if (const auto it = req.find("normalize"); it != req.end()) {
      if (!it->is_boolean()) return fail(reply, validation("\"normalize\" must be true or false; got " + std::string(json_kind(*it))));
      f.normalize = it->get<bool>();
    }
    if (auto e = read_dimensions(req, info_.hidden_size, f)) return fail(reply, *e);
    const auto width = static_cast<size_t>(info_.hidden_size);
    job.answer = [f, pooled, width](std::vector<sequence_outcome>& outs, json& body, size_t) -> std::optional<api_error> {
      body = json::array();
      for (auto& o : outs) {
        if (auto e = check_finite(o.logits)) return e;
        if (pooled) {
          body.push_back(finish_vector(std::move(o.logits), f));
          continue;
        }
        json rows = json::array();
        for (size_t r = 0; r + width <= o.logits.size(); r += width)
          rows.push_back(std::vector<float>(o.logits.begin() + static_cast<std::ptrdiff_t>(r),
                                            o.logits.begin() + static_cast<std::ptrdiff_t>(r + width)));
        body.push_back(std::move(rows));
      }
      return std::nullopt;
    };
    encoder_infer(*this, std::move(job), reply);
  }

  void embed_sparse(const reply_fn& reply) {
    if (auto e = need_embedding()) return fail(reply, *e);
    metrics_.tei.request_failure.add("model_type");
    fail(reply, {424, std::string(error_kind::backend),
                 "/embed_sparse needs a SPLADE model (a masked-LM head and splade pooling); " + info_.model_id +
                     " is an embedding model with " + info_.pooling + " pooling and no SPLADE head; use /embed"});
  }

  /// TEI's /similarity and Hugging Face's sentence-similarity on POST /: the cosine of the source
  /// sentence's normalized vector with each sentence's.
  void similarity(const json& req, time_point start, const reply_fn& reply) {
    if (auto e = need_embedding()) return fail(reply, *e);
    if (auto e = check_fields(req, {"inputs", "parameters"}, "a similarity request")) return fail(reply, *e);
    const auto in = req.find("inputs");
    if (in == req.end() || !in->is_object())
      return fail(reply, validation("\"inputs\" must be an object {\"source_sentence\": ..., \"sentences\": [...]}"));
    if (auto e = check_fields(*in, {"source_sentence", "sentences"}, "\"inputs\"")) return fail(reply, *e);
    const auto source = in->find("source_sentence");
    const auto sentences = in->find("sentences");
    if (source == in->end() || !source->is_string()) return fail(reply, validation("\"source_sentence\" must be a string"));
    if (sentences == in->end() || !sentences->is_array() ||
        !std::all_of(sentences->begin(), sentences->end(), [](const json& s) { return s.is_string(); }))
      return fail(reply, validation("\"sentences\" must be a list of strings"));
    if (sentences->empty()) return fail(reply, {400, std::string(error_kind::empty), "`sentences` cannot be empty"});
    tei_job job;
    job.start = start;
    job.batch = true;
    job.inputs.push_back({source->get<std::string>()});
    for (const auto& s : *sentences) job.inputs.push_back({s.get<std::string>()});
    json params = json::object();
    if (const auto p = req.find("parameters"); p != req.end() && !p->is_null()) params = *p;
    if (auto e = check_fields(params, {"truncate", "truncation_direction", "prompt_name"}, "\"parameters\""))
      return fail(reply, *e);
    if (auto e = read_truncation(params, cfg_.auto_truncate, job)) return fail(reply, *e);
    if (auto e = apply_prompt(params, info_, job.inputs)) return fail(reply, *e);
    job.answer = [](std::vector<sequence_outcome>& outs, json& body, size_t) -> std::optional<api_error> {
      std::vector<std::vector<float>> v;
      for (auto& o : outs) {
        if (auto e = check_finite(o.logits)) return e;
        v.push_back(finish_vector(std::move(o.logits), {}));
      }
      body = json::array();
      for (size_t i = 1; i < v.size(); ++i) {
        double dot = 0;
        for (size_t j = 0; j < v[0].size(); ++j) dot += static_cast<double>(v[0][j]) * v[i][j];
        body.push_back(static_cast<float>(dot));
      }
      return std::nullopt;
    };
    encoder_infer(*this, std::move(job), reply);
  }

  /// TEI's OpenAI errors: {"message", "code", "type"} instead of {"error", "error_type"}.
  static reply_fn openai_reply(const reply_fn& reply) {
    return [reply](http_reply r) {
      if (r.status != 200 && !r.stream) {
        json e = json::parse(r.body, nullptr, false);
        if (e.is_object() && e.contains("error") && e.contains("error_type"))
          r.body = to_text(json{{"message", e["error"]}, {"code", r.status}, {"type", e["error_type"]}});
      }
      reply(std::move(r));
    };
  }

  void openai_embeddings(std::string_view body, time_point start, const reply_fn& reply) {
    if (auto e = svc_.need_encoder()) return fail(reply, *e);
    json req;
    if (auto err = parse_body(body, req)) return fail(reply, *err);
    if (auto e = need_embedding()) return fail(reply, *e);
    if (auto e = check_fields(req, {"input", "model", "user", "encoding_format", "dimensions"}, "/v1/embeddings"))
      return fail(reply, *e);
    for (const char* name : {"model", "user"})
      if (const auto it = req.find(name); it != req.end() && !it->is_null() && !it->is_string())
        return fail(reply, validation("\"" + std::string(name) + "\" must be a string or null"));
    if (!req.contains("input")) return fail(reply, validation("missing field \"input\""));
    bool base64 = false;
    if (const auto it = req.find("encoding_format"); it != req.end() && !it->is_null()) {
      if (*it == "base64") base64 = true;
      else if (*it != "float") return fail(reply, validation("\"encoding_format\" must be \"float\" or \"base64\""));
    }
    tei_job job;
    job.start = start;
    job.truncate = cfg_.auto_truncate;
    if (auto e = read_input(req["input"], "input", job.inputs, job.batch)) return fail(reply, *e);
    if (auto e = apply_prompt(json::object(), info_, job.inputs)) return fail(reply, *e);
    embed_fields f;  // OpenAI's vectors are unit length, as TEI's
    if (auto e = read_dimensions(req, info_.hidden_size, f)) return fail(reply, *e);
    job.answer = [f, base64, model = info_.model_id](std::vector<sequence_outcome>& outs, json& body,
                                                      size_t tokens) -> std::optional<api_error> {
      json data = json::array();
      for (size_t i = 0; i < outs.size(); ++i) {
        if (auto e = check_finite(outs[i].logits)) return e;
        std::vector<float> v = finish_vector(std::move(outs[i].logits), f);
        data.push_back({{"object", "embedding"}, {"embedding", base64 ? json(base64_floats(v)) : json(v)}, {"index", i}});
      }
      body = {{"object", "list"},
              {"data", std::move(data)},
              {"model", model},
              {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
      return std::nullopt;
    };
    encoder_infer(*this, std::move(job), reply);
  }
};

void embed_default_route(service& svc, std::string_view body, time_point start, const reply_fn& reply) {
  embed_api(svc).default_route(body, start, reply);
}

std::unique_ptr<api> make_embed_api(service& svc) { return std::make_unique<embed_api>(svc); }

}  // namespace tessera::serving
