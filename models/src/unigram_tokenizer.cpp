// SentencePiece Unigram from tokenizer.json: normalizer, Metaspace, Viterbi. See unigram_tokenizer.hpp.
#include "tessera/models/unigram_tokenizer.hpp"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tessera/common/text.hpp"
#include "unicode.hpp"

namespace tessera::models {
namespace {
using nlohmann::json;

/// One character of a normalized text and the bytes [start, stop) of the original it came from
/// (start == stop: inserted by the normalizer or the pre-tokenizer).
struct nchar {
  std::string bytes;
  size_t start = 0, stop = 0;
};
using nstring = std::vector<nchar>;

std::vector<std::string> chars_of(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto u = unicode::next_utf8(s, i);
    out.emplace_back(s.substr(i, u.length));
    i += u.length;
  }
  return out;
}

struct normalize_step {
  enum kind_t { replace, collapse_spaces, strip, prepend } kind;
  std::vector<std::string> pattern;  // replace: the characters matched
  std::string content;               // replace, collapse_spaces, prepend
  bool left = false, right = false;  // strip
};

struct added {
  std::string content;
  int32_t id = 0;
  bool lstrip = false, rstrip = false;
};

bool is_space(const std::string& c) { return c == " " || c == "\t" || c == "\n" || c == "\r"; }

}  // namespace

struct unigram_tokenizer_impl {
  std::vector<std::string> pieces;
  std::vector<double> scores;
  std::unordered_map<std::string, int32_t> ids;
  size_t max_piece_chars = 1;
  int32_t unk = -1;
  double unk_score = 0;
  std::vector<normalize_step> normalizer;
  bool metaspace = false, meta_split = true;
  std::string replacement = "\u2581";
  enum { always, first, never } prepend = always;
  std::vector<added> added_tokens;
  std::vector<int32_t> prefix, suffix;

  nstring normalize(std::string_view text, size_t base) const {
    nstring s;
    size_t at = base;
    for (auto& c : chars_of(text)) {
      s.push_back({c, at, at + c.size()});
      at += c.size();
    }
    for (const auto& st : normalizer) {
      nstring out;
      const size_t here = s.empty() ? base : s.front().start;
      switch (st.kind) {
        case normalize_step::prepend:
          if (!s.empty())
            for (auto& c : chars_of(st.content)) out.push_back({c, here, here});
          out.insert(out.end(), s.begin(), s.end());
          break;
        case normalize_step::strip: {
          size_t b = 0, e = s.size();
          if (st.left)
            while (b < e && is_space(s[b].bytes)) ++b;
          if (st.right)
            while (e > b && is_space(s[e - 1].bytes)) --e;
          out.assign(s.begin() + static_cast<std::ptrdiff_t>(b), s.begin() + static_cast<std::ptrdiff_t>(e));
          break;
        }
        case normalize_step::replace:
        case normalize_step::collapse_spaces:
          for (size_t i = 0; i < s.size();) {
            size_t n = 0;  // characters matched at i
            if (st.kind == normalize_step::collapse_spaces) {
              while (i + n < s.size() && s[i + n].bytes == " ") ++n;
              if (n < 2) n = 0;
            } else if (!st.pattern.empty() && i + st.pattern.size() <= s.size()) {
              n = st.pattern.size();
              for (size_t k = 0; k < n; ++k)
                if (s[i + k].bytes != st.pattern[k]) n = 0;
            }
            if (n == 0) {
              out.push_back(s[i++]);
              continue;
            }
            for (auto& c : chars_of(st.content)) out.push_back({c, s[i].start, s[i + n - 1].stop});
            i += n;
          }
          break;
      }
      s = std::move(out);
    }
    return s;
  }

  /// Metaspace: ' ' -> replacement, the prepend scheme, then words split before each replacement.
  std::vector<nstring> pre_tokenize(nstring s, bool first_segment) const {
    if (!metaspace) return s.empty() ? std::vector<nstring>{} : std::vector<nstring>{std::move(s)};
    for (auto& c : s)
      if (c.bytes == " ") c.bytes = replacement;
    const bool add = prepend == always || (prepend == first && first_segment);
    if (add && !s.empty() && s.front().bytes != replacement)
      s.insert(s.begin(), nchar{replacement, s.front().start, s.front().start});
    std::vector<nstring> words;
    if (!meta_split) {
      if (!s.empty()) words.push_back(std::move(s));
      return words;
    }
    for (auto& c : s) {
      if (words.empty() || c.bytes == replacement) words.emplace_back();
      words.back().push_back(std::move(c));
    }
    return words;
  }

