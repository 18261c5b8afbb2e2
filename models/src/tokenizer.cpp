// WordPiece tokenizer: UTF-8 decoding, BERT's basic tokenizer, greedy longest-match WordPiece.
// Normalisation follows Hugging Face's BertNormalizer + BertPreTokenizer (the fast tokenizer, and
// its JS port): clean -> space out CJK -> lower-case -> NFD + drop Mn -> split on whitespace and
// punctuation. Pair truncation follows BertTokenizer's longest_first (one token at a time).
#include "tessera/models/tokenizer.hpp"
#include "tessera/common/text.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "unicode.hpp"

namespace tessera::models {

namespace {

using unicode::append_utf8;
using unicode::decode_utf8;

// Unicode's Final_Sigma condition for the capital sigma at position i.
bool is_final_sigma(const std::u32string& t, size_t i) {
  using namespace unicode;
  size_t j = i;
  bool before = false;
  while (j > 0) {
    const uint8_t c = char_class(t[--j]);
    if (c & case_ignorable) continue;
    before = (c & cased) != 0;
    break;
  }
  if (!before) return false;
  for (size_t k = i + 1; k < t.size(); ++k) {
    const uint8_t c = char_class(t[k]);
    if (c & case_ignorable) continue;
    return (c & cased) == 0;
  }
  return true;
}

}  // namespace

// ---- vocabulary ----

result<vocabulary> vocabulary::from_text(std::string_view text, std::string_view source) {
  vocabulary v;
  line_reader lines(text);
  for (std::string_view tok; lines.next(tok);) {
    auto dec = decode_utf8(tok);
    if (!dec) return dec.error().with_context(std::string(source) + " line " + std::to_string(lines.number()));
    // A duplicated token maps to its last line, as HF's load_vocab.
    v.ids_[std::string(tok)] = static_cast<int32_t>(v.tokens_.size());
    v.tokens_.emplace_back(tok);
  }
  if (v.tokens_.empty()) return status::invalid(std::string(source) + ": empty vocab");
  return v;
}

result<vocabulary> vocabulary::from_file(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return from_text(*text, path);
}

int32_t vocabulary::id(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

std::string vocabulary::to_text() const {
  std::string s;
  for (const auto& t : tokens_) s += t + "\n";
  return s;
}

// ---- tokenizer ----

result<wordpiece_tokenizer> wordpiece_tokenizer::create(std::shared_ptr<const vocabulary> vocab, tokenizer_options opts) {
  if (!vocab) return status::invalid("tokenizer needs a vocab");
  wordpiece_tokenizer t;
  t.vocab_ = std::move(vocab);
  t.opts_ = opts;
  t.unk_ = t.vocab_->id("[UNK]");
  t.cls_ = t.vocab_->id("[CLS]");
  t.sep_ = t.vocab_->id("[SEP]");
  if (t.unk_ < 0 || t.cls_ < 0 || t.sep_ < 0)
    return status::invalid("vocab lacks [UNK], [CLS] or [SEP]; is it a BERT vocab.txt?");
  if (opts.max_length < 2) return status::invalid("max_length must be at least 2 ([CLS] and [SEP])");
  return t;
}

result<wordpiece_tokenizer> wordpiece_tokenizer::from_vocab_file(const std::string& path, tokenizer_options opts) {
  auto v = vocabulary::from_file(path);
  if (!v) return v.error();
  return create(std::make_shared<const vocabulary>(std::move(*v)), opts);
}

result<std::vector<word_piece>> wordpiece_tokenizer::tokenize_with_offsets(std::string_view text) const {
  auto valid = decode_utf8(text);  // errors report byte offsets in the whole text
  if (!valid) return valid.error();
  // Special tokens written in the text ("[SEP]") stay whole, as HF's added tokens: split around them.
  static constexpr std::string_view specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  constexpr size_t num_specials = std::size(specials);
  // The next occurrence of each special at or after `pos`, searched again only once passed: the
  // text is scanned once per special (searching all five at every special found was quadratic:
  // 200 KB of "[SEP]" took 40 s).
  size_t next[num_specials];
  for (size_t k = 0; k < num_specials; ++k)
    next[k] = vocab_->id(specials[k]) >= 0 ? text.find(specials[k]) : std::string_view::npos;
  std::vector<word_piece> pieces;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t best = std::string_view::npos;
    std::string_view which;
    for (size_t k = 0; k < num_specials; ++k) {
      if (next[k] != std::string_view::npos && next[k] < pos) next[k] = text.find(specials[k], pos);
      if (next[k] < best) {
        best = next[k];
        which = specials[k];
      }
    }
    const size_t end = best == std::string_view::npos ? text.size() : best;
    if (auto st = tokenize_segment(text, pos, end, pieces); !st.ok()) return st;
    if (best == std::string_view::npos) break;
    pieces.push_back({std::string(which), vocab_->id(which), best, best + which.size()});
    pos = best + which.size();
  }
  return pieces;
}

result<std::vector<std::string>> wordpiece_tokenizer::tokenize(std::string_view text) const {
  auto pieces = tokenize_with_offsets(text);
  if (!pieces) return pieces.error();
  std::vector<std::string> out;
  out.reserve(pieces->size());
  for (auto& p : *pieces) out.push_back(std::move(p.piece));
  return out;
}

namespace {

/// Bytes of the UTF-8 sequence led by `b` (the text is valid UTF-8 already).
size_t utf8_length(unsigned char b) { return b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4; }

char32_t decode_one(std::string_view s, size_t i, size_t n) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

/// A normalised text with, for each of its characters, the bytes of the original character it
/// came from (what Hugging Face's NormalizedString keeps to report offsets).
struct traced_text {
  std::u32string chars;
  std::vector<std::pair<size_t, size_t>> from;
  void push(char32_t cp, std::pair<size_t, size_t> origin) {
    chars.push_back(cp);
    from.push_back(origin);
  }
};

}  // namespace

status wordpiece_tokenizer::tokenize_segment(std::string_view text, size_t begin, size_t end,
                                             std::vector<word_piece>& out) const {
  using namespace unicode;
  // 1. clean (drop NUL, U+FFFD and control chars; whitespace to ' ') and space out CJK ideographs.
  traced_text t;
  t.chars.reserve(end - begin);
  t.from.reserve(end - begin);
  for (size_t i = begin; i < end;) {
    const size_t n = utf8_length(static_cast<unsigned char>(text[i]));
    const char32_t cp = decode_one(text, i, n);
    const std::pair<size_t, size_t> origin{i, i + n};
    i += n;
    if (cp == 0 || cp == 0xFFFD) continue;
    const uint8_t c = char_class(cp);
    if (c & control) continue;
    if (c & whitespace) {
      t.push(U' ', origin);
    } else if (opts_.tokenize_chinese_chars && is_cjk(cp)) {
      t.push(U' ', origin);
      t.push(cp, origin);
      t.push(U' ', origin);
    } else {
      t.push(cp, origin);
    }
  }
  // 2. lower-case (full mapping: U+0130 -> "i\u0307", final sigma) and strip accents.
  const bool strip = opts_.strip_accents < 0 ? opts_.lower_case : opts_.strip_accents == 1;
  if (opts_.lower_case) {
    traced_text l;
    l.chars.reserve(t.chars.size());
    l.from.reserve(t.chars.size());
    for (size_t i = 0; i < t.chars.size(); ++i) {
      const char32_t cp = t.chars[i];
      if (cp == 0x130) {
        l.push(U'i', t.from[i]);
        l.push(0x307, t.from[i]);
      } else if (cp == 0x3A3) {
        l.push(is_final_sigma(t.chars, i) ? 0x3C2 : 0x3C3, t.from[i]);
      } else {
        l.push(to_lower(cp), t.from[i]);
      }
    }
    std::swap(t, l);
  }
  if (strip) {
    traced_text s;
    std::u32string d;
    for (size_t i = 0; i < t.chars.size(); ++i) {
      d.clear();
      append_nfd(t.chars[i], d);
      for (char32_t cp : d)
        if (!(char_class(cp) & nonspacing_mark)) s.push(cp, t.from[i]);
    }
    std::swap(t, s);
  }
  // 3. split on whitespace and punctuation, 4. WordPiece each word.
  std::u32string word;
  std::vector<std::pair<size_t, size_t>> word_from;
  std::string candidate;
  std::vector<word_piece> found;
  auto flush = [&]() {
    if (word.empty()) return;
    const size_t word_start = word_from.front().first, word_stop = word_from.back().second;
    auto unknown = [&] { out.push_back({"[UNK]", unk_, word_start, word_stop}); };
    if (static_cast<int>(word.size()) > opts_.max_input_chars_per_word) {
      unknown();
    } else {
      found.clear();
      size_t start = 0;
      bool ok = true;
      while (start < word.size()) {
        size_t stop = word.size();
        int32_t id = -1;
        while (start < stop) {
          candidate = start > 0 ? "##" : "";
          for (size_t k = start; k < stop; ++k) append_utf8(word[k], candidate);
          if ((id = vocab_->id(candidate)) >= 0) break;
          --stop;
        }
        if (id < 0) {
          ok = false;
          break;
        }
        found.push_back({candidate, id, word_from[start].first, word_from[stop - 1].second});
        start = stop;
      }
      if (ok) out.insert(out.end(), found.begin(), found.end());
      else unknown();
    }
    word.clear();
    word_from.clear();
  };
  for (size_t i = 0; i < t.chars.size(); ++i) {
    const char32_t cp = t.chars[i];
    const uint8_t c = char_class(cp);
    if (c & whitespace) {
      flush();
    } else if (c & punctuation) {
      flush();
      word.push_back(cp);
      word_from.push_back(t.from[i]);
      flush();
    } else {
      word.push_back(cp);
      word_from.push_back(t.from[i]);
    }
  }
  flush();
  return ok_status();
}

result<std::vector<int32_t>> wordpiece_tokenizer::token_ids(std::string_view text) const {
  auto pieces = tokenize_with_offsets(text);
  if (!pieces) return pieces.error();
  std::vector<int32_t> ids;
  ids.reserve(pieces->size());
  for (const auto& p : *pieces) ids.push_back(p.id >= 0 ? p.id : unk_);
  return ids;
}

result<encoding> wordpiece_tokenizer::encode(std::string_view text) const {
  auto ids = token_ids(text);
  if (!ids) return ids.error();
  const size_t budget = static_cast<size_t>(opts_.max_length - 2);
  if (ids->size() > budget) ids->resize(budget);
  encoding e;
  e.token_ids.push_back(cls_);
  e.token_ids.insert(e.token_ids.end(), ids->begin(), ids->end());
  e.token_ids.push_back(sep_);
  e.token_type_ids.assign(e.token_ids.size(), 0);
  return e;
}

result<encoding> wordpiece_tokenizer::encode_pair(std::string_view a, std::string_view b) const {
  auto ia = token_ids(a);
  if (!ia) return ia.error().with_context("first text");
  auto ib = token_ids(b);
  if (!ib) return ib.error().with_context("second text");
  if (opts_.max_length < 3) return status::invalid("max_length must be at least 3 for a pair");
  // BertTokenizer's longest_first: drop one token at a time from the longer (ties: the second).
  const size_t budget = static_cast<size_t>(opts_.max_length - 3);
  while (ia->size() + ib->size() > budget) {
    if (ia->size() > ib->size()) ia->pop_back();
    else ib->pop_back();
  }
  encoding e;
  e.token_ids.push_back(cls_);
  e.token_ids.insert(e.token_ids.end(), ia->begin(), ia->end());
  e.token_ids.push_back(sep_);
  e.token_type_ids.assign(e.token_ids.size(), 0);
  e.token_ids.insert(e.token_ids.end(), ib->begin(), ib->end());
  e.token_ids.push_back(sep_);
  e.token_type_ids.resize(e.token_ids.size(), 1);
  return e;
}

}  // namespace tessera::models
