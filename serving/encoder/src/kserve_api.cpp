// The KServe v2 / Open Inference Protocol dialect (kserve docs/predict-api/v2, the open-inference-
// protocol REST specification), with Triton's binary tensor data extension: tensors may follow
// the JSON object in the body, sized by "binary_data_size", the JSON's own length given by the
// Inference-Header-Content-Length header; outputs come back the same way when asked.
#include <algorithm>
#include <cstring>
#include <optional>

#include "tessera/models/embedding.hpp"
#include "tessera/serving/api.hpp"
#include "tessera/serving/utf8.hpp"

namespace tessera::serving {

using namespace detail;

namespace {

constexpr std::string_view model_version = "1";
constexpr std::string_view binary_extension = "binary_tensor_data";

/// One input tensor, decoded from JSON "data" or from the binary part of the body.
struct tensor {
  std::string name, datatype;
  std::vector<int64_t> shape;
  int64_t count = 0;                ///< elements (the product of shape)
  std::vector<std::string> bytes;   ///< BYTES elements
  std::vector<int64_t> ints;        ///< INT32 / INT64 elements
};

/// The binary part of a request, consumed input by input in the order the JSON lists them.
struct binary_reader {
  std::string_view data;
  size_t pos = 0;
  std::optional<std::string_view> take(size_t n) {
    if (data.size() - pos < n) return std::nullopt;
    auto out = data.substr(pos, n);
    pos += n;
    return out;
  }
};

uint32_t load_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // the protocol is little-endian, as is every machine tessera runs on
}

void flatten(const json& j, std::vector<const json*>& out) {
  if (j.is_array()) {
    for (const auto& e : j) flatten(e, out);
  } else {
    out.push_back(&j);
  }
}

/// Decodes one entry of "inputs" into `t`. The error message names the input.
std::optional<std::string> decode_input(const json& in, binary_reader& binary, tensor& t) {
  if (!in.is_object()) return std::string("every input must be an object {\"name\", \"shape\", \"datatype\", \"data\"}");
  for (const char* field : {"name", "datatype"})
    if (!in.contains(field) || !in[field].is_string()) return "every input needs a string \"" + std::string(field) + "\"";
  t.name = in["name"].get<std::string>();
  t.datatype = in["datatype"].get<std::string>();
  const std::string who = "input '" + printable(t.name, 60) + "'";
  for (const auto& [key, value] : in.items())
    if (key != "name" && key != "datatype" && key != "shape" && key != "data" && key != "parameters")
      return who + ": unknown field \"" + printable(key, 60) + "\"";
  if (!in.contains("shape") || !in["shape"].is_array()) return who + ": \"shape\" must be a list of integers";
  t.count = 1;
  for (const auto& d : in["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) return who + ": \"shape\" must be a list of integers >= 0";
    t.shape.push_back(d.get<int64_t>());
    t.count = t.count < 0 ? -1 : checked_product(t.count, d.get<int64_t>());
  }
  if (t.count < 0 || t.count > (int64_t{1} << 32)) return who + ": shape too large";
  const bool is_bytes = t.datatype == "BYTES", is_int32 = t.datatype == "INT32", is_int64 = t.datatype == "INT64";
  if (!is_bytes && !is_int32 && !is_int64) return who + ": datatype " + printable(t.datatype, 20) + " is not BYTES, INT32 or INT64";
  std::optional<int64_t> binary_size;
  if (in.contains("parameters") && !in["parameters"].is_null()) {
    const json& params = in["parameters"];
    if (!params.is_object()) return who + ": \"parameters\" must be an object";
    for (const auto& [key, value] : params.items()) {
      if (key != "binary_data_size") return who + ": unknown parameter \"" + printable(key, 60) + "\"";
      if (!value.is_number_integer() || value.get<int64_t>() < 0)
        return who + ": parameters.binary_data_size must be an integer >= 0";
      binary_size = value.get<int64_t>();
    }
  }
  if (binary_size) {
    if (in.contains("data")) return who + ": give \"data\" or parameters.binary_data_size, not both";
    auto raw = binary.take(static_cast<size_t>(*binary_size));
    if (!raw)
      return who + ": binary_data_size " + std::to_string(*binary_size) + " runs past the end of the body (" +
             std::to_string(binary.data.size() - binary.pos) + " bytes left)";
    if (is_bytes) {
      size_t p = 0;
      while (p < raw->size()) {
        if (raw->size() - p < 4) return who + ": BYTES element cut short (a 4-byte length needs 4 bytes)";
        const uint32_t n = load_u32(raw->data() + p);
        p += 4;
        if (raw->size() - p < n)
          return who + ": BYTES element " + std::to_string(t.bytes.size()) + " of " + std::to_string(n) +
                 " bytes runs past binary_data_size";
        t.bytes.emplace_back(raw->substr(p, n));
        p += n;
      }
      if (static_cast<int64_t>(t.bytes.size()) != t.count)
        return who + ": shape says " + std::to_string(t.count) + " elements, the binary data holds " +
               std::to_string(t.bytes.size());
    } else {
      const int64_t width = is_int32 ? 4 : 8;
      if (static_cast<int64_t>(raw->size()) != checked_product(t.count, width))
        return who + ": shape says " + std::to_string(t.count) + " " + t.datatype + " elements (" +
               std::to_string(t.count * width) + " bytes), binary_data_size is " + std::to_string(raw->size());
      for (int64_t i = 0; i < t.count; ++i) {
        if (is_int32) {
          int32_t v;
          std::memcpy(&v, raw->data() + i * 4, 4);
          t.ints.push_back(v);
        } else {
          int64_t v;
          std::memcpy(&v, raw->data() + i * 8, 8);
          t.ints.push_back(v);
        }
      }
    }
    return std::nullopt;
  }
  if (!in.contains("data")) return who + ": needs \"data\" (or parameters.binary_data_size with binary data)";
  std::vector<const json*> flat;
  flatten(in["data"], flat);
  if (static_cast<int64_t>(flat.size()) != t.count)
    return who + ": shape says " + std::to_string(t.count) + " elements, \"data\" holds " + std::to_string(flat.size());
  for (const json* e : flat) {
    if (is_bytes) {
      if (!e->is_string()) return who + ": BYTES data must be strings";
      t.bytes.push_back(e->get<std::string>());
    } else {
      if (!e->is_number_integer()) return who + ": " + t.datatype + " data must be integers";
      const int64_t v = e->is_number_unsigned() && e->get<uint64_t>() > INT64_MAX ? INT64_MAX : e->get<int64_t>();
      if (is_int32 && (v < INT32_MIN || v > INT32_MAX)) return who + ": " + std::to_string(v) + " is out of INT32 range";
      t.ints.push_back(v);
    }
  }
  return std::nullopt;
}

}  // namespace

/// KServe v2 / Open Inference Protocol under /v2, on the service's encoder backends.
class kserve_api final : public api, private encoder_parts {
 public:
  explicit kserve_api(service& svc) : encoder_parts(svc) {}
  void add_routes(route_table& t) override;

