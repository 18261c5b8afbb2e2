// The LLM step model against published figures (all held out).
#include "tessera/timing/llm_validation.hpp"
#include "tessera/common/text.hpp"
#include "anchor_fields.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tessera/timing/llm_system.hpp"

#ifndef TESSERA_TIMING_DEFAULT_LLM_ANCHORS_FILE
#define TESSERA_TIMING_DEFAULT_LLM_ANCHORS_FILE "timing/anchors/llm_inference.json"
#endif

namespace tessera::timing {

std::filesystem::path llm_anchors_path() {
  if (const char* env = std::getenv("TESSERA_LLM_ANCHORS"); env != nullptr && *env != '\0') return env;
  return TESSERA_TIMING_DEFAULT_LLM_ANCHORS_FILE;
}

result<std::vector<llm_anchor>> parse_llm_anchors(std::string_view json_text, const std::string& origin) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    return status::invalid(origin + ": not valid JSON: " + e.what());
  }
  auto rows = root.find("rows");
  if (rows == root.end() || !rows->is_array()) return status::invalid(origin + ": field 'rows' must be an array");
  std::vector<llm_anchor> out;
  for (size_t i = 0; i < rows->size(); ++i) {
    const auto& r = (*rows)[i];
    const std::string where = origin + ": row " + std::to_string(i);
    if (!r.is_object()) return status::invalid(where + " is not an object");
    llm_anchor a;
    auto num = [&](const char* k, int64_t& dst, bool required) -> status {
      auto it = r.find(k);
      if (it == r.end()) return required ? status::invalid(where + ": field '" + k + "' is missing") : status{};
      if (!it->is_number_integer() || it->get<int64_t>() < 0)
        return status::invalid(where + ": field '" + k + "' must be a non-negative integer");
      dst = it->get<int64_t>();
      return {};
    };
    TESSERA_RETURN_IF_ERROR(detail::read_text_fields(
        r, where, {{"id", &a.id}, {"device", &a.device}, {"system", &a.system}, {"model", &a.model}, {"kind", &a.kind},
                   {"unit", &a.unit}, {"split", &a.split}, {"conditions", &a.conditions},
                   {"source_title", &a.source_title}, {"source_url", &a.source_url}, {"source_date", &a.source_date}}));
    TESSERA_RETURN_IF_ERROR(num("batch", a.batch, true));
    TESSERA_RETURN_IF_ERROR(num("input", a.input, false));
    TESSERA_RETURN_IF_ERROR(num("output", a.output, false));
    TESSERA_RETURN_IF_ERROR(num("context", a.context, false));
    auto v = r.find("value");
    if (v == r.end() || !v->is_number() || !(v->get<double>() > 0))
      return status::invalid(where + " (" + a.id + "): field 'value' is missing or not a positive number");
    a.value = v->get<double>();
    if (a.split != "held_out")
      return status::invalid(where + " (" + a.id + "): split is '" + a.split +
                             "'; every LLM row is held out (no constant is fitted on LLM figures)");
    if (a.kind != "static_throughput" && a.kind != "first_token_ms" && a.kind != "decode_tokens_per_s" &&
        a.kind != "decode_ms_per_token")
      return status::invalid(where + " (" + a.id + "): kind '" + a.kind +
                             "'; use static_throughput, first_token_ms, decode_tokens_per_s or decode_ms_per_token");
    if (auto p = r.find("precision"); p != r.end()) {
      if (!p->is_string() || (p->get<std::string>() != "fp16" && p->get<std::string>() != "fp8"))
        return status::invalid(where + " (" + a.id + "): field 'precision' must be \"fp16\" or \"fp8\"");
      a.precision = p->get<std::string>();
    }
    if (a.batch < 1) return status::invalid(where + " (" + a.id + "): batch must be >= 1");
    out.push_back(std::move(a));
  }
  return out;
}

result<std::vector<llm_anchor>> load_llm_anchors(const std::filesystem::path& path) {
  const auto text = read_file(path);
  if (!text) return status::not_found("LLM anchors file " + path.string() + " cannot be opened");
  return parse_llm_anchors(*text, path.string());
}

