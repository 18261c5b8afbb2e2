// Byte-level (GPT-2) and SentencePiece-style (LLaMA) BPE, following Hugging Face tokenizers'
// pipeline: added tokens -> normalizer -> pre-tokenizer -> BPE model -> post-processor, and the
// decoders (ByteLevel; Replace + ByteFallback + Fuse + Strip; Metaspace).
#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/common/text.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "unicode.hpp"

#ifndef TESSERA_TOKENIZER_PRESET_DIR
#define TESSERA_TOKENIZER_PRESET_DIR ""
#endif

namespace tessera::models {

using json = nlohmann::json;

struct added_token {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, normalized = false;
};

/// (left id, right id) -> (rank, merged id): open addressing with linear probing (the merge lookups
/// are most of the encoding time; std::unordered_map's node chasing was 40% of it).
class merge_table {
 public:
  struct entry {
    uint64_t key = empty;
    int32_t rank = 0, merged = 0;
  };
  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  /// Sets (a later duplicate of a merge replaces the earlier, as HF's merges map does).
  void set(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    entry& e = slot(key(a, b));
    if (e.key == empty) ++count_;
    e = {key(a, b), rank, merged};
  }
  /// Every merge (left id, right id, entry), in slot order.
  template <class F>
  void for_each(F&& f) const {
    for (const entry& e : slots_)
      if (e.key != empty) f(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key & 0xffffffffu), e);
  }
  const entry* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    for (size_t i = hash(k);; i = (i + 1) & mask_) {
      const entry& e = slots_[i];
      if (e.key == k) return &e;
      if (e.key == empty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t empty = ~uint64_t{0};  // ids are non-negative: never a key
  size_t hash(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  entry& slot(uint64_t k) {
    size_t i = hash(k);
    while (slots_[i].key != empty && slots_[i].key != k) i = (i + 1) & mask_;
    return slots_[i];
  }
  void grow() {
    std::vector<entry> old = std::move(slots_);
    const size_t n = old.empty() ? 1024 : old.size() * 2;
    slots_.assign(n, entry{});
    mask_ = n - 1;
    shift_ = 64 - static_cast<int>(std::countr_zero(n));
    for (const entry& e : old)
      if (e.key != empty) slot(e.key) = e;
  }
  std::vector<entry> slots_;
  size_t mask_ = 0, count_ = 0;
  int shift_ = 64;
};

/// Token ids of recent words (GPT-2's pre-tokenizer words repeat: " the", ","), shared by all
/// threads: sharded, each shard under its own mutex, and filled only up to a bound (as HF's cache).
class word_cache {
 public:
  static constexpr size_t max_word_bytes = 64;
  bool get(std::string_view w, std::vector<int32_t>& out) const {
    shard& s = shard_of(w);
    std::lock_guard lock(s.m);
    auto it = s.map.find(w);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(std::string_view w, const int32_t* ids, size_t n) const {
    shard& s = shard_of(w);
    std::lock_guard lock(s.m);
    if (s.map.size() < per_shard) s.map.emplace(std::string(w), std::vector<int32_t>(ids, ids + n));
  }

 private:
  static constexpr size_t shards = 16, per_shard = 4096;
  struct hash {
    using is_transparent = void;
    size_t operator()(std::string_view v) const { return std::hash<std::string_view>{}(v); }
  };
  struct shard {
    std::mutex m;
    std::unordered_map<std::string, std::vector<int32_t>, hash, std::equal_to<>> map;
  };
  shard& shard_of(std::string_view w) const { return shards_[std::hash<std::string_view>{}(w) % shards]; }
  mutable std::array<shard, shards> shards_;
};

/// A normalizer step (HF Prepend, Replace with a string pattern, or NFC).
struct norm_step {
  enum class kind : uint8_t { replace, prepend, nfc } what = kind::replace;
  std::string from, to;  ///< Replace: from -> to; Prepend: to
};

enum class pre_kind : uint8_t { none, byte_level, metaspace };
/// The byte-level pre-tokenizer's split: GPT-2's regex, or the Split regex of Qwen2 (one digit a
/// piece) and Llama-3 (up to three digits a piece), recognised by their exact pattern strings.
enum class split_kind : uint8_t { gpt2, qwen2, llama3 };
enum class prepend_scheme : uint8_t { always, first, never };

/// What an id decodes to: its bytes, or (SentencePiece byte fallback) a single raw byte.
struct decoded_piece {
  std::string bytes;
  int16_t byte = -1;
};

struct bpe_tokenizer_impl {
  bpe_kind kind = bpe_kind::byte_level;
  std::vector<std::string> tokens;                ///< id -> vocab string ("" for an unused id)
  std::unordered_map<std::string, int32_t> ids;   ///< vocab string -> id (model vocab and added tokens)
  merge_table merges;
  size_t num_merges = 0;
  int32_t unk = -1, bos = -1, eos = -1;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  std::array<int32_t, 256> byte_ids{};            ///< byte-level: id of each byte's character; fallback: <0xXX>
  std::vector<int32_t> bmp_ids;                    ///< single-character tokens of the BMP (-1: none; SentencePiece)
  std::unordered_map<char32_t, int32_t> astral_ids; ///< single-character tokens beyond it

  int32_t char_id(char32_t cp) const {
    if (cp < 0x10000) return bmp_ids[cp];
    auto it = astral_ids.find(cp);
    return it == astral_ids.end() ? -1 : it->second;
  }
  std::array<char32_t, 256> byte_char{};          ///< GPT-2's bytes_to_unicode
  std::vector<norm_step> normalizer;
  pre_kind pre = pre_kind::none;
  bool prefix_space = false, use_regex = true;    ///< ByteLevel pre-tokenizer
  split_kind split = split_kind::gpt2;            ///< which regex when use_regex
  std::string meta_replacement = "\u2581";
  prepend_scheme meta_prepend = prepend_scheme::always;
  bool meta_split = false;
  std::vector<added_token> added;
  std::array<std::vector<int>, 256> added_by_byte;  ///< added token indices by first byte, longest first
  std::vector<int32_t> prefix, suffix;            ///< post-processor
  std::vector<decoded_piece> pieces;              ///< id -> decoded bytes
  std::vector<uint8_t> special;                   ///< id -> is a special token
  bool decode_lossy = true;                       ///< ByteLevel decoder: U+FFFD for ill-formed bytes
  int strip_leading = 0;                          ///< spaces stripped from the start of decoded text
  std::string chat_template;                      ///< tokenizer_config.json "chat_template"
  word_cache cache;                               ///< byte-level words -> ids

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }

  status finish(std::string_view source);
  void mark_specials();
  void split_added(std::string_view text, bool normalized, bool parse_special,
                   const std::function<void(std::string_view, int32_t, size_t)>& emit) const;
  std::string normalize(std::string_view s) const;
  status pre_tokenize(std::string_view s, bool first, std::vector<int32_t>& out) const;
  status model(std::string_view word, std::vector<int32_t>& out) const;
};

namespace {

std::array<char32_t, 256> bytes_to_unicode() {
  std::array<char32_t, 256> m{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    m[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return m;
}

std::string utf8_of(char32_t cp) {
  std::string s;
  unicode::append_utf8(cp, s);
  return s;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  if (pos == 0) return;
  out.append(s, pos);
  s = std::move(out);
}

/// "<0x41>" -> 0x41, else -1 (HF's ByteFallback accepts either case of hex digits).
int byte_token_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else return -1;
  }
  return v;
}

bool is_space_cp(char32_t cp) { return (unicode::char_class(cp) & unicode::whitespace) != 0; }

/// A well-formed UTF-8 string read by byte offset, for the hand-written pre-tokenizers (gpt2_split,
/// qwen2_split): the character class at a position, its length, runs of a class, and where
/// \s+(?!\S) ends a whitespace run.
struct utf8_classes {
  std::string_view s;
  uint8_t cls(size_t i) const {
    const auto b = static_cast<unsigned char>(s[i]);
    return unicode::char_class(b < 0x80 ? char32_t{b} : unicode::next_utf8(s, i).cp);
  }
  size_t len(size_t i) const {
    const auto b = static_cast<unsigned char>(s[i]);
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  }
  template <class Pred>
  size_t run(size_t j, Pred pred) const {
    while (j < s.size() && pred(cls(j))) j += len(j);
    return j;
  }
  /// The whitespace run [i, k): \s+(?!\S) leaves its last character to the non-space after it
  /// (" ?\p{L}+" and the like take it), and a lone one is \s+ on its own.
  size_t space_end(size_t i, size_t k) const {
    if (k >= s.size()) return k;
    size_t last = i, p = i;
    while (p < k) { last = p; p += len(p); }
    return last > i ? last : k;
  }
};
// Classes as run() takes them (lambdas, so that each run is its own inlined loop).
constexpr auto is_letter_class = [](uint8_t c) { return (c & unicode::letter) != 0; };
constexpr auto is_number_class = [](uint8_t c) { return (c & unicode::number) != 0; };
constexpr auto is_other_class = [](uint8_t c) { return (c & (unicode::letter | unicode::number | unicode::whitespace)) == 0; };
constexpr auto is_space_class = [](uint8_t c) { return (c & unicode::whitespace) != 0; };

/// GPT-2's pre-tokenizer, the regex
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// matched by hand over code points (alternatives in order at each position, as a backtracking
/// engine does). `s` is well-formed UTF-8.
template <class F>
void gpt2_split(std::string_view s, F&& emit) {
  const size_t n = s.size();
  const utf8_classes u{s};
  auto cls = [&](size_t i) { return u.cls(i); };
  auto run = [&](size_t j, auto pred) { return u.run(j, pred); };
  const auto is_l = is_letter_class;
  const auto is_n = is_number_class;
  const auto is_other = is_other_class;
  const auto is_s = is_space_class;
  size_t i = 0;
  while (i < n) {
    size_t end = 0;
    if (s[i] == '\'' && i + 1 < n) {
      const char c = s[i + 1];
      if (c == 's' || c == 't' || c == 'm' || c == 'd') end = i + 2;
      else if (i + 2 < n && ((c == 'r' && s[i + 2] == 'e') || (c == 'v' && s[i + 2] == 'e') || (c == 'l' && s[i + 2] == 'l')))
        end = i + 3;
    }
    if (!end) {
      const size_t j = s[i] == ' ' ? i + 1 : i;
      if (j < n) {
        const uint8_t c = cls(j);
        if (is_l(c)) end = run(j, is_l);
        else if (is_n(c)) end = run(j, is_n);
        else if (is_other(c)) end = run(j, is_other);
      }
    }
    if (!end) {
      // Whitespace: \s+(?!\S) keeps the last space of a run that precedes a non-space for the next
      // word (" ?\p{L}+" takes it); a single space before a non-space is \s+ on its own.
      end = u.space_end(i, run(i, is_s));
    }
    emit(s.substr(i, end - i));
    i = end;
  }
}

/// Qwen2's Split regex (Llama-3's differs only in \p{N}{1,3}), as tokenizer.json spells them.
constexpr std::string_view kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// Qwen2's (max_digits 1) and Llama-3's (max_digits 3) Split regex, matched by hand over code
/// points, the first alternative that matches at each position winning (as the regex crate does):
///   (?i:'s|'t|'re|'ve|'m|'ll|'d)     contractions in any case (the crate's simple case folding
///                                    also takes U+017F, long s, for s)
///   [^\r\n\p{L}\p{N}]?\p{L}+         a word, with one leading character that is not a line break,
///                                    letter or number (a space, a mark, punctuation)
///   \p{N}{1,max_digits}
///    ?[^\s\p{L}\p{N}]+[\r\n]*         punctuation and symbols, then the line breaks after them
///   \s*[\r\n]+                       whitespace up to its last line break
///   \s+(?!\S) | \s+                  other whitespace (the last space before a word stays with it)
/// `s` is well-formed UTF-8.
template <class F>
void qwen2_split(std::string_view s, int max_digits, F&& emit) {
  using unicode::number;
  const size_t n = s.size();
  const utf8_classes u{s};
  auto cls = [&](size_t i) { return u.cls(i); };
  auto len = [&](size_t i) { return u.len(i); };
  auto run = [&](size_t j, auto pred) { return u.run(j, pred); };
  const auto is_l = is_letter_class;
  const auto is_other = is_other_class;
  const auto is_s = is_space_class;
  const auto is_break = [&](size_t i) { return s[i] == '\r' || s[i] == '\n'; };
  // A case-insensitive ASCII letter of the contractions, or long s for s.
  auto letter_is = [&](size_t i, char lower) -> size_t {
    if (i >= n) return 0;
    const char c = s[i];
    if (c == lower || c == lower - 32) return 1;
    if (lower == 's' && s.compare(i, 2, "\xC5\xBF") == 0) return 2;
    return 0;
  };
  size_t i = 0;
  while (i < n) {
    size_t end = 0;
    if (s[i] == '\'') {
      for (const char* c : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        size_t j = i + 1;
        for (const char* p = c; *p && j; ++p) {
          const size_t l = letter_is(j, *p);
          j = l ? j + l : 0;
        }
        if (j) {
          end = j;
          break;
        }
      }
    }
    const uint8_t c = cls(i);
    if (!end) {
      if (is_l(c)) {
        end = run(i, is_l);
      } else if (!(c & number) && !is_break(i)) {
        const size_t j = i + len(i);
        if (j < n && is_l(cls(j))) end = run(j, is_l);
      }
    }
    if (!end && (c & number)) {
      end = i;
      for (int d = 0; d < max_digits && end < n && (cls(end) & number); ++d) end += len(end);
    }
    if (!end) {
      const size_t j = s[i] == ' ' && i + 1 < n && is_other(cls(i + 1)) ? i + 1 : i;
      if (is_other(cls(j))) {
        end = run(j, is_other);
        while (end < n && is_break(end)) ++end;
      }
    }
    if (!end) {
      // Whitespace: up to the run's last line break if it has one; else \s+(?!\S) keeps the last
      // character of a run before a non-space for the next piece, and a lone one is \s+.
      const size_t k = run(i, is_s);
      size_t last_break = 0;
      for (size_t p = i; p < k; p += len(p))
        if (is_break(p)) last_break = p + 1;
      end = last_break ? last_break : u.space_end(i, k);
    }
    emit(s.substr(i, end - i));
    i = end;
  }
}

struct merge_candidate {
  int32_t rank, pos, merged;
  bool operator<(const merge_candidate& o) const {  // a min-heap on (rank, pos) through std::push_heap
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

}  // namespace

// ---- the model: merges over a word's symbols ----

status bpe_tokenizer_impl::model(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return ok_status();
  struct symbol { int32_t id, prev, next; bool alive; };
  // Scratch reused across words (encode() is const and may run on several threads at once).
  thread_local std::vector<symbol> sym;
  thread_local std::vector<merge_candidate> queue;  // a heap
  sym.clear();
  queue.clear();
  auto add = [&](int32_t id) {
    const int32_t k = static_cast<int32_t>(sym.size());
    sym.push_back({id, k - 1, -1, true});
    if (k > 0) sym[static_cast<size_t>(k - 1)].next = k;
  };
  if (kind == bpe_kind::byte_level) {
    if (ignore_merges) {
      std::string mapped;
      for (unsigned char b : word) unicode::append_utf8(byte_char[b], mapped);
      if (auto it = ids.find(mapped); it != ids.end()) {
        out.push_back(it->second);
        return ok_status();
      }
    }
    for (unsigned char b : word) {
      if (byte_ids[b] < 0) {
        if (unk < 0) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02X", b);
          return status::invalid(std::string("byte ") + hex + " has no token in the byte-level vocab and there is no unk token");
        }
        add(unk);
      } else {
        add(byte_ids[b]);
      }
    }
  } else {
    if (ignore_merges)
      if (auto it = ids.find(std::string(word)); it != ids.end()) {
        out.push_back(it->second);
        return ok_status();
      }
    bool last_unk = false;
    for (size_t i = 0; i < word.size();) {
      const auto u = unicode::next_utf8(word, i);
      if (const int32_t id = char_id(u.cp); id >= 0) {
        add(id);
        last_unk = false;
      } else if (byte_fallback && std::all_of(word.begin() + static_cast<long>(i), word.begin() + static_cast<long>(i + u.length),
                                              [&](char c) { return byte_ids[static_cast<unsigned char>(c)] >= 0; })) {
        for (size_t k = i; k < i + u.length; ++k) add(byte_ids[static_cast<unsigned char>(word[k])]);
        last_unk = false;
      } else if (unk >= 0) {
        if (!(fuse_unk && last_unk)) add(unk);
        last_unk = true;
      } else {
        return status::invalid("character U+" + [&] {
          char hex[16];
          std::snprintf(hex, sizeof hex, "%04X", static_cast<unsigned>(u.cp));
          return std::string(hex);
        }() + " is not in the vocab, and the tokenizer has neither byte fallback nor an unk token");
      }
      i += u.length;
    }
  }
  auto consider = [&](int32_t pos) {
    const int32_t nx = sym[static_cast<size_t>(pos)].next;
    if (nx < 0) return;
    if (const auto* m = merges.find(sym[static_cast<size_t>(pos)].id, sym[static_cast<size_t>(nx)].id)) {
      queue.push_back({m->rank, pos, m->merged});
      std::push_heap(queue.begin(), queue.end());
    }
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(sym.size()); ++k) consider(k);
  if (sym.size() == 1) {
    out.push_back(sym[0].id);
    return ok_status();
  }
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const merge_candidate top = queue.back();
    queue.pop_back();
    symbol& left = sym[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    symbol& right = sym[static_cast<size_t>(left.next)];
    const auto* m = merges.find(left.id, right.id);
    if (!m || m->merged != top.merged) continue;  // stale: a neighbour merged first
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (int32_t k = 0; k >= 0; k = sym[static_cast<size_t>(k)].next) out.push_back(sym[static_cast<size_t>(k)].id);
  // A long word (LLaMA's is the whole text) must not leave its scratch behind on every thread.
  constexpr size_t keep = 1 << 16;
  if (sym.capacity() > keep) std::vector<symbol>().swap(sym);
  if (queue.capacity() > keep) std::vector<merge_candidate>().swap(queue);
  return ok_status();
}

// ---- added tokens, normalizer, pre-tokenizer ----

void bpe_tokenizer_impl::split_added(std::string_view text, bool normalized, bool parse_special,
                                     const std::function<void(std::string_view, int32_t, size_t)>& emit) const {
  // Leftmost-longest matches of the added tokens of this kind (HF: normalized=false ones on the
  // raw text, normalized=true ones after the normalizer); lstrip/rstrip take the whitespace next
  // to a match with it. emit(text, -1, offset) for the text between, emit(token, id, offset) for a match.
  size_t pos = 0, i = 0;
  const size_t n = text.size();
  while (i < n) {
    const auto& cands = added_by_byte[static_cast<unsigned char>(text[i])];
    const added_token* hit = nullptr;
    for (int c : cands) {
      const added_token& t = added[static_cast<size_t>(c)];
      if (t.normalized != normalized || (t.special && !parse_special)) continue;
      if (text.compare(i, t.content.size(), t.content) == 0) {
        hit = &t;
        break;  // longest first
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + hit->content.size();
    auto space_before = [&](size_t p, size_t& len) {
      // the code point ending at p, if whitespace
      size_t b = p;
      while (b > 0 && (static_cast<unsigned char>(text[b - 1]) & 0xC0) == 0x80) --b;
      if (b == 0) return false;
      --b;
      const auto u = unicode::next_utf8(text, b);
      len = p - b;
      return u.kind == unicode::utf8_unit::valid && is_space_cp(u.cp);
    };
    if (hit->lstrip)
      for (size_t l; start > pos && space_before(start, l);) start -= l;
    if (hit->rstrip)
      while (stop < n) {
        const auto u = unicode::next_utf8(text, stop);
        if (u.kind != unicode::utf8_unit::valid || !is_space_cp(u.cp)) break;
        stop += u.length;
      }
    if (start > pos) emit(text.substr(pos, start - pos), -1, pos);
    emit(text.substr(start, stop - start), hit->id, start);
    pos = i = stop;
  }
  if (pos < n) emit(text.substr(pos), -1, pos);
}

std::string bpe_tokenizer_impl::normalize(std::string_view s) const {
  std::string t(s);
  for (const auto& step : normalizer) {
    switch (step.what) {
      case norm_step::kind::prepend:
        if (!t.empty()) t.insert(0, step.to);
        break;
      case norm_step::kind::replace:
        replace_all(t, step.from, step.to);
        break;
      case norm_step::kind::nfc:
        t = unicode::nfc(t);
        break;
    }
  }
  return t;
}

status bpe_tokenizer_impl::pre_tokenize(std::string_view s, bool first, std::vector<int32_t>& out) const {
  switch (pre) {
    case pre_kind::none:
      return model(s, out);
    case pre_kind::byte_level: {
      std::string with_space;
      if (prefix_space && !s.empty() && s.front() != ' ') {
        with_space = " " + std::string(s);
        s = with_space;
      }
      if (!use_regex) return model(s, out);
      status st;
      auto word = [&](std::string_view w) {
        if (!st.ok()) return;
        if (w.size() > word_cache::max_word_bytes) {
          st = model(w, out);
        } else if (!cache.get(w, out)) {
          const size_t before = out.size();
          st = model(w, out);
          if (st.ok()) cache.put(w, out.data() + before, out.size() - before);
        }
      };
      if (split == split_kind::gpt2) gpt2_split(s, word);
      else qwen2_split(s, split == split_kind::llama3 ? 3 : 1, word);
      return st;
    }
    case pre_kind::metaspace: {
      std::string t(s);
      replace_all(t, " ", meta_replacement);
      const bool starts = t.compare(0, meta_replacement.size(), meta_replacement) == 0;
      if (!t.empty() && !starts && (meta_prepend == prepend_scheme::always || (meta_prepend == prepend_scheme::first && first)))
        t.insert(0, meta_replacement);
      if (!meta_split) return model(t, out);
      // Split before each replacement character (HF's MergedWithNext).
      size_t begin = 0;
      for (size_t hit = t.find(meta_replacement, 1); hit != std::string::npos; hit = t.find(meta_replacement, hit + 1)) {
        if (hit > begin) TESSERA_RETURN_IF_ERROR(model(std::string_view(t).substr(begin, hit - begin), out));
        begin = hit;
      }
      return model(std::string_view(t).substr(begin), out);
    }
  }
  return status::internal("unknown pre-tokenizer");
}

// ---- loading ----

status bpe_tokenizer_impl::finish(std::string_view source) {
  const std::string src(source);
  // Ids: added tokens may lie beyond the model vocab.
  for (const auto& a : added) {
    if (a.id < 0 || a.id > 100'000'000) return status::invalid(src + ": added token \"" + a.content + "\" has id " + std::to_string(a.id));
    if (a.content.empty()) return status::invalid(src + ": an added token is empty (id " + std::to_string(a.id) + ")");
    if (a.id >= size()) tokens.resize(static_cast<size_t>(a.id) + 1);
    if (!tokens[static_cast<size_t>(a.id)].empty() && tokens[static_cast<size_t>(a.id)] != a.content)
      return status::invalid(src + ": added token \"" + a.content + "\" reuses id " + std::to_string(a.id) + " of \"" +
                             tokens[static_cast<size_t>(a.id)] + "\"");
    tokens[static_cast<size_t>(a.id)] = a.content;
    ids[a.content] = a.id;
  }
  if (tokens.empty()) return status::invalid(src + ": empty vocab");
  for (size_t k = 0; k < added.size(); ++k)
    added_by_byte[static_cast<unsigned char>(added[k].content[0])].push_back(static_cast<int>(k));
  for (auto& v : added_by_byte)
    std::stable_sort(v.begin(), v.end(), [&](int a, int b) { return added[static_cast<size_t>(a)].content.size() > added[static_cast<size_t>(b)].content.size(); });
  // Initial symbols.
  byte_char = bytes_to_unicode();
  byte_ids.fill(-1);
  if (kind == bpe_kind::byte_level) {
    for (int b = 0; b < 256; ++b)
      if (auto it = ids.find(utf8_of(byte_char[static_cast<size_t>(b)])); it != ids.end()) byte_ids[static_cast<size_t>(b)] = it->second;
  } else {
    bmp_ids.assign(0x10000, -1);
    for (int32_t id = 0; id < size(); ++id) {
      const std::string& t = tokens[static_cast<size_t>(id)];
      if (t.empty()) continue;
      const auto u = unicode::next_utf8(t, 0);
      if (u.kind == unicode::utf8_unit::valid && u.length == t.size() && char_id(u.cp) < 0) {
        if (u.cp < 0x10000) bmp_ids[u.cp] = id;
        else astral_ids[u.cp] = id;
      }
      if (byte_fallback) {
        const int v = byte_token_value(t);
        if (v >= 0 && byte_ids[static_cast<size_t>(v)] < 0) byte_ids[static_cast<size_t>(v)] = id;
      }
    }
  }
  return ok_status();
}

void bpe_tokenizer_impl::mark_specials() {
  special.assign(tokens.size(), 0);
  for (const auto& a : added)
    if (a.special) special[static_cast<size_t>(a.id)] = 1;
  for (int32_t id : {unk, bos, eos})
    if (id >= 0) special[static_cast<size_t>(id)] = 1;
}

namespace {

std::string json_string_or_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

/// Merges from "a b" lines or ["a", "b"] pairs; each side and their concatenation must be tokens.
status add_merge(bpe_tokenizer_impl& t, std::string_view a, std::string_view b, const std::string& where) {
  auto ia = t.ids.find(std::string(a)), ib = t.ids.find(std::string(b));
  auto im = t.ids.find(std::string(a) + std::string(b));
  if (ia == t.ids.end() || ib == t.ids.end() || im == t.ids.end())
    return status::invalid(where + ": merge \"" + std::string(a) + " " + std::string(b) + "\" uses a token not in the vocab");
  t.merges.set(ia->second, ib->second, static_cast<int32_t>(t.num_merges), im->second);
  ++t.num_merges;
  return ok_status();
}

status load_vocab(bpe_tokenizer_impl& t, const json& vocab, const std::string& where) {
  if (!vocab.is_object()) return status::invalid(where + ": the vocab is not an object of token -> id");
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > 100'000'000)
      return status::invalid(where + ": token \"" + it.key() + "\" has no valid id");
    max_id = std::max(max_id, it.value().get<int32_t>());
  }
  t.tokens.assign(static_cast<size_t>(max_id + 1), std::string());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = it.value().get<int32_t>();
    if (!t.tokens[static_cast<size_t>(id)].empty())
      return status::invalid(where + ": id " + std::to_string(id) + " is given to both \"" + t.tokens[static_cast<size_t>(id)] +
                             "\" and \"" + it.key() + "\"");
    t.tokens[static_cast<size_t>(id)] = it.key();
    t.ids[it.key()] = id;
  }
  return ok_status();
}

void byte_level_decoder(bpe_tokenizer_impl& t) {
  // HF's ByteLevel decoder: a token's characters back to bytes (a token with a character outside
  // the 256 stays as its UTF-8), then the whole text lossily.
  std::unordered_map<char32_t, char> to_byte;
  for (int b = 0; b < 256; ++b) to_byte[t.byte_char[static_cast<size_t>(b)]] = static_cast<char>(b);
  for (size_t id = 0; id < t.tokens.size(); ++id) {
    const std::string& s = t.tokens[id];
    std::string bytes;
    bool all = true;
    for (size_t i = 0; i < s.size() && all;) {
      const auto u = unicode::next_utf8(s, i);
      auto it = to_byte.find(u.cp);
      if (u.kind != unicode::utf8_unit::valid || it == to_byte.end()) all = false;
      else bytes.push_back(it->second);
      i += u.length;
    }
    t.pieces[id].bytes = all ? bytes : s;
  }
  t.decode_lossy = true;
}

status load_decoder(bpe_tokenizer_impl& t, const json& d, const std::string& where) {
  t.pieces.assign(t.tokens.size(), {});
  for (size_t id = 0; id < t.tokens.size(); ++id) t.pieces[id].bytes = t.tokens[id];
  t.decode_lossy = false;
  if (d.is_null()) return status::unsupported(where + ": a tokenizer without a decoder is not supported");
  std::vector<json> steps;
  if (d.value("type", "") == "Sequence") {
    for (const auto& s : d.value("decoders", json::array())) steps.push_back(s);
  } else {
    steps.push_back(d);
  }
  bool fused = false;
  for (const auto& s : steps) {
    const std::string type = s.value("type", "");
    if (type == "ByteLevel") {
      byte_level_decoder(t);
    } else if (type == "Replace") {
      if (!s.contains("pattern") || !s["pattern"].contains("String"))
        return status::unsupported(where + ": decoder Replace with a regex pattern is not supported (only a string)");
      const std::string from = s["pattern"]["String"].get<std::string>(), to = s.value("content", "");
      for (size_t id = 0; id < t.tokens.size(); ++id)
        if (t.pieces[id].byte < 0) replace_all(t.pieces[id].bytes, from, to);
    } else if (type == "ByteFallback") {
      for (size_t id = 0; id < t.tokens.size(); ++id) {
        const int v = byte_token_value(t.pieces[id].bytes);
        if (v >= 0) t.pieces[id] = {{}, static_cast<int16_t>(v)};
      }
    } else if (type == "Fuse") {
      fused = true;
    } else if (type == "Strip") {
      if (!fused || s.value("content", " ") != " " || s.value("stop", 0) != 0)
        return status::unsupported(where + ": decoder Strip is supported only after Fuse, of ' ' at the start");
      t.strip_leading = s.value("start", 0);
    } else if (type == "Metaspace") {
      std::string rep = s.value("replacement", "\u2581");
      for (size_t id = 0; id < t.tokens.size(); ++id)
        if (t.pieces[id].byte < 0) replace_all(t.pieces[id].bytes, rep, " ");
      const std::string scheme = s.value("prepend_scheme", s.value("add_prefix_space", true) ? "always" : "never");
      t.strip_leading = scheme == "never" ? 0 : 1;
    } else {
      return status::unsupported(where + ": decoder \"" + type + "\" is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace are)");
    }
  }
  return ok_status();
}

status load_pre_tokenizer(bpe_tokenizer_impl& t, const json& p, const std::string& where) {
  if (p.is_null()) return ok_status();
  const std::string type = p.value("type", "");
  if (type == "ByteLevel") {
    t.pre = pre_kind::byte_level;
    t.prefix_space = p.value("add_prefix_space", false);
    t.use_regex = p.value("use_regex", true);
    return ok_status();
  }
  if (type == "Metaspace") {
    t.pre = pre_kind::metaspace;
    t.meta_replacement = p.value("replacement", "\u2581");
    const std::string scheme = p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") t.meta_prepend = prepend_scheme::always;
    else if (scheme == "first") t.meta_prepend = prepend_scheme::first;
    else if (scheme == "never") t.meta_prepend = prepend_scheme::never;
    else return status::invalid(where + ": Metaspace prepend_scheme \"" + scheme + "\" is none of always, first, never");
    t.meta_split = p.value("split", true);
    return ok_status();
  }
  if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array() && p["pretokenizers"].size() == 1)
    return load_pre_tokenizer(t, p["pretokenizers"][0], where);
  // Qwen2's and Llama-3's: Split on their regex (Isolated), then ByteLevel without its own regex.
  if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array() && p["pretokenizers"].size() == 2) {
    const json& split = p["pretokenizers"][0];
    const json& bytes = p["pretokenizers"][1];
    if (split.is_object() && split.value("type", "") == "Split" && bytes.is_object() && bytes.value("type", "") == "ByteLevel" &&
        !bytes.value("use_regex", true)) {
      const json pattern = split.value("pattern", json());
      const std::string regex = pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()
                                    ? pattern["Regex"].get<std::string>()
                                    : std::string();
      if (split.value("behavior", "") != "Isolated" || split.value("invert", false))
        return status::unsupported(where + ": Split pre-tokenizer with behavior \"" + split.value("behavior", "") +
                                   "\"" + (split.value("invert", false) ? " inverted" : "") + " is not supported (Isolated is)");
      if (regex == kQwen2Split || regex == kLlama3Split) {
        TESSERA_RETURN_IF_ERROR(load_pre_tokenizer(t, bytes, where));
        t.use_regex = true;
        t.split = regex == kQwen2Split ? split_kind::qwen2 : split_kind::llama3;
        return ok_status();
      }
      return status::unsupported(where + ": Split pre-tokenizer regex " + json(regex).dump() +
                                 " is not supported (GPT-2's, Qwen2's and Llama-3's regexes are)");
    }
  }
  return status::unsupported(where + ": pre-tokenizer \"" + type +
                             "\" is not supported (ByteLevel with GPT-2's regex, Split with Qwen2's or Llama-3's regex "
                             "then ByteLevel, Metaspace, or none are)");
}

status load_normalizer(bpe_tokenizer_impl& t, const json& n, const std::string& where) {
  if (n.is_null()) return ok_status();
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const auto& s : n.value("normalizers", json::array())) TESSERA_RETURN_IF_ERROR(load_normalizer(t, s, where));
    return ok_status();
  }
  if (type == "Prepend") {
    t.normalizer.push_back({norm_step::kind::prepend, {}, n.value("prepend", "")});
    return ok_status();
  }
  if (type == "Replace") {
    if (!n.contains("pattern") || !n["pattern"].contains("String"))
      return status::unsupported(where + ": normalizer Replace with a regex pattern is not supported (only a string)");
    t.normalizer.push_back({norm_step::kind::replace, n["pattern"]["String"].get<std::string>(), n.value("content", "")});
    return ok_status();
  }
  if (type == "NFC") {
    t.normalizer.push_back({norm_step::kind::nfc, {}, {}});
    return ok_status();
  }
  return status::unsupported(where + ": normalizer \"" + type + "\" is not supported (Prepend, Replace, NFC, Sequence are)");
}

status load_post_processor(bpe_tokenizer_impl& t, const json& p, const std::string& where) {
  if (p.is_null()) return ok_status();
  const std::string type = p.value("type", "");
  if (type == "ByteLevel") return ok_status();  // offsets only
  if (type == "Sequence") {
    for (const auto& s : p.value("processors", json::array())) TESSERA_RETURN_IF_ERROR(load_post_processor(t, s, where));
    return ok_status();
  }
  if (type == "RobertaProcessing") {  // <s> $A </s> (RoBERTa's tokenizer.json)
    if (!p.contains("cls") || !p.contains("sep") || !p["cls"].is_array() || p["cls"].size() != 2 || !p["sep"].is_array() ||
        p["sep"].size() != 2)
      return status::invalid(where + ": RobertaProcessing needs \"cls\" and \"sep\" as [token, id]");
    t.prefix = {p["cls"][1].get<int32_t>()};
    t.suffix = {p["sep"][1].get<int32_t>()};
    return ok_status();
  }
  if (type != "TemplateProcessing")
    return status::unsupported(where + ": post-processor \"" + type +
                               "\" is not supported (TemplateProcessing, RobertaProcessing, ByteLevel are)");
  bool seen_sequence = false;
  const json specials = p.value("special_tokens", json::object());
  for (const auto& piece : p.value("single", json::array())) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken")) return status::invalid(where + ": TemplateProcessing piece is neither Sequence nor SpecialToken");
    const std::string name = piece["SpecialToken"].value("id", "");
    if (!specials.contains(name) || !specials[name].contains("ids"))
      return status::invalid(where + ": TemplateProcessing names special token \"" + name + "\" without ids");
    for (const auto& id : specials[name]["ids"]) (seen_sequence ? t.suffix : t.prefix).push_back(id.get<int32_t>());
  }
  return ok_status();
}