 private:
  void kserve_route(std::string_view method, std::string_view path, std::string_view body,
                    const request_headers& headers, const reply_fn& reply);
  void kserve_infer(std::string_view body, const request_headers& headers, const reply_fn& reply);
  http_reply kserve_model_reply() const;
  /// The one output: "logits", or "embeddings" ([batch, hidden] FP32) for an embedding model.
  std::string output_name() const { return info_.task == "embedding" ? "embeddings" : "logits"; }
};

void kserve_api::kserve_route(std::string_view method, std::string_view path, std::string_view body,
                           const request_headers& headers, const reply_fn& reply) {
  const bool get = method == "GET";
  auto wrong_method = [&](std::string_view allow) { reply(svc_.wrong_method_reply(method, path, allow)); };
  auto not_found = [&] { reply(svc_.error_reply(404, error_kind::not_found, "no route " + printable(path, 100))); };
  if (path == "/v2" || path == "/v2/") {
    if (!get) return wrong_method("GET");
    return reply({200, "application/json",
                  to_text(json{{"name", "tessera"}, {"version", "0.1.0"}, {"extensions", {binary_extension}}})});
  }
  if (path == "/v2/health/live" || path == "/v2/health/ready") {
    if (!get) return wrong_method("GET");
    if (path == "/v2/health/live") return reply({200, "application/json", R"({"live":true})"});
    if (!router_.healthy())
      return reply(svc_.error_reply(503, error_kind::unhealthy, "no healthy backend" + svc_.degraded_detail()));
    return reply({200, "application/json", R"({"ready":true})"});
  }
  if (path.substr(0, 11) != "/v2/models/") return not_found();
  std::string_view rest = path.substr(11);
  const std::string_view name = rest.substr(0, rest.find('/'));
  std::string_view tail = rest.substr(name.size());
  if (name != info_.model_id)
    return reply(svc_.error_reply(404, error_kind::not_found,
                             "model '" + printable(name, 100) + "' not found; this server has '" +
                                 info_.model_id + "'"));
  if (tail.substr(0, 10) == "/versions/") {
    const std::string_view after = tail.substr(10);
    const std::string_view version = after.substr(0, after.find('/'));
    if (version != model_version)
      return reply(svc_.error_reply(404, error_kind::not_found,
                               "model '" + info_.model_id + "' has no version '" + printable(version, 40) +
                                   "'; its only version is " + std::string(model_version)));
    tail = after.substr(version.size());
  }
  if (tail == "/infer") {
    if (method != "POST") return wrong_method("POST");
    return kserve_infer(body, headers, reply);
  }
  if (tail == "/ready") {
    if (!get) return wrong_method("GET");
    const bool ready = router_.healthy();
    json out{{"name", info_.model_id}, {"ready", ready}};
    if (!ready) out["error"] = "no healthy backend" + svc_.degraded_detail();
    return reply({ready ? 200u : 503u, "application/json", to_text(out)});
  }
  if (!tail.empty()) return not_found();
  if (!get) return wrong_method("GET");
  reply(kserve_model_reply());
}

http_reply kserve_api::kserve_model_reply() const {
  const bool embedding = info_.task == "embedding";
  const int32_t labels = embedding ? 0 : router_.num_labels();
  json label_names = json::array();
  for (int32_t i = 0; i < labels; ++i) label_names.push_back(svc_.label(i));
  auto tensor_meta = [](std::string_view name, std::string_view type, json shape) {
    return json{{"name", name}, {"datatype", type}, {"shape", std::move(shape)}};
  };
  // Two ways in: text (one BYTES input, or two for pairs), or token ids with optional token
  // types and mask. "parameters" says which combinations are valid (metadata tensors cannot).
  json out{{"name", info_.model_id},
           {"versions", {model_version}},
           {"platform", "tessera"},
           {"inputs", json::array({tensor_meta("text", "BYTES", {-1}), tensor_meta("text_pair", "BYTES", {-1}),
                                   tensor_meta("input_ids", "INT64", {-1, -1}),
                                   tensor_meta("token_type_ids", "INT64", {-1, -1}),
                                   tensor_meta("attention_mask", "INT64", {-1, -1})})},
           {"outputs", json::array({tensor_meta(output_name(), "FP32", {-1, embedding ? info_.hidden_size : labels})})},
           {"parameters",
            {{"input_forms",
              {"text [N] (BYTES, UTF-8): N texts",
               "text [N] + text_pair [N]: N pairs; or text [N, 2]: N pairs",
               "input_ids [N, L] (INT32/INT64) + optional token_type_ids [N, L] (0 or 1) + optional "
               "attention_mask [N, L] (0 drops the position)"}},
             {"labels", label_names},
             {"max_input_length", info_.max_input_length},
             {"max_batch_size", cfg_.max_client_batch_size},
             {"request_parameters", {"truncate", "binary_data_output"}}}}};
  return {200, "application/json", to_text(out)};
}

void kserve_api::kserve_infer(std::string_view body, const request_headers& headers, const reply_fn& reply) {
  const time_point start = steady::now();
  metrics_.request_count.fetch_add(1, std::memory_order_relaxed);
  auto fail = [&](unsigned status, std::string_view type, std::string_view message) {
    reply(svc_.inference_error(status, type, message));
  };
  auto invalid = [&](std::string_view message) { fail(400, error_kind::validation, message); };
  auto reject = [&](const api_error& e) { fail(e.status, e.type, e.message); };
  if (auto e = svc_.need_encoder()) return reject(*e);
  // The binary tensor data extension: the JSON is the first Inference-Header-Content-Length bytes.
  std::string_view json_part = body;
  binary_reader binary;
  if (!headers.inference_header_content_length.empty()) {
    const std::string_view h = headers.inference_header_content_length;
    size_t n = 0;
    bool ok = h.size() <= 12 && std::all_of(h.begin(), h.end(), [](char c) { return c >= '0' && c <= '9'; });
    for (char c : h) n = n * 10 + static_cast<size_t>(c - '0');
    if (!ok || n > body.size())
      return fail(400, error_kind::bad_request,
                  "Inference-Header-Content-Length must be the byte length of the JSON part, at most the "
                  "body's " + std::to_string(body.size()) + " bytes");
    json_part = body.substr(0, n);
    binary.data = body.substr(n);
  }
  json req;
  if (auto err = parse_body(json_part, req)) return fail(err->status, err->type, err->message);
  if (!req.is_object()) return invalid("an inference request is a JSON object {\"inputs\": [...]}");
  for (const auto& [key, value] : req.items())
    if (key != "id" && key != "inputs" && key != "outputs" && key != "parameters" && key != "model_name" &&
        key != "model_version")
      return invalid("unknown field \"" + printable(key, 60) + "\" in the inference request");
  if (req.contains("id") && !req["id"].is_string()) return invalid("\"id\" must be a string");
  if (!req.contains("inputs") || !req["inputs"].is_array() || req["inputs"].empty())
    return invalid("a KServe v2 infer request needs \"inputs\": [{\"name\", \"shape\", \"datatype\", \"data\"}, ...]");
  bool truncate = cfg_.auto_truncate, binary_output = false;
  if (req.contains("parameters") && !req["parameters"].is_null()) {
    const json& params = req["parameters"];
    if (!params.is_object()) return invalid("\"parameters\" must be an object");
    for (const auto& [key, value] : params.items()) {
      if (value.is_null()) continue;
      if (key != "truncate" && key != "binary_data_output")
        return invalid("unknown request parameter \"" + printable(key, 60) + "\"; this server takes truncate and binary_data_output");
      if (!value.is_boolean()) return invalid("parameters." + key + " must be true or false");
      (key == "truncate" ? truncate : binary_output) = value.get<bool>();
    }
  }
  // Outputs: one exists ("logits", or an embedding model's "embeddings"); it may ask for binary data.
  const std::string out_name = output_name();
  bool logits_wanted = true, logits_binary = binary_output;
  if (req.contains("outputs") && !req["outputs"].is_null()) {
    const json& outs = req["outputs"];
    if (!outs.is_array()) return invalid("\"outputs\" must be a list of {\"name\"}");
    logits_wanted = false;
    for (const auto& o : outs) {
      if (!o.is_object() || !o.contains("name") || !o["name"].is_string())
        return invalid("every requested output needs a string \"name\"");
      if (o["name"] != out_name)
        return invalid("unknown output '" + printable(o["name"].get<std::string>(), 60) + "'; this model has '" + out_name + "'");
      if (logits_wanted) return invalid("output '" + out_name + "' requested twice");
      logits_wanted = true;
      if (o.contains("parameters") && !o["parameters"].is_null()) {
        if (!o["parameters"].is_object()) return invalid("an output's \"parameters\" must be an object");
        for (const auto& [key, value] : o["parameters"].items()) {
          if (key == "binary_data" && (value.is_boolean() || value.is_null())) {
            if (value.is_boolean()) logits_binary = value.get<bool>();
          } else {
            return invalid("output '" + out_name + "': parameters take binary_data (true or false) only");
          }
        }
      }
    }
  }
  // Inputs, matched by name.
  std::vector<tensor> tensors(req["inputs"].size());
  const tensor *text = nullptr, *text_pair = nullptr, *ids = nullptr, *types = nullptr, *mask = nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (auto err = decode_input(req["inputs"][i], binary, tensors[i])) return invalid(*err);
    const tensor& t = tensors[i];
    const tensor** slot = t.name == "text"             ? &text
                          : t.name == "text_pair"      ? &text_pair
                          : t.name == "input_ids"      ? &ids
                          : t.name == "token_type_ids" ? &types
                          : t.name == "attention_mask" ? &mask
                                                       : nullptr;
    if (!slot)
      return invalid("unknown input '" + printable(t.name, 60) +
                     "'; this model takes text (+ text_pair) as BYTES, or input_ids (+ token_type_ids, "
                     "attention_mask) as INT32/INT64 (see GET /v2/models/" + info_.model_id + ")");
    if (*slot) return invalid("input '" + t.name + "' given twice");
    const bool wants_bytes = slot == &text || slot == &text_pair;
    if (wants_bytes != (t.datatype == "BYTES"))
      return invalid("input '" + t.name + "' must be " + (wants_bytes ? "BYTES" : "INT32 or INT64") + ", not " + t.datatype);
    *slot = &t;
  }
  if (binary.pos != binary.data.size())
    return invalid(std::to_string(binary.data.size() - binary.pos) +
                   " bytes of binary data follow the JSON but no input's binary_data_size covers them");
  if (text && ids) return invalid("give either text or input_ids, not both");
  if (!text && !ids) return invalid("no 'text' and no 'input_ids' input");
  if (text_pair && !text) return invalid("'text_pair' needs a 'text' input");
  if ((types || mask) && !ids) return invalid("token_type_ids and attention_mask go with input_ids");