  /// The best segmentation of one word (HF Unigram::encode_optimized), appended to out.
  void viterbi(const nstring& w, std::vector<word_piece>& out) const {
    const size_t n = w.size();
    struct node { double score = 0; int32_t id = -1; size_t from = 0; bool set = false; };
    std::vector<node> best(n + 1);
    best[0].set = true;
    std::string piece;
    for (size_t s = 0; s < n; ++s) {
      if (!best[s].set) continue;
      bool single = false;
      piece.clear();
      for (size_t e = s; e < n && e - s < max_piece_chars; ++e) {
        piece += w[e].bytes;
        auto it = ids.find(piece);
        if (it == ids.end()) continue;
        if (e == s) single = true;
        const double cand = best[s].score + scores[static_cast<size_t>(it->second)];
        node& t = best[e + 1];
        if (!t.set || cand > t.score) t = {cand, it->second, s, true};
      }
      if (!single) {
        const double cand = best[s].score + unk_score;
        node& t = best[s + 1];
        if (!t.set || cand > t.score) t = {cand, unk, s, true};
      }
    }
    std::vector<word_piece> rev;
    for (size_t e = n; e > 0;) {
      const node& t = best[e];
      word_piece p;
      p.id = t.id;
      for (size_t k = t.from; k < e; ++k) p.piece += w[k].bytes;
      p.start = span_start(w, t.from, e);
      p.stop = span_stop(w, t.from, e);
      // Consecutive unknowns fuse into one (HF's fuse_unk, on for Unigram).
      if (p.id == unk && !rev.empty() && rev.back().id == unk) {
        rev.back().piece = p.piece + rev.back().piece;
        rev.back().start = p.start;
      } else {
        rev.push_back(std::move(p));
      }
      e = t.from;
    }
    out.insert(out.end(), rev.rbegin(), rev.rend());
  }

  static size_t span_start(const nstring& w, size_t b, size_t e) {
    for (size_t k = b; k < e; ++k)
      if (w[k].stop > w[k].start) return w[k].start;
    return w[b].start;
  }
  static size_t span_stop(const nstring& w, size_t b, size_t e) {
    size_t stop = w[b].start;
    for (size_t k = b; k < e; ++k)
      if (w[k].stop > w[k].start) stop = std::max(stop, w[k].stop);
    return stop;
  }

  status segment(std::string_view text, size_t base, bool first, std::vector<word_piece>& out) const {
    for (const auto& w : pre_tokenize(normalize(text, base), first)) viterbi(w, out);
    return {};
  }
};

namespace {

status load_normalizer(unigram_tokenizer_impl& t, const json& n, const std::string& where) {
  if (n.is_null()) return {};
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const auto& s : n.value("normalizers", json::array())) TESSERA_RETURN_IF_ERROR(load_normalizer(t, s, where));
    return {};
  }
  if (type == "Replace") {
    normalize_step st{normalize_step::replace, {}, n.value("content", ""), false, false};
    const json& p = n.value("pattern", json::object());
    if (p.contains("String")) {
      st.pattern = chars_of(p["String"].get<std::string>());
    } else if (p.contains("Regex") && p["Regex"] == " {2,}") {
      st.kind = normalize_step::collapse_spaces;  // XLM-R's: runs of spaces to one
    } else {
      return status::unsupported(where + ": normalizer Replace with pattern " + p.dump() +
                                 " is not supported (a string, or the regex \" {2,}\")");
    }
    t.normalizer.push_back(std::move(st));
    return {};
  }
  if (type == "Strip") {
    t.normalizer.push_back({normalize_step::strip, {}, "", n.value("strip_left", true), n.value("strip_right", true)});
    return {};
  }
  if (type == "Prepend") {
    t.normalizer.push_back({normalize_step::prepend, {}, n.value("prepend", ""), false, false});
    return {};
  }
  if (type == "Precompiled")
    return status::unsupported(where + ": normalizer Precompiled (SentencePiece's precompiled_charsmap, NFKC-like) is "
                               "not supported; the Unigram tokenizer runs Replace, Strip, Prepend and Sequence");
  return status::unsupported(where + ": normalizer \"" + type + "\" is not supported (Replace, Strip, Prepend, Sequence are)");
}