status load_model(bpe_tokenizer_impl& t, const json& m, const std::string& where) {
  const std::string type = m.value("type", "BPE");
  if (type != "BPE") return status::unsupported(where + ": model \"" + type + "\" is not supported (BPE is)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null() && m[k] != "")
      return status::unsupported(where + ": BPE " + k + " is not supported");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    return status::unsupported(where + ": BPE dropout is not supported (encoding must be deterministic)");
  TESSERA_RETURN_IF_ERROR(load_vocab(t, m.value("vocab", json()), where));
  t.byte_fallback = m.value("byte_fallback", false);
  t.fuse_unk = m.value("fuse_unk", false);
  t.ignore_merges = m.value("ignore_merges", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = t.ids.find(m["unk_token"].get<std::string>());
    if (it == t.ids.end()) return status::invalid(where + ": unk_token \"" + m["unk_token"].get<std::string>() + "\" is not in the vocab");
    t.unk = it->second;
  }
  const json merges = m.value("merges", json::array());
  for (size_t k = 0; k < merges.size(); ++k) {
    const json& e = merges[k];
    const std::string at = where + " merge " + std::to_string(k);
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return status::invalid(at + ": \"" + s + "\" is not two tokens separated by one space");
      TESSERA_RETURN_IF_ERROR(add_merge(t, std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1), at));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      TESSERA_RETURN_IF_ERROR(add_merge(t, e[0].get<std::string>(), e[1].get<std::string>(), at));
    } else {
      return status::invalid(at + ": neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return ok_status();
}

void pick_bos_eos(bpe_tokenizer_impl& t, const json& config) {
  auto named = [&](const char* key) -> int32_t {
    if (!config.contains(key)) return -2;
    const std::string s = json_string_or_content(config[key]);
    auto it = t.ids.find(s);
    return it == t.ids.end() ? -1 : it->second;
  };
  auto first_of = [&](std::initializer_list<const char*> names) -> int32_t {
    for (const char* n : names)
      if (auto it = t.ids.find(n); it != t.ids.end()) return it->second;
    return -1;
  };
  if (config.contains("chat_template") && config["chat_template"].is_string()) t.chat_template = config["chat_template"].get<std::string>();
  const int32_t b = named("bos_token"), e = named("eos_token");
  t.bos = b != -2 ? b : first_of({"<s>", "<|begin_of_text|>", "<|endoftext|>"});
  t.eos = e != -2 ? e : first_of({"</s>", "<|end_of_text|>", "<|endoftext|>"});
  if (config.contains("add_bos_token") || config.contains("add_eos_token")) {
    t.prefix.clear();
    t.suffix.clear();
    if (config.value("add_bos_token", false) && t.bos >= 0) t.prefix.push_back(t.bos);
    if (config.value("add_eos_token", false) && t.eos >= 0) t.suffix.push_back(t.eos);
  }
}

result<json> parse_json(std::string_view text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    return status::invalid(source + ": not valid JSON: " + e.what());
  }
}

}  // namespace