  const int32_t max_len = info_.max_input_length;
  std::vector<backends::sequence_input> seqs;
  if (text) {
    // [N] or [N, 1] texts, [N, 2] pairs, or [N] texts with text_pair [N].
    const auto& s = text->shape;
    const bool pairs_in_text = s.size() == 2 && s[1] == 2;
    if (!(s.size() == 1 || (s.size() == 2 && (s[1] == 1 || s[1] == 2))))
      return invalid("input 'text' needs shape [N], [N, 1], or [N, 2] for pairs");
    const int64_t n = s[0];
    if (text_pair) {
      if (pairs_in_text) return invalid("'text' of shape [N, 2] holds the pairs already; drop 'text_pair'");
      if (text_pair->count != n) return invalid("'text_pair' needs as many elements as 'text' (" + std::to_string(n) + ")");
    }
    if (n == 0) return invalid("input 'text' holds no texts");
    if (auto e = svc_.check_batch_size(static_cast<size_t>(n))) return reject(*e);
    for (int64_t i = 0; i < n; ++i) {
      const std::string& a = text->bytes[static_cast<size_t>(pairs_in_text ? 2 * i : i)];
      const std::string* b = pairs_in_text ? &text->bytes[static_cast<size_t>(2 * i + 1)]
                             : text_pair   ? &text_pair->bytes[static_cast<size_t>(i)]
                                           : nullptr;
      for (const std::string* t : {&a, b}) {
        if (!t) continue;
        if (auto bad = find_invalid_utf8(*t))
          return fail(400, error_kind::bad_request, bad->describe("text element " + std::to_string(i)));
      }
      if (a.empty() && (!b || b->empty())) return invalid("text element " + std::to_string(i) + " is empty");
      backends::sequence_input seq;
      const std::string_view bv = b ? std::string_view(*b) : std::string_view();
      if (auto e = svc_.encode_text(a, b ? &bv : nullptr, truncate, truncation_side::right, 400, seq)) return reject(*e);
      seqs.push_back(std::move(seq));
    }
  } else {
    const auto& s = ids->shape;
    if (s.size() != 2 || s[0] < 1 || s[1] < 1) return invalid("input_ids needs shape [batch, length], both >= 1");
    if (auto e = svc_.check_batch_size(static_cast<size_t>(s[0]))) return reject(*e);
    for (const tensor* t : {types, mask})
      if (t && t->shape != s) return invalid("input '" + t->name + "' needs the shape of input_ids");
    for (int64_t i = 0; i < s[0]; ++i) {
      backends::sequence_input seq;
      for (int64_t j = 0; j < s[1]; ++j) {
        const size_t k = static_cast<size_t>(i * s[1] + j);
        if (mask && mask->ints[k] == 0) continue;
        const int64_t id = ids->ints[k];
        if (id < 0 || id > INT32_MAX || (info_.vocab_size > 0 && id >= info_.vocab_size))
          return invalid("token id " + std::to_string(id) + " out of range [0, " + std::to_string(info_.vocab_size) + ")");
        const int64_t type = types ? types->ints[k] : 0;
        if (type < 0 || type > 1) return invalid("token type id " + std::to_string(type) + " out of range (0 or 1)");
        seq.token_ids.push_back(static_cast<int32_t>(id));
        seq.token_type_ids.push_back(static_cast<int32_t>(type));
      }
      if (seq.token_ids.empty()) return invalid("sequence " + std::to_string(i) + " has no tokens");
      if (truncate) truncate_sequence(seq, max_len, tokenizer_->sep_id());
      seqs.push_back(std::move(seq));
    }
  }
  for (const auto& s : seqs)
    if (auto e = svc_.check_length(s.token_ids.size(), "inputs", "set parameters.truncate to true")) return reject(*e);
  if (auto e = svc_.check_healthy()) return reject(*e);