status load_pre_tokenizer(unigram_tokenizer_impl& t, const json& p, const std::string& where) {
  if (p.is_null()) return {};
  const std::string type = p.value("type", "");
  if (type == "Sequence" && p.value("pretokenizers", json::array()).size() == 1)
    return load_pre_tokenizer(t, p["pretokenizers"][0], where);
  if (type != "Metaspace")
    return status::unsupported(where + ": pre-tokenizer \"" + type + "\" is not supported with Unigram (Metaspace is)");
  t.metaspace = true;
  t.replacement = p.value("replacement", "\u2581");
  const std::string scheme = p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
  if (scheme == "always") t.prepend = unigram_tokenizer_impl::always;
  else if (scheme == "first") t.prepend = unigram_tokenizer_impl::first;
  else if (scheme == "never") t.prepend = unigram_tokenizer_impl::never;
  else return status::invalid(where + ": Metaspace prepend_scheme \"" + scheme + "\" is none of always, first, never");
  t.meta_split = p.value("split", true);
  return {};
}

status load_post_processor(unigram_tokenizer_impl& t, const json& p, const std::string& where) {
  if (p.is_null()) return {};
  const std::string type = p.value("type", "");
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    t.prefix = {p.at("cls").at(1).get<int32_t>()};
    t.suffix = {p.at("sep").at(1).get<int32_t>()};
    return {};
  }
  if (type != "TemplateProcessing")
    return status::unsupported(where + ": post-processor \"" + type +
                               "\" is not supported (TemplateProcessing, RobertaProcessing are)");
  bool seen = false;
  const json specials = p.value("special_tokens", json::object());
  for (const auto& piece : p.value("single", json::array())) {
    if (piece.contains("Sequence")) {
      seen = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").value("id", "");
    if (!specials.contains(name) || !specials[name].contains("ids"))
      return status::invalid(where + ": TemplateProcessing names special token \"" + name + "\" without ids");
    for (const auto& id : specials[name]["ids"]) (seen ? t.suffix : t.prefix).push_back(id.get<int32_t>());
  }
  return {};
}

}  // namespace

result<unigram_tokenizer> unigram_tokenizer::from_tokenizer_json(std::string_view text, std::string_view source_sv) {
  const std::string source(source_sv);
  auto t = std::make_shared<unigram_tokenizer_impl>();
  try {
    const json j = json::parse(text);
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
      return status::invalid(source + ": no \"model\"; is it a Hugging Face tokenizer.json?");
    const json& m = j["model"];
    const std::string type = m.value("type", "");
    if (type != "Unigram")
      return status::unsupported(source + ": model \"" + type + "\" is not a Unigram model");
    if (m.value("byte_fallback", false))
      return status::unsupported(source + ": Unigram byte_fallback is not supported");
    const json& vocab = m.value("vocab", json::array());
    if (!vocab.is_array() || vocab.empty()) return status::invalid(source + ": Unigram \"vocab\" must be a non-empty list");
    double min_score = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < vocab.size(); ++i) {
      const json& e = vocab[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
        return status::invalid(source + ": Unigram vocab entry " + std::to_string(i) + " is not [piece, score]");
      std::string piece = e[0].get<std::string>();
      if (auto bad = unicode::decode_utf8(piece); !bad)
        return status::invalid(source + ": Unigram vocab entry " + std::to_string(i) + ": " + bad.error().to_string());
      t->scores.push_back(e[1].get<double>());
      min_score = std::min(min_score, t->scores.back());
      t->max_piece_chars = std::max(t->max_piece_chars, chars_of(piece).size());
      t->ids.emplace(piece, static_cast<int32_t>(i));  // a duplicate keeps its first id
      t->pieces.push_back(std::move(piece));
    }
    t->unk_score = min_score - 10.0;  // HF's K_UNK_PENALTY
    if (!m.contains("unk_id") || m["unk_id"].is_null())
      return status::invalid(source + ": Unigram without unk_id (an unknown character would have no id)");
    t->unk = m["unk_id"].get<int32_t>();
    if (t->unk < 0 || t->unk >= static_cast<int32_t>(t->pieces.size()))
      return status::invalid(source + ": unk_id " + std::to_string(t->unk) + " is outside the vocab");
    for (const auto& a : j.value("added_tokens", json::array())) {
      if (a.value("single_word", false))
        return status::unsupported(source + ": added token \"" + a.value("content", "") + "\" has single_word, which is not supported");
      t->added_tokens.push_back({a.value("content", ""), a.value("id", -1), a.value("lstrip", false), a.value("rstrip", false)});
    }
    TESSERA_RETURN_IF_ERROR(load_normalizer(*t, j.value("normalizer", json()), source));
    TESSERA_RETURN_IF_ERROR(load_pre_tokenizer(*t, j.value("pre_tokenizer", json()), source));
    TESSERA_RETURN_IF_ERROR(load_post_processor(*t, j.value("post_processor", json()), source));
  } catch (const json::exception& e) {
    return status::invalid(source + ": not a valid tokenizer.json: " + e.what());
  }
  unigram_tokenizer u;
  u.impl_ = std::move(t);
  return u;
}