struct bpe_tokenizer_access {
  static bpe_tokenizer make(std::shared_ptr<const bpe_tokenizer_impl> impl) {
    bpe_tokenizer t;
    t.impl_ = std::move(impl);
    return t;
  }
};

namespace {

result<std::shared_ptr<bpe_tokenizer_impl>> tokenizer_json(std::string_view text, const std::string& source, const json& config) {
  auto parsed = parse_json(text, source);
  if (!parsed) return parsed.error();
  const json& j = *parsed;
  if (!j.is_object() || !j.contains("model")) return status::invalid(source + ": no \"model\"; is it a Hugging Face tokenizer.json?");
  auto t = std::make_shared<bpe_tokenizer_impl>();
  try {
    TESSERA_RETURN_IF_ERROR(load_model(*t, j["model"], source));
    for (const auto& a : j.value("added_tokens", json::array())) {
      added_token at;
      at.content = a.value("content", "");
      at.id = a.value("id", -1);
      at.special = a.value("special", false);
      at.lstrip = a.value("lstrip", false);
      at.rstrip = a.value("rstrip", false);
      at.normalized = a.value("normalized", !at.special);
      if (a.value("single_word", false))
        return status::unsupported(source + ": added token \"" + at.content + "\" has single_word, which is not supported");
      t->added.push_back(std::move(at));
    }
    TESSERA_RETURN_IF_ERROR(load_normalizer(*t, j.value("normalizer", json()), source));
    TESSERA_RETURN_IF_ERROR(load_pre_tokenizer(*t, j.value("pre_tokenizer", json()), source));
    TESSERA_RETURN_IF_ERROR(load_post_processor(*t, j.value("post_processor", json()), source));
    const bool byte_level = t->pre == pre_kind::byte_level ||
                            (j.contains("decoder") && j["decoder"].is_object() && j["decoder"].value("type", "") == "ByteLevel");
    t->kind = byte_level ? bpe_kind::byte_level : bpe_kind::sentencepiece;
    if (byte_level && t->byte_fallback) return status::unsupported(source + ": byte fallback with a byte-level pre-tokenizer");
    TESSERA_RETURN_IF_ERROR(t->finish(source));
    pick_bos_eos(*t, config);
    t->mark_specials();
    TESSERA_RETURN_IF_ERROR(load_decoder(*t, j.value("decoder", json()), source));
  } catch (const json::exception& e) {
    return status::invalid(source + ": unexpected structure: " + e.what());
  }
  return t;
}

result<std::shared_ptr<bpe_tokenizer_impl>> vocab_merges(std::string_view vocab_json, std::string_view merges_txt,
                                                         const std::string& source, const json& config) {
  auto parsed = parse_json(vocab_json, source);
  if (!parsed) return parsed.error();
  auto t = std::make_shared<bpe_tokenizer_impl>();
  TESSERA_RETURN_IF_ERROR(load_vocab(*t, *parsed, source));
  line_reader lines(merges_txt);
  for (std::string_view l; lines.next(l);) {
    if (l.empty() || l.starts_with("#version")) continue;
    const size_t sp = l.find(' ');
    const std::string where = source + " merges line " + std::to_string(lines.number());
    if (sp == std::string_view::npos || l.find(' ', sp + 1) != std::string_view::npos)
      return status::invalid(where + ": \"" + std::string(l) + "\" is not two tokens separated by one space");
    TESSERA_RETURN_IF_ERROR(add_merge(*t, l.substr(0, sp), l.substr(sp + 1), where));
  }
  t->kind = bpe_kind::byte_level;
  t->pre = pre_kind::byte_level;
  if (auto it = t->ids.find("<|endoftext|>"); it != t->ids.end()) t->added.push_back({"<|endoftext|>", it->second, true, false, false, false});
  TESSERA_RETURN_IF_ERROR(t->finish(source));
  pick_bos_eos(*t, config);
  if (auto it = t->ids.find("<|endoftext|>"); it != t->ids.end() && !config.contains("unk_token")) t->unk = it->second;
  t->mark_specials();
  t->pieces.assign(t->tokens.size(), {});
  byte_level_decoder(*t);
  return t;
}

}  // namespace