  auto call = call_state::make(seqs.size(), reply, &svc_, start);
  json id = req.contains("id") ? req["id"] : json();
  // An embedding model's vectors as sentence-transformers gives them: unit length when the folder
  // has a Normalize module.
  const bool normalize = info_.task == "embedding" && info_.normalize;
  call->build = [model = info_.model_id, id, logits_wanted, logits_binary, out_name,
                 normalize](std::vector<sequence_outcome>& outs) {
    const size_t labels = outs.empty() ? 0 : outs[0].logits.size();
    std::vector<float> data;
    data.reserve(outs.size() * labels);
    for (auto& o : outs) data.insert(data.end(), o.logits.begin(), o.logits.end());
    if (normalize) models::l2_normalize(data.data(), static_cast<int64_t>(outs.size()), static_cast<int64_t>(labels));
    json out{{"model_name", model}, {"model_version", model_version}, {"outputs", json::array()}};
    if (!id.is_null()) out["id"] = id;
    std::string binary_part;
    if (logits_wanted) {
      json o{{"name", out_name}, {"datatype", "FP32"}, {"shape", {outs.size(), labels}}};
      if (logits_binary) {
        binary_part.assign(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
        o["parameters"] = {{"binary_data_size", binary_part.size()}};
      } else {
        o["data"] = data;
      }
      out["outputs"].push_back(std::move(o));
    }
    std::string header = to_text(out);
    if (!logits_binary || !logits_wanted) return http_reply{200, "application/json", std::move(header)};
    http_reply r{200, "application/octet-stream", header + binary_part};
    r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(header.size()));
    return r;
  };
  svc_.submit_all(call, std::move(seqs));
}

void kserve_api::add_routes(route_table& t) {
  t.add_prefix("/v2", [this](const route_call& c) { kserve_route(c.method, c.path, c.body, c.headers, c.reply); });
}

std::unique_ptr<api> make_kserve_api(service& svc) { return std::make_unique<kserve_api>(svc); }

}  // namespace tessera::serving
