// sentence-transformers folders (modules.json, Pooling, Normalize, prompts), pooling and the
// embedding forward.
#include "tessera/models/embedding.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/common/check.hpp"
#include "tessera/common/text.hpp"
#include "tessera/models/batch.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/model.hpp"
#include "forward_internal.hpp"

namespace tessera::models {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::string_view task_name(encoder_task t) {
  switch (t) {
    case encoder_task::classifier: return "classifier";
    case encoder_task::embedding: return "embedding";
    case encoder_task::reranker: return "reranker";
  }
  return "classifier";
}

namespace {

constexpr pooling_mode all_modes[] = {pooling_mode::cls, pooling_mode::mean, pooling_mode::max,
                                      pooling_mode::mean_sqrt_len, pooling_mode::lasttoken};

// 1_Pooling/config.json's key of each mode.
std::string_view pooling_key(pooling_mode p) {
  switch (p) {
    case pooling_mode::cls: return "pooling_mode_cls_token";
    case pooling_mode::mean: return "pooling_mode_mean_tokens";
    case pooling_mode::max: return "pooling_mode_max_tokens";
    case pooling_mode::mean_sqrt_len: return "pooling_mode_mean_sqrt_len_tokens";
    case pooling_mode::lasttoken: return "pooling_mode_lasttoken";
  }
  return "";
}

result<json> read_json(const fs::path& p) {
  auto text = read_text_file(p);
  if (!text) return text.error();
  try {
    return json::parse(*text);
  } catch (const json::exception& e) {
    return status::invalid(p.string() + ": not valid JSON: " + e.what());
  }
}

// The pooling mode of a Pooling module's config.json.
result<pooling_mode> read_pooling(const fs::path& path, int hidden_size) {
  auto j = read_json(path);
  if (!j) return j.error();
  if (!j->is_object()) return status::invalid(path.string() + ": expected a JSON object");
  const auto flag = [&](std::string_view key) -> result<bool> {
    auto it = j->find(std::string(key));
    if (it == j->end() || it->is_null()) return false;
    if (!it->is_boolean()) return status::invalid(path.string() + ": \"" + std::string(key) + "\" must be true or false");
    return it->get<bool>();
  };
  if (auto w = flag("pooling_mode_weightedmean_tokens"); !w || *w)
    return w ? status::invalid(path.string() + ": pooling_mode_weightedmean_tokens is not supported (tessera pools "
                               "with cls, mean, max, mean_sqrt_len or lasttoken)")
             : w.error();
  if (auto p = flag("include_prompt"); !p) return p.error();
  if (j->contains("include_prompt") && (*j)["include_prompt"].is_boolean() && !(*j)["include_prompt"].get<bool>())
    return status::invalid(path.string() + ": include_prompt false is not supported (the prompt's tokens are pooled)");
  if (j->contains("word_embedding_dimension")) {
    const auto& d = (*j)["word_embedding_dimension"];
    if (!d.is_number_integer() || d.get<int64_t>() != hidden_size)
      return status::invalid(path.string() + ": word_embedding_dimension " + d.dump() +
                             " disagrees with config.json hidden_size " + std::to_string(hidden_size));
  }
  std::vector<pooling_mode> on;
  for (pooling_mode m : all_modes) {
    auto f = flag(pooling_key(m));
    if (!f) return f.error();
    if (*f) on.push_back(m);
  }
  if (on.size() != 1) {
    std::string names;
    for (pooling_mode m : on) names += (names.empty() ? "" : ", ") + std::string(pooling_key(m));
    return status::invalid(path.string() + ": exactly one pooling mode must be true, got " +
                           (on.empty() ? std::string("none") : names) +
                           " (tessera does not concatenate pooled vectors)");
  }
  return on.front();
}

}  // namespace

std::string_view pooling_name(pooling_mode p) {
  switch (p) {
    case pooling_mode::cls: return "cls";
    case pooling_mode::mean: return "mean";
    case pooling_mode::max: return "max";
    case pooling_mode::mean_sqrt_len: return "mean_sqrt_len";
    case pooling_mode::lasttoken: return "lasttoken";
  }
  return "cls";
}

std::optional<pooling_mode> pooling_from_name(std::string_view name) {
  for (pooling_mode m : all_modes)
    if (pooling_name(m) == name) return m;
  return std::nullopt;
}

result<embedding_config> read_sentence_transformers(const fs::path& dir, int hidden_size) {
  const fs::path modules_path = dir / "modules.json";
  auto modules = read_json(modules_path);
  if (!modules) return modules.error();
  if (!modules->is_array()) return status::invalid(modules_path.string() + ": expected a JSON array of modules");
  embedding_config cfg;
  bool transformer = false, pooling = false;
  for (const auto& m : *modules) {
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
      return status::invalid(modules_path.string() + ": every module needs a \"type\" string");
    const std::string type = m["type"].get<std::string>();
    const std::string path = m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "";
    if (path.find("..") != std::string::npos || (!path.empty() && path.front() == '/'))
      return status::invalid(modules_path.string() + ": module path \"" + path + "\" leaves the model folder");
    const auto is = [&](std::string_view name) {
      return type == "sentence_transformers.models." + std::string(name) || type == std::string(name);
    };
    if (is("Transformer") && !transformer && path.empty()) {
      transformer = true;
    } else if (is("Pooling") && transformer && !pooling) {
      auto p = read_pooling(dir / path / "config.json", hidden_size);
      if (!p) return p.error();
      cfg.pooling = *p;
      pooling = true;
    } else if (is("Normalize") && pooling && !cfg.normalize) {
      cfg.normalize = true;
    } else {
      return status::invalid(modules_path.string() + ": module \"" + type + "\"" +
                             (path.empty() ? "" : " at \"" + path + "\"") +
                             " is not supported here (tessera runs Transformer (the folder itself), Pooling, then "
                             "optionally Normalize)");
    }
  }
  if (!pooling)
    return status::invalid(modules_path.string() + ": no Pooling module (1_Pooling/config.json says how to pool)");

  std::error_code ec;
  const fs::path st_path = dir / "config_sentence_transformers.json";
  if (fs::exists(st_path, ec)) {
    auto j = read_json(st_path);
    if (!j) return j.error();
    if (j->contains("prompts") && !(*j)["prompts"].is_null()) {
      if (!(*j)["prompts"].is_object()) return status::invalid(st_path.string() + ": \"prompts\" must be an object");
      for (const auto& [name, text] : (*j)["prompts"].items()) {
        if (!text.is_string()) return status::invalid(st_path.string() + ": prompt \"" + name + "\" is not a string");
        cfg.prompts[name] = text.get<std::string>();
      }
    }
    if (j->contains("default_prompt_name") && !(*j)["default_prompt_name"].is_null()) {
      const auto& d = (*j)["default_prompt_name"];
      if (!d.is_string() || !cfg.prompts.contains(d.get<std::string>()))
        return status::invalid(st_path.string() + ": default_prompt_name " + d.dump() + " is not one of \"prompts\"");
      cfg.default_prompt_name = d.get<std::string>();
    }
  }
  return cfg;
}

status write_sentence_transformers(const fs::path& dir, const embedding_config& cfg, int hidden_size) {
  json modules = json::array();
  modules.push_back({{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}});
  modules.push_back({{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}});
  if (cfg.normalize)
    modules.push_back(
        {{"idx", 2}, {"name", "2"}, {"path", "2_Normalize"}, {"type", "sentence_transformers.models.Normalize"}});
  json pooling = {{"word_embedding_dimension", hidden_size}, {"pooling_mode_weightedmean_tokens", false},
                  {"include_prompt", true}};
  for (pooling_mode m : all_modes) pooling[std::string(pooling_key(m))] = m == cfg.pooling;
  json prompts = json::object();
  for (const auto& [k, v] : cfg.prompts) prompts[k] = v;
  json st = {{"prompts", prompts}, {"similarity_fn_name", "cosine"}};
  st["default_prompt_name"] = cfg.default_prompt_name.empty() ? json() : json(cfg.default_prompt_name);
  std::error_code ec;
  fs::create_directories(dir / "1_Pooling", ec);
  if (cfg.normalize) fs::create_directories(dir / "2_Normalize", ec);
  if (ec) return status::io_error(dir.string() + ": cannot create module folders: " + ec.message());
  const auto write = [&](const fs::path& p, const json& j) -> status {
    std::ofstream f(p);
    f << j.dump(2) << "\n";
    return f ? ok_status() : status::io_error(p.string() + ": write failed");
  };
  TESSERA_RETURN_IF_ERROR(write(dir / "modules.json", modules));
  TESSERA_RETURN_IF_ERROR(write(dir / "1_Pooling" / "config.json", pooling));
  return write(dir / "config_sentence_transformers.json", st);
}

void pool_rows(const float* hidden, int64_t ld, int64_t h, const int32_t* row_starts, const int32_t* lengths,
               int num_seqs, pooling_mode mode, float* out) {
  std::vector<double> acc(static_cast<size_t>(h));
  for (int s = 0; s < num_seqs; ++s) {
    const int len = lengths[s];
    TESSERA_CHECK(len >= 1) << "pooling an empty sequence " << s;
    const float* first = hidden + int64_t{row_starts[s]} * ld;
    float* o = out + int64_t{s} * h;
    switch (mode) {
      case pooling_mode::cls: std::copy_n(first, h, o); break;
      case pooling_mode::lasttoken: std::copy_n(first + int64_t{len - 1} * ld, h, o); break;
      case pooling_mode::max:
        std::copy_n(first, h, o);
        for (int r = 1; r < len; ++r)
          for (int64_t j = 0; j < h; ++j) o[j] = std::max(o[j], first[r * ld + j]);
        break;
      case pooling_mode::mean:
      case pooling_mode::mean_sqrt_len: {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int r = 0; r < len; ++r)
          for (int64_t j = 0; j < h; ++j) acc[static_cast<size_t>(j)] += first[r * ld + j];
        const double d = mode == pooling_mode::mean ? len : std::sqrt(static_cast<double>(len));
        for (int64_t j = 0; j < h; ++j) o[j] = static_cast<float>(acc[static_cast<size_t>(j)] / d);
        break;
      }
    }
  }
}