// ---- public API ----

namespace {

result<json> config_or_empty(std::string_view text, std::string_view source) {
  if (text.empty()) return json::object();
  auto parsed = parse_json(text, std::string(source) + " (tokenizer config)");
  if (!parsed) return parsed.error();
  if (!parsed->is_object()) return status::invalid(std::string(source) + ": the tokenizer config is not a JSON object");
  return parsed;
}

}  // namespace

result<bpe_tokenizer> bpe_tokenizer::from_tokenizer_json(std::string_view json_text, std::string_view source,
                                                         std::string_view tokenizer_config) {
  auto config = config_or_empty(tokenizer_config, source);
  if (!config) return config.error();
  auto t = tokenizer_json(json_text, std::string(source), *config);
  if (!t) return t.error();
  return bpe_tokenizer_access::make(std::move(*t));
}

result<bpe_tokenizer> bpe_tokenizer::from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt,
                                                       std::string_view source, std::string_view tokenizer_config) {
  auto config = config_or_empty(tokenizer_config, source);
  if (!config) return config.error();
  auto t = vocab_merges(vocab_json, merges_txt, std::string(source), *config);
  if (!t) return t.error();
  return bpe_tokenizer_access::make(std::move(*t));
}

result<bpe_tokenizer> bpe_tokenizer::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  if (!fs::is_directory(d)) return status::not_found(dir + ": not a folder (a tokenizer is a folder with tokenizer.json, or vocab.json and merges.txt)");
  json config = json::object();
  if (fs::exists(d / "tokenizer_config.json")) {
    auto text = read_text_file(d / "tokenizer_config.json");
    if (!text) return text.error();
    auto parsed = parse_json(*text, (d / "tokenizer_config.json").string());
    if (!parsed) return parsed.error();
    if (parsed->is_object()) config = std::move(*parsed);
  }
  result<std::shared_ptr<bpe_tokenizer_impl>> t = status::internal("unset");
  if (fs::exists(d / "tokenizer.json")) {
    auto text = read_text_file(d / "tokenizer.json");
    if (!text) return text.error();
    t = tokenizer_json(*text, (d / "tokenizer.json").string(), config);
  } else if (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt")) {
    auto v = read_text_file(d / "vocab.json");
    if (!v) return v.error();
    auto m = read_text_file(d / "merges.txt");
    if (!m) return m.error();
    t = vocab_merges(*v, *m, dir + "/{vocab.json,merges.txt}", config);
  } else {
    return status::not_found(dir + ": has neither tokenizer.json nor vocab.json + merges.txt");
  }
  if (!t) return t.error();
  return bpe_tokenizer_access::make(std::move(*t));
}

