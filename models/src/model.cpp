// Loading a model from a Hugging Face folder or a preset; saving one as a folder.
#include "tessera/models/model.hpp"
#include "tessera/common/text.hpp"
#include "model_folder.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/models/safetensors.hpp"

namespace tessera::models {
namespace fs = std::filesystem;

result<wordpiece_tokenizer> bert_model::make_tokenizer() const {
  if (!vocab) return status::invalid(source + ": the model has no vocab.txt; add one to tokenize text");
  tokenizer_options o;
  o.lower_case = lower_case;
  o.max_length = config.max_sequence_length();
  return wordpiece_tokenizer::create(vocab, o);
}

result<bert_model> make_preset_model(std::string_view preset, uint64_t seed) {
  auto cfg = preset_config(preset);
  if (!cfg) return cfg.error();
  auto w = make_preset_weights(*cfg, seed);
  if (!w) return w.error();
  bert_model m;
  m.config = std::move(*cfg);
  m.weights = std::move(*w);
  m.vocab = std::make_shared<const vocabulary>(vocabulary::builtin(m.config.vocab_size));
  m.lower_case = true;
  m.source = "preset:" + std::string(preset) + ":seed=" + std::to_string(seed);
  return m;
}

result<bert_model> load_model(std::string_view path_or_preset, uint64_t preset_seed) {
  auto m = load_encoder(path_or_preset, preset_seed);
  if (m && m->task == encoder_task::embedding)
    return status::invalid(m->source + " is an embedding model (a sentence-transformers folder: no classification "
                           "head); this path computes logits of classifiers and rerankers only");
  return m;
}

result<bert_model> load_encoder(std::string_view path_or_preset, uint64_t preset_seed) {
  const fs::path dir{std::string(path_or_preset)};
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (detail::is_preset_name(path_or_preset)) return make_preset_model(path_or_preset, preset_seed);
    return detail::neither_folder_nor_preset(path_or_preset, "config.json, model.safetensors, vocab.txt", "preset",
                                             preset_names());
  }
  bert_model m;
  m.source = dir.string();
  const fs::path config_path = dir / "config.json";
  auto text = read_text_file(config_path);
  if (!text) return text.error();
  auto cfg = parse_config_json(*text);
  if (!cfg) return cfg.error().with_context(config_path.string());
  m.config = std::move(*cfg);
  m.config.name = dir.string();
  if (fs::exists(dir / "modules.json", ec)) {
    auto st = read_sentence_transformers(dir, m.config.hidden_size);
    if (!st) return st.error();
    m.task = encoder_task::embedding;
    m.embedding = std::move(*st);
    m.config.num_labels = 0;  // a BertModel: no head, whatever config.json's (default) labels say
    m.config.id2label.clear();
  } else {
    try {
      const auto j = nlohmann::json::parse(*text);
      const auto a = j.find("architectures");
      bert_config headless = m.config;
      headless.num_labels = 0;
      if (a != j.end() && a->is_array() && a->size() == 1 && (*a)[0] == encoder_hf_class(headless))
        return status::invalid(config_path.string() + ": architectures " + a->dump() + " has no head, and the folder has "
                               "no modules.json: add sentence-transformers' modules.json and 1_Pooling/config.json "
                               "to serve it as an embedding model");
    } catch (const nlohmann::json::exception&) {
      // parse_config_json read the same text: it is valid JSON.
    }
    if (m.config.num_labels == 1) m.task = encoder_task::reranker;
  }

  const fs::path st_path = dir / "model.safetensors";
  if (!fs::exists(st_path, ec)) {
    std::string hint = fs::exists(dir / "pytorch_model.bin", ec)
                           ? "; only pytorch_model.bin is present: convert it to safetensors"
                           : "";
    return status::not_found(st_path.string() + ": missing" + hint);
  }
  auto st = map_safetensors(st_path.string());
  if (!st.ok()) return st.error();
  auto w = bert_weights::bind(m.config, std::move(st->tensors), st->storage, st_path.string());
  if (!w) return w.error();
  m.weights = std::move(*w);

  if (m.config.family != encoder_family::bert && fs::exists(dir / "tokenizer.json", ec))
    m.tokenizer_json = (dir / "tokenizer.json").string();
  const fs::path vocab_path = dir / "vocab.txt";
  if (fs::exists(vocab_path, ec)) {
    auto v = vocabulary::from_file(vocab_path.string());
    if (!v) return v.error();
    if (v->size() > m.config.vocab_size)
      return status::invalid(vocab_path.string() + ": " + std::to_string(v->size()) +
                             " tokens but config.json vocab_size is " + std::to_string(m.config.vocab_size));
    m.vocab = std::make_shared<const vocabulary>(std::move(*v));
  }
  const fs::path tc_path = dir / "tokenizer_config.json";
  if (fs::exists(tc_path, ec)) {
    auto tc = read_text_file(tc_path);
    if (!tc) return tc.error();
    try {
      const auto j = nlohmann::json::parse(*tc);
      if (j.contains("do_lower_case") && j["do_lower_case"].is_boolean()) m.lower_case = j["do_lower_case"].get<bool>();
    } catch (const nlohmann::json::exception& e) {
      return status::invalid(tc_path.string() + ": not valid JSON: " + e.what());
    }
  }
  return m;
}

status save_model(const bert_model& model, const std::string& dir_str) {
  const fs::path dir{dir_str};
  TESSERA_RETURN_IF_ERROR(detail::start_model_folder(dir, to_config_json(model.config)));
  std::map<std::string, tensor_view> tensors;
  for (const auto& spec : expected_tensors(model.config)) {
    const std::string stored = stored_tensor_name(model.config, spec.name);
    tensors[stored] = *model.weights.find(spec.name);
  }
  TESSERA_RETURN_IF_ERROR(write_safetensors((dir / "model.safetensors").string(), tensors));
  if (model.task == encoder_task::embedding)
    TESSERA_RETURN_IF_ERROR(write_sentence_transformers(dir, model.embedding, model.config.hidden_size));
  if (model.vocab) {
    std::ofstream f(dir / "vocab.txt", std::ios::binary);
    f << model.vocab->to_text();
    std::ofstream t(dir / "tokenizer_config.json");
    t << "{\"do_lower_case\": " << (model.lower_case ? "true" : "false") << "}\n";
    if (!f || !t) return status::io_error(dir_str + ": writing vocab failed");
  }
  return {};
}

}  // namespace tessera::models