void l2_normalize(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * n;
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(v[j]) * v[j];
    if (ss == 0) continue;
    const double inv = 1.0 / std::sqrt(ss);
    for (int64_t j = 0; j < n; ++j) v[j] = static_cast<float>(v[j] * inv);
  }
}

std::vector<float> reference_embed(const bert_model& m, const packed_batch& b, std::optional<pooling_mode> mode) {
  const std::vector<float> x = reference_encoder(m, b);
  const int n = b.num_seqs();
  const int64_t h = m.config.hidden_size;
  std::vector<int32_t> lengths(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) lengths[static_cast<size_t>(s)] = b.seq_len(s);
  std::vector<float> out(static_cast<size_t>(n * h));
  pool_rows(x.data(), h, h, b.seq_offsets.data(), lengths.data(), n, mode.value_or(m.embedding.pooling), out.data());
  return out;
}

std::vector<float> padded_embed(const bert_model& m, const packed_batch& b, int batch_size,
                                std::optional<pooling_mode> mode) {
  const int64_t h = m.config.hidden_size;
  std::vector<float> out(static_cast<size_t>(b.num_seqs() * h));
  detail::for_each_padded_chunk(m, b, batch_size, [&](const detail::padded_chunk& c) {
    std::vector<float> x;
    const float* rows = c.hidden;
    if (!rows) {  // bf16: the final hidden states as floats (exact)
      x.resize(static_cast<size_t>(c.num_rows * h));
      to_float(c.hidden_bf16, c.num_rows * h, x.data());
      rows = x.data();
    }
    pool_rows(rows, h, h, c.row_starts, c.lengths, c.count, mode.value_or(m.embedding.pooling),
              out.data() + int64_t{c.first} * h);
  });
  return out;
}

}  // namespace tessera::models