result<bpe_tokenizer> bpe_tokenizer::preset(std::string_view name) {
  if (name != "gpt2" && name != "llama")
    return status::not_found("no tokenizer preset \"" + std::string(name) + "\" (gpt2, llama)");
  std::vector<std::string> roots;
  if (const char* env = std::getenv("TESSERA_TOKENIZER_DIR"); env && *env) roots.emplace_back(env);
  if (*TESSERA_TOKENIZER_PRESET_DIR) roots.emplace_back(TESSERA_TOKENIZER_PRESET_DIR);
  std::string tried;
  for (const auto& r : roots) {
    const std::string dir = r + "/" + std::string(name);
    if (std::filesystem::is_directory(dir)) return from_dir(dir);
    tried += (tried.empty() ? "" : ", ") + dir;
  }
  return status::not_found("tokenizer preset \"" + std::string(name) + "\" not found (looked in " +
                           (tried.empty() ? std::string("no folder") : tried) +
                           "); build the target tokenizer-presets (it needs scripts/setup's npm ci in tests/clients) "
                           "or set TESSERA_TOKENIZER_DIR to a folder holding " + std::string(name) + "/");
}

result<bpe_tokenizer> bpe_tokenizer::load(std::string_view name_or_dir) {
  if (name_or_dir == "gpt2" || name_or_dir == "llama") return preset(name_or_dir);
  return from_dir(std::string(name_or_dir));
}

