// The tokenizer of a GGUF file, as the tokenizer formats tessera already reads (vocab.json +
// merges.txt for gpt2, a tokenizer.json for llama), so encoding is the one bpe_tokenizer.
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tessera/models/gguf_reader.hpp"

namespace tessera::models {
namespace {

enum : int { tok_normal = 1, tok_unknown = 2, tok_control = 3, tok_user = 4, tok_unused = 5, tok_byte = 6 };

// UTF-8 character boundaries of s (byte offsets 1 .. size-1 where a character starts).
std::vector<size_t> char_starts(const std::string& s) {
  std::vector<size_t> v;
  for (size_t i = 1; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80) v.push_back(i);
  return v;
}

}  // namespace

result<bpe_tokenizer> gguf_tokenizer(const gguf_file& g) {
  const gguf_value* model = g.find("tokenizer.ggml.model");
  if (!model || model->type != gguf_type::string) return status::invalid(g.source + ": no tokenizer.ggml.model string");
  const gguf_value* tokens = g.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != gguf_type::array || tokens->elem_type != gguf_type::string || tokens->strings.empty())
    return status::invalid(g.source + ": tokenizer.ggml.tokens must be a non-empty array of strings");
  const auto& tok = tokens->strings;
  const size_t n = tok.size();
  auto numbers = [&](const char* key) -> result<const std::vector<double>*> {
    const gguf_value* v = g.find(key);
    if (!v) return static_cast<const std::vector<double>*>(nullptr);
    if (v->type != gguf_type::array || v->elem_type == gguf_type::string || v->numbers.size() != n)
      return status::invalid(g.source + ": " + key + " must be a numeric array of " + std::to_string(n) + " (one per token)");
    return &v->numbers;
  };
  auto types = numbers("tokenizer.ggml.token_type");
  if (!types) return types.error();
  auto type_of = [&](size_t id) { return *types ? static_cast<int>((**types)[id]) : tok_normal; };
  auto flag = [&](const char* key, bool dflt) {
    const gguf_value* v = g.find(key);
    return v && v->type == gguf_type::boolean ? v->i != 0 : dflt;
  };
  auto id_of = [&](const char* key) -> int64_t {
    const gguf_value* v = g.find(key);
    return v && v->is_integer() && v->i >= 0 && static_cast<size_t>(v->i) < n ? v->i : -1;
  };
  // tokenizer.chat_template (a Jinja string) travels as tokenizer_config.json's chat_template does.
  nlohmann::json config = nlohmann::json::object();
  if (const gguf_value* ct = g.find("tokenizer.chat_template")) {
    if (ct->type != gguf_type::string) return status::invalid(g.source + ": tokenizer.chat_template must be a string");
    config["chat_template"] = ct->s;
  }
  const std::string config_text = config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (model->s == "gpt2") {
    nlohmann::json vocab = nlohmann::json::object();
    for (size_t i = 0; i < n; ++i) vocab[tok[i]] = i;
    if (vocab.size() != n) return status::invalid(g.source + ": tokenizer.ggml.tokens has duplicate tokens");
    const gguf_value* merges = g.find("tokenizer.ggml.merges");
    if (!merges || merges->type != gguf_type::array || merges->elem_type != gguf_type::string)
      return status::invalid(g.source + ": a gpt2 tokenizer needs tokenizer.ggml.merges (an array of strings)");
    std::string text = "#version: 0.2\n";
    for (const auto& m : merges->strings) {
      if (m.find('\n') != std::string::npos) return status::invalid(g.source + ": a merge holds a line break");
      text += m + "\n";
    }
    auto t = bpe_tokenizer::from_vocab_merges(vocab.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), text,
                                             g.source + " (tokenizer.ggml.tokens/merges)", config_text);
    if (!t) return t.error();
    return t;
  }
  if (model->s != "llama")
    return status::unsupported(g.source + ": tokenizer.ggml.model \"" + model->s + "\" is not supported (gpt2, llama)");
  auto scores = numbers("tokenizer.ggml.scores");
  if (!scores) return scores.error();
  if (!*scores) return status::invalid(g.source + ": a llama tokenizer needs tokenizer.ggml.scores");
  const auto& score = **scores;
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < n; ++i)
    if (!ids.emplace(tok[i], static_cast<int32_t>(i)).second)
      return status::invalid(g.source + ": tokenizer.ggml.tokens has \"" + tok[i] + "\" twice");
  // Merges: every split of a normal token into two tokens of the vocabulary, the pair that makes
  // the highest-scoring token first (llama.cpp's SentencePiece merge order), then by id.
  struct cand { double score; int32_t merged; size_t split; };
  std::vector<cand> cands;
  for (size_t i = 0; i < n; ++i) {
    if (type_of(i) != tok_normal) continue;
    for (size_t at : char_starts(tok[i])) {
      auto l = ids.find(tok[i].substr(0, at)), r = ids.find(tok[i].substr(at));
      if (l != ids.end() && r != ids.end() && type_of(static_cast<size_t>(l->second)) == tok_normal &&
          type_of(static_cast<size_t>(r->second)) == tok_normal)
        cands.push_back({score[i], static_cast<int32_t>(i), at});
    }
  }
  std::stable_sort(cands.begin(), cands.end(), [](const cand& a, const cand& b) {
    return a.score != b.score ? a.score > b.score : a.merged < b.merged;
  });
  nlohmann::json merges = nlohmann::json::array(), vocab = nlohmann::json::object(), added = nlohmann::json::array();
  for (const cand& c : cands) {
    const std::string& t = tok[static_cast<size_t>(c.merged)];
    merges.push_back(t.substr(0, c.split) + " " + t.substr(c.split));
  }
  for (size_t i = 0; i < n; ++i) {
    vocab[tok[i]] = i;
    const int ty = type_of(i);
    if (ty == tok_control || ty == tok_unknown || ty == tok_user)
      added.push_back({{"id", i}, {"content", tok[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", ty != tok_user}});
  }
  const int64_t unk = id_of("tokenizer.ggml.unknown_token_id"), bos = id_of("tokenizer.ggml.bos_token_id");
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = added;
  nlohmann::json norm = nlohmann::json::array();
  if (flag("tokenizer.ggml.add_space_prefix", true)) norm.push_back({{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}});
  norm.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
  j["pre_tokenizer"] = nullptr;
  nlohmann::json single = nlohmann::json::array();
  if (flag("tokenizer.ggml.add_bos_token", true) && bos >= 0)
    single.push_back({{"SpecialToken", {{"id", tok[static_cast<size_t>(bos)]}, {"type_id", 0}}}});
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  nlohmann::json special = nlohmann::json::object();
  if (bos >= 0) special[tok[static_cast<size_t>(bos)]] = {{"id", tok[static_cast<size_t>(bos)]}, {"ids", {bos}}, {"tokens", {tok[static_cast<size_t>(bos)]}}};
  j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single}, {"special_tokens", special}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", flag("tokenizer.ggml.add_space_prefix", true) ? 1 : 0}, {"stop", 0}}}}};
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", unk >= 0 ? nlohmann::json(tok[static_cast<size_t>(unk)]) : nlohmann::json(nullptr)},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", true},
                {"byte_fallback", true}, {"vocab", vocab}, {"merges", merges}};
  return bpe_tokenizer::from_tokenizer_json(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                                            g.source + " (tokenizer.ggml.*)", config_text);
}

result<bpe_tokenizer> load_gguf_tokenizer(const std::string& path) {
  auto g = map_gguf(path);
  if (!g) return g.error();
  return gguf_tokenizer(*g);
}

result<bpe_tokenizer> load_decoder_tokenizer(const std::string& model, std::string_view preset) {
  std::error_code ec;
  if (std::filesystem::is_directory(model, ec)) return bpe_tokenizer::from_dir(model);
  if (std::filesystem::is_regular_file(model, ec) && looks_like_gguf(model)) return load_gguf_tokenizer(model);
  return bpe_tokenizer::preset(preset);
}

}  // namespace tessera::models