result<double> model_llm_anchor(const llm_anchor& a) {
  auto shape = resolve_decoder_shape(a.model);
  if (!shape) return shape.error().with_context("anchor '" + a.id + "'");
  auto d = decoder_dims_of(*shape);
  if (!d) return d.error();
  if (a.precision == "fp8") d->element_bytes = 1;  // FP8 weights and KV cache
  auto sys = make_llm_system(a.system, *d);
  if (!sys) return sys.error().with_context("anchor '" + a.id + "'");
  if (sys->pipeline_stages > 1)
    return status::invalid("anchor '" + a.id + "': system " + a.system +
                           ": the anchors model tensor parallelism only (no published pipeline-parallel row is held)");
  if (a.precision == "fp8") {
    if (sys->kind != "gpu") return status::invalid("anchor '" + a.id + "': fp8 is modelled for GPU systems only");
    sys->flops_per_s *= 2;  // FP8 dense tensor peak = 2x FP16 dense (H100 datasheet: 1,979 vs 989.4 TFLOP/s)
  }
  if (a.kind == "decode_ms_per_token") {
    llm_step_batch b;
    b.decode_contexts.assign(size_t(a.batch), a.context);
    auto t = model_llm_step(*sys, *d, b);
    if (!t) return t.error();
    return t->seconds * 1e3;
  }
  if (a.kind == "first_token_ms") {
    llm_step_batch b;
    for (int64_t i = 0; i < a.batch; ++i) b.prefills.push_back({a.input, 0, true});
    auto t = model_llm_step(*sys, *d, b);
    if (!t) return t.error();
    return t->seconds * 1e3;
  }
  if (a.kind == "decode_tokens_per_s") {
    llm_step_batch b;
    b.decode_contexts.assign(size_t(a.batch), a.context);
    auto t = model_llm_step(*sys, *d, b);
    if (!t) return t.error();
    return 1.0 / t->seconds;
  }
  // static_throughput: prefill of the whole batch, then output-1 decode steps over the batch.
  llm_step_batch pre;
  for (int64_t i = 0; i < a.batch; ++i) pre.prefills.push_back({a.input, 0, true});
  auto t = model_llm_step(*sys, *d, pre);
  if (!t) return t.error();
  double total = t->seconds;
  for (int64_t k = 1; k < a.output; ++k) {
    llm_step_batch dec;
    dec.decode_contexts.assign(size_t(a.batch), a.input + k - 1);
    auto s = model_llm_step(*sys, *d, dec);
    if (!s) return s.error();
    total += s->seconds;
  }
  // TensorRT-LLM's multi-GPU tables give output tokens per second per GPU.
  const double per = a.unit == "out tok/s/GPU" ? double(sys->chips) : 1.0;
  return double(a.batch * a.output) / total / per;
}

result<llm_validation_report> validate_llm_timing(const std::vector<llm_anchor>& anchors) {
  llm_validation_report rep;
  double sum = 0;
  for (const auto& a : anchors) {
    auto m = model_llm_anchor(a);
    if (!m) return m.error();
    rep.rows.push_back({a, *m});
    const double e = std::abs(rep.rows.back().error_percent());
    sum += e;
    rep.max_abs_error_percent = std::max(rep.max_abs_error_percent, e);
  }
  rep.mean_abs_error_percent = anchors.empty() ? 0 : sum / double(anchors.size());
  return rep;
}

result<llm_validation_report> validate_llm_timing() {
  auto a = load_llm_anchors();
  if (!a) return a.error();
  return validate_llm_timing(*a);
}

std::string llm_anchor_family(const llm_anchor& a) {
  if (a.system.rfind("ipu", 0) == 0) return "IPU";
  // Tensor-parallel rows (issue 28) are their own family: the multi-GPU held-out error.
  const bool tp = a.system.find(":tp=") != std::string::npos && a.system.find(":tp=1") == std::string::npos;
  if (a.system.rfind("h100", 0) == 0) return tp ? "H100 multi-GPU" : "H100";
  return tp ? "A100 multi-GPU" : "A100";
}

std::string llm_validation_markdown(const llm_validation_report& r) {
  std::string s =
      "## LLM rows, all held out (no constant was fitted on these; anchors: " + llm_anchors_path().string() +
      ")\n\n| case | system | conditions | unit | model | published | error % | source |\n|---|---|---|---|---|---|---|---|\n";
  char buf[2048];
  std::map<std::string, std::pair<double, int>> family;  // sum |error|, rows
  for (const auto& row : r.rows) {
    const auto& a = row.anchor;
    std::string cond = a.kind == "static_throughput"
                           ? "batch " + std::to_string(a.batch) + ", in " + std::to_string(a.input) + ", out " +
                                 std::to_string(a.output)
                       : a.kind == "first_token_ms" ? "batch " + std::to_string(a.batch) + ", in " + std::to_string(a.input)
                                                    : "batch " + std::to_string(a.batch) + ", context " +
                                                          std::to_string(a.context);
    if (a.precision != "fp16") cond += ", " + a.precision;
    std::string url = a.source_url.substr(0, a.source_url.find(' '));
    std::snprintf(buf, sizeof buf, "| %s | %s | %s | %s | %.4g | %.4g | %+.1f | %s |\n", a.id.c_str(), a.system.c_str(),
                  cond.c_str(), a.unit.c_str(), row.model, a.value, row.error_percent(), url.c_str());
    s += buf;
    auto& f = family[llm_anchor_family(a)];
    f.first += std::abs(row.error_percent());
    f.second += 1;
  }
  s += "\n";
  for (const auto& [name, f] : family) {
    std::snprintf(buf, sizeof buf, "%s: %d held-out rows, mean |error| %.1f%%\n", name.c_str(), f.second,
                  f.first / f.second);
    s += buf;
  }
  {
    double sum = 0;
    int n = 0;
    for (const auto& [name, f] : family)
      if (name.ends_with("multi-GPU")) sum += f.first, n += f.second;
    if (n > 0) {
      std::snprintf(buf, sizeof buf, "multi-GPU (tensor parallel): %d held-out rows, mean |error| %.1f%%\n", n, sum / n);
      s += buf;
    }
  }
  std::snprintf(buf, sizeof buf, "all: %zu held-out rows: mean |error| %.1f%%, max %.1f%%\n", r.rows.size(),
                r.mean_abs_error_percent, r.max_abs_error_percent);
  s += buf;
  return s;
}

}  // namespace tessera::timing