result<std::vector<int32_t>> bpe_tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  if (!unicode::is_valid_utf8(text)) {
    auto e = unicode::decode_utf8(text);  // names the byte and what is wrong
    return e ? status::invalid("invalid UTF-8; pass UTF-8 text") : e.error();
  }
  const bpe_tokenizer_impl& t = *impl_;
  std::vector<int32_t> out;
  if (add_special) out = t.prefix;
  status st;
  t.split_added(text, false, parse_special, [&](std::string_view seg, int32_t id, size_t offset) {
    if (!st.ok()) return;
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    const std::string norm = t.normalize(seg);
    t.split_added(norm, true, parse_special, [&](std::string_view part, int32_t pid, size_t poff) {
      if (!st.ok()) return;
      if (pid >= 0) out.push_back(pid);
      else st = t.pre_tokenize(part, offset == 0 && poff == 0, out);
    });
  });
  if (!st.ok()) return st;
  if (add_special) out.insert(out.end(), t.suffix.begin(), t.suffix.end());
  return out;
}

namespace {

/// HF's ByteFallback: a run of byte tokens is its UTF-8 text, or one U+FFFD per byte if ill-formed.
void flush_byte_run(std::string& run, std::string& out) {
  if (run.empty()) return;
  if (unicode::is_valid_utf8(run)) out += run;
  else
    for (size_t k = 0; k < run.size(); ++k) out.append(unicode::replacement_utf8);
  run.clear();
}

void strip_spaces(std::string& s, int n) {
  size_t k = 0;
  while (static_cast<int>(k) < n && k < s.size() && s[k] == ' ') ++k;
  s.erase(0, k);
}

}  // namespace