result<unigram_tokenizer> unigram_tokenizer::from_file(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return from_tokenizer_json(*text, path);
}

result<std::vector<word_piece>> unigram_tokenizer::tokenize_with_offsets(std::string_view text) const {
  if (auto ok = unicode::decode_utf8(text); !ok) return ok.error();
  const auto& t = *impl_;
  std::vector<word_piece> out;
  size_t at = 0;
  bool first = true;
  while (at <= text.size()) {
    // The earliest added token from `at` (the longest at one position).
    size_t best = std::string_view::npos;
    const added* hit = nullptr;
    for (const auto& a : t.added_tokens) {
      if (a.content.empty()) continue;
      const size_t p = text.find(a.content, at);
      if (p != std::string_view::npos && (p < best || (p == best && a.content.size() > hit->content.size()))) {
        best = p;
        hit = &a;
      }
    }
    size_t seg_end = hit ? best : text.size(), next = text.size() + 1;
    if (hit) {
      next = best + hit->content.size();
      if (hit->lstrip)
        while (seg_end > at && is_space(std::string(1, text[seg_end - 1]))) --seg_end;
      if (hit->rstrip)
        while (next < text.size() && is_space(std::string(1, text[next]))) ++next;
    }
    if (seg_end > at) TESSERA_RETURN_IF_ERROR(t.segment(text.substr(at, seg_end - at), at, first, out));
    if (!hit) break;
    out.push_back({hit->content, hit->id, best, best + hit->content.size()});
    first = false;
    at = next;
  }
  return out;
}

result<std::vector<int32_t>> unigram_tokenizer::encode(std::string_view text, bool add_special) const {
  auto p = tokenize_with_offsets(text);
  if (!p) return p.error();
  std::vector<int32_t> ids;
  if (add_special) ids = impl_->prefix;
  for (const auto& w : *p) ids.push_back(w.id);
  if (add_special) ids.insert(ids.end(), impl_->suffix.begin(), impl_->suffix.end());
  return ids;
}

int32_t unigram_tokenizer::bos_id() const { return impl_->prefix.empty() ? -1 : impl_->prefix.front(); }
int32_t unigram_tokenizer::eos_id() const { return impl_->suffix.empty() ? -1 : impl_->suffix.back(); }
int32_t unigram_tokenizer::unk_id() const { return impl_->unk; }
int32_t unigram_tokenizer::vocab_size() const {
  int32_t n = static_cast<int32_t>(impl_->pieces.size());
  for (const auto& a : impl_->added_tokens) n = std::max(n, a.id + 1);
  return n;
}

result<std::string> unigram_tokenizer::token_text(int32_t id) const {
  if (id >= 0 && id < static_cast<int32_t>(impl_->pieces.size())) return impl_->pieces[static_cast<size_t>(id)];
  for (const auto& a : impl_->added_tokens)
    if (a.id == id) return a.content;
  return status::invalid("token id " + std::to_string(id) + " is outside the vocab [0, " + std::to_string(vocab_size()) + ")");
}

}  // namespace tessera::models