result<std::string> bpe_tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const bpe_tokenizer_impl& t = *impl_;
  std::string out, run;
  for (int32_t id : ids) {
    if (id < 0 || id >= t.size()) return status::invalid("token id " + std::to_string(id) + " is outside the vocab (0.." + std::to_string(t.size() - 1) + ")");
    if (skip_special && t.special[static_cast<size_t>(id)]) continue;
    const decoded_piece& p = t.pieces[static_cast<size_t>(id)];
    if (p.byte >= 0) {
      run.push_back(static_cast<char>(p.byte));
      continue;
    }
    flush_byte_run(run, out);
    out += p.bytes;
  }
  flush_byte_run(run, out);
  if (t.decode_lossy && !unicode::is_valid_utf8(out)) {
    std::string fixed;
    unicode::append_utf8_lossy(out, fixed);
    out = std::move(fixed);
  }
  strip_spaces(out, t.strip_leading);
  return out;
}

result<std::string> bpe_tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= impl_->size()) return status::invalid("token id " + std::to_string(id) + " is outside the vocab");
  return impl_->tokens[static_cast<size_t>(id)];
}

result<std::string> bpe_tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= impl_->size()) return status::invalid("token id " + std::to_string(id) + " is outside the vocab");
  const decoded_piece& p = impl_->pieces[static_cast<size_t>(id)];
  return p.byte >= 0 ? std::string(1, static_cast<char>(p.byte)) : p.bytes;
}

int32_t bpe_tokenizer::token_id(std::string_view token) const {
  auto it = impl_->ids.find(std::string(token));
  return it == impl_->ids.end() ? -1 : it->second;
}

bool bpe_tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->size() && impl_->special[static_cast<size_t>(id)];
}

int32_t bpe_tokenizer::bos_id() const { return impl_->bos; }
int32_t bpe_tokenizer::eos_id() const { return impl_->eos; }
int32_t bpe_tokenizer::unk_id() const { return impl_->unk; }
int32_t bpe_tokenizer::vocab_size() const { return impl_->size(); }
bpe_kind bpe_tokenizer::kind() const { return impl_->kind; }
size_t bpe_tokenizer::merges_size() const { return impl_->num_merges; }
std::vector<bpe_merge> bpe_tokenizer::merges() const {
  std::vector<std::pair<int32_t, bpe_merge>> ranked;
  impl_->merges.for_each([&](int32_t a, int32_t b, const merge_table::entry& e) { ranked.push_back({e.rank, {a, b, e.merged}}); });
  std::sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<bpe_merge> out;
  out.reserve(ranked.size());
  for (const auto& r : ranked) out.push_back(r.second);
  return out;
}
const std::string& bpe_tokenizer::chat_template() const { return impl_->chat_template; }

// ---- stream_decoder ----

stream_decoder::stream_decoder(const bpe_tokenizer& tok, bool skip_special)
    : impl_(tok.impl_), skip_special_(skip_special), strip_left_(tok.impl_->strip_leading) {}

result<std::string> stream_decoder::push(int32_t id) {
  const bpe_tokenizer_impl& t = *impl_;
  if (id < 0 || id >= t.size()) return status::invalid("token id " + std::to_string(id) + " is outside the vocab (0.." + std::to_string(t.size() - 1) + ")");
  std::string out;
  if (skip_special_ && t.special[static_cast<size_t>(id)]) return out;
  const decoded_piece& p = t.pieces[static_cast<size_t>(id)];
  if (p.byte >= 0) {
    pending_.push_back(static_cast<char>(p.byte));
  } else if (t.decode_lossy) {
    pending_ += p.bytes;
  } else {
    // A text token ends a run of byte tokens: what is left of it can never complete.
    for (size_t k = 0; k < pending_.size(); ++k) out.append(unicode::replacement_utf8);
    pending_.clear();
    out += p.bytes;
  }
  // Emit every complete character (and U+FFFD for each ill-formed part); hold an unfinished tail.
  size_t i = 0;
  while (i < pending_.size()) {
    const auto u = unicode::next_utf8(pending_, i);
    if (u.kind == unicode::utf8_unit::incomplete) break;
    if (u.kind == unicode::utf8_unit::valid) out.append(pending_, i, u.length);
    else out.append(unicode::replacement_utf8);
    i += u.length;
  }
  pending_.erase(0, i);
  return emit(std::move(out));
}

std::string stream_decoder::flush() {
  std::string out;
  if (impl_->decode_lossy) unicode::append_utf8_lossy(pending_, out);
  else
    for (size_t k = 0; k < pending_.size(); ++k) out.append(unicode::replacement_utf8);
  pending_.clear();
  return emit(std::move(out));
}

std::string stream_decoder::emit(std::string text) {
  while (strip_left_ > 0 && !text.empty()) {
    if (text.front() != ' ') {
      strip_left_ = 0;
      break;
    }
    text.erase(0, 1);
    --strip_left_;
  }
  return text;
}

}  // namespace tessera::models
