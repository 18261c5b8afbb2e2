// BPE tokenizers on small hand-made vocabularies: merge priority, byte fallback, special tokens,
// ill-formed UTF-8, the stream decoder on characters split over tokens, and loading errors.
// (Exactness on the real GPT-2 and LLaMA vocabularies: tests/clients/bpe_exactness.test.mjs.)
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tessera/models/bpe_tokenizer.hpp"
#include "byte_vocab.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {
using json = nlohmann::json;

std::vector<int32_t> ids_of(const bpe_tokenizer& t, std::string_view text, bool add_special = false, bool parse_special = true) {
  auto r = t.encode(text, add_special, parse_special);
  EXPECT_TRUE(r) << r.error().to_string();
  return r ? *r : std::vector<int32_t>{};
}

std::vector<std::string> tokens_of(const bpe_tokenizer& t, std::string_view text, bool add_special = false) {
  std::vector<std::string> out;
  for (int32_t id : ids_of(t, text, add_special)) out.push_back(*t.token_text(id));
  return out;
}

std::string decoded(const bpe_tokenizer& t, const std::vector<int32_t>& ids, bool skip = false) {
  auto r = t.decode(ids, skip);
  EXPECT_TRUE(r) << r.error().to_string();
  return r ? *r : "<error>";
}

// GPT-2's byte -> character map, written out independently of the library's.
using testing::byte_char;

/// A byte-level vocab: the 256 byte characters, then the merges' results, then <|endoftext|>.
bpe_tokenizer byte_level(const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  std::string m = "#version: 0.2\n";
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = static_cast<int>(vocab.size());
    m += a + " " + b + "\n";
  }
  vocab["<|endoftext|>"] = static_cast<int>(vocab.size());
  auto t = bpe_tokenizer::from_vocab_merges(vocab.dump(), m);
  EXPECT_TRUE(t) << t.error().to_string();
  return std::move(*t);
}

/// A LLaMA-style tokenizer.json: <unk> <s> </s>, 256 byte tokens, the given tokens, merges.
json llama_json(const std::vector<std::string>& tokens, const std::vector<std::string>& merges, bool byte_fallback = true) {
  json vocab = testing::byte_fallback_vocab();
  for (const auto& t : tokens)
    if (!vocab.contains(t)) vocab[t] = static_cast<int>(vocab.size());
  auto special = [](int id, const char* s) {
    return json{{"id", id}, {"content", s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  return json{
      {"added_tokens", {special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")}},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                                            {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", {{"type", "TemplateProcessing"},
                          {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                                       {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                       {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", byte_fallback},
                 {"vocab", vocab}, {"merges", merges}}}};
}

bpe_tokenizer from_json(const json& j) {
  auto t = bpe_tokenizer::from_tokenizer_json(j.dump());
  EXPECT_TRUE(t) << t.error().to_string();
  return std::move(*t);
}

const std::vector<std::string> llama_tokens = {"\u2581", "H", "e", "l", "o", "w", "r", "d", "a", "b", "c", "\u2581H", "el", "ll",
                                               "lo", "\u2581Hel", "\u2581Hello", "\u2581w", "or", "\u2581wor", "ld", "\u2581world",
                                               "\u2581\u2581", "ab", "bc", "abc"};
const std::vector<std::string> llama_merges = {"\u2581 H", "e l", "\u2581H el", "l o", "\u2581Hel lo", "\u2581 w", "o r",
                                               "\u2581w or", "l d", "\u2581wor ld", "\u2581 \u2581"};

TEST(bpe_tokenizer, merges_apply_by_rank_not_by_position) {
  const std::string g = byte_char(' ');  // "Ġ"
  // "abc": (b,c) ranks before (a,b) -> a + bc; the other order -> ab + c.
  auto bc_first = byte_level({{"b", "c"}, {"a", "b"}});
  EXPECT_EQ(tokens_of(bc_first, "abc"), (std::vector<std::string>{"a", "bc"}));
  auto ab_first = byte_level({{"a", "b"}, {"b", "c"}});
  EXPECT_EQ(tokens_of(ab_first, "abc"), (std::vector<std::string>{"ab", "c"}));
  // Merges chain: a later merge may use an earlier one's result.
  auto chain = byte_level({{"b", "c"}, {"a", "bc"}});
  EXPECT_EQ(tokens_of(chain, "abcabc"), (std::vector<std::string>{"abc", "abc"}));
  // Equal ranks: leftmost first ("aaa" -> aa + a, not a + aa).
  auto aa = byte_level({{"a", "a"}});
  EXPECT_EQ(tokens_of(aa, "aaa"), (std::vector<std::string>{"aa", "a"}));
  EXPECT_EQ(tokens_of(aa, "aaaaa"), (std::vector<std::string>{"aa", "aa", "a"}));
  // The pre-tokenizer's words are merged separately: no merge crosses " ".
  auto sp = byte_level({{g, "a"}, {"a", g}});
  EXPECT_EQ(tokens_of(sp, "a a"), (std::vector<std::string>{"a", g + "a"}));
}

TEST(bpe_tokenizer, a_later_duplicate_merge_replaces_the_earlier_and_ignore_merges) {
  // HF's merges map (and gpt-3-encoder's, llama-tokenizer-js's) keeps the last rank of a pair.
  auto dup = byte_level({{"a", "b"}, {"b", "c"}, {"a", "b"}});
  EXPECT_EQ(dup.merges_size(), 3u);
  EXPECT_EQ(tokens_of(dup, "abc"), (std::vector<std::string>{"a", "bc"}));
  // ignore_merges: a word that is a token is that token, whatever the merges would make.
  json j = llama_json(llama_tokens, llama_merges);
  j["normalizer"] = nullptr;
  EXPECT_EQ(tokens_of(from_json(j), "abc"), (std::vector<std::string>{"a", "b", "c"}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(tokens_of(from_json(j), "abc"), (std::vector<std::string>{"abc"}));
}

TEST(bpe_tokenizer, gpt2_pre_tokenizer_splits_as_the_regex) {
  // With merges that would join across the pre-tokenizer's words, the tokens show where it split.
  const std::string g = byte_char(' ');
  auto w = byte_level({{"i", "t"}, {g, "it"}, {"'", "s"}, {"'", "r"}, {"'r", "e"}, {g, g}, {"1", "2"}, {g, "12"},
                       {"t", "'"}, {"t", "1"}});
  EXPECT_EQ(tokens_of(w, "it's"), (std::vector<std::string>{"it", "'s"}));
  EXPECT_EQ(tokens_of(w, "it're"), (std::vector<std::string>{"it", "'re"}));
  EXPECT_EQ(tokens_of(w, " it 12"), (std::vector<std::string>{g + "it", g + "12"}));
  // "   it": the run's last space goes with the word; the rest is a whitespace word of its own.
  EXPECT_EQ(tokens_of(w, "   it"), (std::vector<std::string>{g + g, g + "it"}));
  // Trailing spaces stay one word.
  EXPECT_EQ(tokens_of(w, "it  "), (std::vector<std::string>{"it", g + g}));
  // Letters and digits are separate words ("t1" does not merge).
  EXPECT_EQ(tokens_of(w, "it12"), (std::vector<std::string>{"it", "12"}));
  // Uppercase contractions are not contractions in GPT-2: "'S" is punctuation then a letter.
  EXPECT_EQ(tokens_of(w, "it'S"), (std::vector<std::string>{"it", "'", "S"}));
}

TEST(bpe_tokenizer, gpt2_whitespace_is_unicode_white_space_as_hugging_face) {
  // U+0085 is White_Space (HF's regex engine; JavaScript's \s says otherwise): " \u0085x" is the
  // words " " and "\u0085" and "x", so the space does not merge with U+0085's first byte (0xC2).
  const std::string g = byte_char(' ');
  auto t = byte_level({{g, byte_char(0xC2)}});
  const auto toks = tokens_of(t, " \xC2\x85x");
  EXPECT_EQ(toks.front(), g);
  EXPECT_EQ(decoded(t, ids_of(t, " \xC2\x85x")), " \xC2\x85x");
  // U+3000 (ideographic space) and U+00A0 are whitespace too; U+200B is not.
  auto merged = byte_level({{g, byte_char(0xE2)}});
  EXPECT_EQ(tokens_of(merged, "a \xE2\x80\x8B").at(1), g + byte_char(0xE2));  // " \u200b" one word
}

TEST(bpe_tokenizer, byte_fallback_spells_unknown_characters_in_bytes) {
  auto t = from_json(llama_json(llama_tokens, llama_merges));
  EXPECT_EQ(tokens_of(t, "Hello world"), (std::vector<std::string>{"\u2581Hello", "\u2581world"}));
  EXPECT_EQ(ids_of(t, "Hello", true).front(), 1);  // <s>
  // "é" is not in the vocab: its UTF-8 bytes C3 A9.
  EXPECT_EQ(tokens_of(t, "Hé"), (std::vector<std::string>{"\u2581H", "<0xC3>", "<0xA9>"}));
  // A 4-byte character, and "\n".
  EXPECT_EQ(tokens_of(t, "\xF0\x9F\xA6\x99\n").size(), 6u);  // ▁ + 4 bytes + <0x0A>
  EXPECT_EQ(decoded(t, ids_of(t, "H\xC3\xA9 \xF0\x9F\xA6\x99\n  a")), "H\xC3\xA9 \xF0\x9F\xA6\x99\n  a");
  EXPECT_EQ(decoded(t, ids_of(t, "Hello", true)), "<s> Hello");  // HF's decode keeps specials by default
  EXPECT_EQ(decoded(t, ids_of(t, "Hello", true), true), "Hello");
  // A leading space: Prepend adds a second ▁, and "▁ H" outranks "▁ ▁" (LLaMA: " grabbed" -> ▁ ▁gra...).
  EXPECT_EQ(tokens_of(t, " Hello"), (std::vector<std::string>{"\u2581", "\u2581Hello"}));
  EXPECT_EQ(tokens_of(t, "a  b"), (std::vector<std::string>{"\u2581", "a", "\u2581\u2581", "b"}));
  EXPECT_EQ(decoded(t, ids_of(t, " Hello")), " Hello");
  // Without byte fallback an unknown character is <unk>, and consecutive ones fuse (fuse_unk).
  auto u = from_json(llama_json(llama_tokens, llama_merges, false));
  EXPECT_EQ(tokens_of(u, "H\xC3\xA9\xC3\xA9o"), (std::vector<std::string>{"\u2581H", "<unk>", "o"}));
}

TEST(bpe_tokenizer, llama_bytes_that_form_no_character_decode_as_hugging_face) {
  auto t = from_json(llama_json(llama_tokens, llama_merges));
  const int32_t xe4 = t.token_id("<0xE4>"), xb8 = t.token_id("<0xB8>"), a = t.token_id("a");
  // A run of byte tokens cut inside a character: one U+FFFD per byte (HF's ByteFallback).
  EXPECT_EQ(decoded(t, {a, xe4, xb8, a}), "a\xEF\xBF\xBD\xEF\xBF\xBD" "a");
  EXPECT_EQ(decoded(t, {a, xe4, xb8, t.token_id("<0xAD>")}), "a\xE4\xB8\xAD");  // 中
  EXPECT_FALSE(t.decode(std::vector<int32_t>{t.vocab_size()}));
  EXPECT_FALSE(t.decode(std::vector<int32_t>{-1}));
}

TEST(bpe_tokenizer, special_tokens_typed_in_the_text) {
  auto t = from_json(llama_json(llama_tokens, llama_merges));
  // Specials are split off first; each stretch between is normalised on its own (so both words get ▁).
  EXPECT_EQ(tokens_of(t, "Hello</s>world"), (std::vector<std::string>{"\u2581Hello", "</s>", "\u2581world"}));
  EXPECT_EQ(tokens_of(t, "<s>Hello").front(), "<s>");
  // parse_special=false: "</s>" is text (bytes and characters), not the token.
  const auto plain = ids_of(t, "Hello</s>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), t.eos_id()), 0);
  EXPECT_EQ(decoded(t, plain), "Hello</s>");
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_TRUE(t.is_special(1));
  EXPECT_FALSE(t.is_special(t.token_id("\u2581Hello")));

  auto g = byte_level({{byte_char(' '), "a"}});
  const int32_t eot = g.token_id("<|endoftext|>");
  EXPECT_EQ(g.bos_id(), eot);
  EXPECT_EQ(g.eos_id(), eot);
  EXPECT_EQ(ids_of(g, "a<|endoftext|> a"), (std::vector<int32_t>{g.token_id("a"), eot, g.token_id(byte_char(' ') + "a")}));
  EXPECT_EQ(ids_of(g, "a", true).size(), 1u);  // GPT-2 adds no bos
  EXPECT_GT(ids_of(g, "<|endoftext|>", false, false).size(), 1u);
  EXPECT_EQ(decoded(g, {eot}), "<|endoftext|>");
  EXPECT_EQ(decoded(g, {eot}, true), "");

  // lstrip / rstrip take the whitespace around the token with it.
  json j = llama_json(llama_tokens, llama_merges);
  j["added_tokens"].push_back({{"id", 400}, {"content", "<mask>"}, {"lstrip", true}, {"rstrip", true}, {"normalized", false}, {"special", true}});
  auto m = from_json(j);
  EXPECT_EQ(tokens_of(m, "Hello  <mask>  world"), (std::vector<std::string>{"\u2581Hello", "<mask>", "\u2581world"}));
}

TEST(bpe_tokenizer, ill_formed_utf8_is_an_error_naming_the_byte) {
  auto g = byte_level({});
  auto t = from_json(llama_json(llama_tokens, llama_merges));
  for (const bpe_tokenizer* tok : {&g, &t}) {
    for (std::string_view bad : {std::string_view("ab\xFF"), std::string_view("\xC3"), std::string_view("x\xE4\xB8"),
                                 std::string_view("\xED\xA0\x80"), std::string_view("\xC0\xAF"), std::string_view("\xF4\x90\x80\x80")}) {
      auto r = tok->encode(bad);
      ASSERT_FALSE(r) << "accepted " << ::testing::PrintToString(bad);
      EXPECT_NE(r.error().message().find("invalid UTF-8 at byte"), std::string::npos) << r.error().message();
    }
  }
  auto r = g.encode("ok \xE2\x82");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("byte 3"), std::string::npos) << r.error().message();
  // A NUL byte is valid UTF-8 and round-trips.
  const std::string nul("a\0b", 3);
  EXPECT_EQ(decoded(g, ids_of(g, nul)), nul);
  EXPECT_EQ(decoded(t, ids_of(t, nul)), nul);
}

TEST(bpe_tokenizer, byte_level_decode_of_a_cut_character_is_one_replacement) {
  auto g = byte_level({});
  const auto ids = ids_of(g, "\xE4\xB8\xAD!");  // 中! as four byte tokens
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(decoded(g, {ids[0], ids[1], ids[3]}), "\xEF\xBF\xBD!");  // one U+FFFD for the cut E4 B8
  EXPECT_EQ(decoded(g, {ids[1]}), "\xEF\xBF\xBD");
  EXPECT_EQ(*g.token_bytes(ids[0]), "\xE4");
}

TEST(stream_decoder, holds_a_character_split_over_tokens_until_it_completes) {
  auto g = byte_level({});
  const std::string text = "a\xF0\x9F\xA6\x99" "b\xE4\xB8\xAD";  // a🦙b中
  const auto ids = ids_of(g, text);
  ASSERT_EQ(ids.size(), 9u);
  stream_decoder s(g);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(*s.push(id));
  EXPECT_EQ(out, (std::vector<std::string>{"a", "", "", "", "\xF0\x9F\xA6\x99", "b", "", "", "\xE4\xB8\xAD"}));
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.flush(), "");
  // A byte that can never start a character is U+FFFD at once; an unfinished one at flush.
  stream_decoder bad(g);
  EXPECT_EQ(*bad.push(ids[1]), "");                 // F0: held
  EXPECT_EQ(*bad.push(ids[0]), "\xEF\xBF\xBD" "a");  // F0 then 'a': F0 is ill-formed
  EXPECT_EQ(*bad.push(ids[6]), "");                 // E4 held
  EXPECT_EQ(bad.pending(), 1u);
  EXPECT_EQ(bad.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(*bad.push(ids[0]), "a");                // goes on after flush
  EXPECT_FALSE(bad.push(-3));
  EXPECT_FALSE(bad.push(g.vocab_size()));
}

TEST(stream_decoder, equals_decode_for_every_prefix) {
  auto t = from_json(llama_json(llama_tokens, llama_merges));
  auto g = byte_level({{"a", "b"}, {byte_char(' '), "ab"}});
  const std::string text = " Hello  world\n\xE4\xB8\xAD\xF0\x9F\xA6\x99 ab \xC3\xA9\xC3\xA9";
  for (const bpe_tokenizer* tok : {&t, &g}) {
    const auto ids = ids_of(*tok, text, true);
    stream_decoder s(*tok);
    std::string streamed;
    for (size_t k = 0; k < ids.size(); ++k) {
      streamed += *s.push(ids[k]);
      // What is out so far is a prefix of the full decode, and never ends inside a character.
      const std::string full = decoded(*tok, ids, true);
      EXPECT_EQ(full.compare(0, streamed.size(), streamed), 0) << k;
    }
    streamed += s.flush();
    EXPECT_EQ(streamed, text);
    EXPECT_EQ(decoded(*tok, ids, true), text);
  }
  // LLaMA: the leading space that Prepend added is stripped once, at the start of the stream only.
  stream_decoder s(t);
  EXPECT_EQ(*s.push(t.token_id("\u2581Hello")), "Hello");
  EXPECT_EQ(*s.push(t.token_id("\u2581world")), " world");
}

TEST(bpe_tokenizer, tokenizer_json_byte_level_equals_vocab_merges) {
  const std::string g = byte_char(' ');
  auto a = byte_level({{g, "t"}, {"h", "e"}, {g + "t", "he"}});
  json vocab = json::object();
  for (int32_t id = 0; id < a.vocab_size(); ++id) vocab[*a.token_text(id)] = id;
  json j = {{"added_tokens", {{{"id", a.token_id("<|endoftext|>")}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}}},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"post_processor", {{"type", "ByteLevel"}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {json::array({g, "t"}), "h e", json::array({g + "t", "he"})}}}}};
  auto b = from_json(j);
  EXPECT_EQ(b.kind(), bpe_kind::byte_level);
  EXPECT_EQ(b.merges_size(), 3u);
  for (std::string_view text : {"the theme", " the<|endoftext|>the", "\xE4\xB8\xAD the  \n"}) EXPECT_EQ(ids_of(a, text), ids_of(b, text)) << text;
  EXPECT_EQ(tokens_of(b, "the the"), (std::vector<std::string>{"t", "he", g + "the"}));
}

// Qwen2's and Llama-3's tokenizer.json: NFC, then Split on their regex, then ByteLevel without
// its own regex. The real vocabulary is checked against an npm implementation in
// tests/clients/bpe_exactness.test.mjs; these pin the regex's corners with merges that would join
// across its pieces.
namespace {
json split_json(const bpe_tokenizer& a, const std::vector<std::pair<std::string, std::string>>& pairs, const std::string& regex) {
  json vocab = json::object();
  for (int32_t id = 0; id < a.vocab_size(); ++id) vocab[*a.token_text(id)] = id;
  json merges = json::array();
  for (const auto& [l, r] : pairs) merges.push_back(json::array({l, r}));
  return {{"added_tokens", json::array()},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer", {{"type", "Sequence"},
                             {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                                                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
          {"post_processor", {{"type", "ByteLevel"}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}  // namespace

TEST(bpe_tokenizer, qwen2_and_llama3_split_regexes) {
  const std::string g = byte_char(' '), nl = byte_char('\n'), tab = byte_char('\t');
  // Every merge listed as a pair, so the merged tokens show where the split cut.
  std::vector<std::pair<std::string, std::string>> merges = {
      {"1", "2"}, {"12", "3"}, {"123", "4"}, {"i", "t"}, {g, "it"}, {tab, "it"}, {"'", "S"}, {"'", "s"}, {"!", "!"},
      {g, "!!"}, {"!!", nl}, {g, nl}, {nl, nl}, {g, g}, {"t", "1"}, {".", nl}, {nl, g}};
  // 'ſ' (U+017F, C5 BF) in byte characters, and the pair that merges it after an apostrophe.
  const std::string long_s = byte_char(0xC5) + byte_char(0xBF);
  merges.push_back({byte_char(0xC5), byte_char(0xBF)});
  merges.push_back({"'", long_s});
  auto base = byte_level(merges);
  auto qwen = from_json(split_json(base, merges, kQwen2));
  auto llama3 = from_json(split_json(base, merges, kLlama3));
  using v = std::vector<std::string>;
  // Numbers: one digit a piece in Qwen2, up to three in Llama-3.
  EXPECT_EQ(tokens_of(qwen, "1234"), (v{"1", "2", "3", "4"}));
  EXPECT_EQ(tokens_of(llama3, "1234"), (v{"123", "4"}));
  // Contractions in any case, long s folded to s; letters and digits never join.
  EXPECT_EQ(tokens_of(qwen, "it'S"), (v{"it", "'S"}));
  EXPECT_EQ(tokens_of(qwen, "it'\u017F"), (v{"it", "'" + long_s}));
  EXPECT_EQ(tokens_of(qwen, "it1"), (v{"it", "1"}));
  // A word takes one leading non-letter that is not a line break: a space, a tab.
  EXPECT_EQ(tokens_of(qwen, " it\tit"), (v{g + "it", tab + "it"}));
  EXPECT_EQ(tokens_of(qwen, "\nit"), (v{nl, "it"}));
  // Punctuation keeps a leading space and the line breaks after it.
  EXPECT_EQ(tokens_of(qwen, " !!\nit"), (v{g + "!!", nl, "it"}));
  EXPECT_EQ(tokens_of(qwen, "!!\n\nit"), (v{"!!" + nl, nl, "it"}));
  // Whitespace runs: up to the last line break; the last space before a word goes with it.
  EXPECT_EQ(tokens_of(qwen, " \n\n  it"), (v{g + nl, nl, g, g + "it"}));
  EXPECT_EQ(tokens_of(qwen, "it  "), (v{"it", g + g}));
  // NFC first: e + combining acute is é.
  EXPECT_EQ(ids_of(qwen, "e\u0301"), ids_of(qwen, "\u00E9"));
  EXPECT_EQ(decoded(qwen, ids_of(qwen, "cafe\u0301")), "caf\u00E9");
  // Another Split regex, or another behaviour, is refused by name.
  auto other = split_json(base, merges, R"(\w+|\s+)");
  auto r = bpe_tokenizer::from_tokenizer_json(other.dump());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("Split pre-tokenizer regex"), std::string::npos) << r.error().message();
  auto merged = split_json(base, merges, kQwen2);
  merged["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
  r = bpe_tokenizer::from_tokenizer_json(merged.dump());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("MergedWithPrevious"), std::string::npos) << r.error().message();
}

TEST(bpe_tokenizer, metaspace_pre_tokenizer) {
  json j = llama_json(llama_tokens, llama_merges);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}}}}};
  auto t = from_json(j);
  EXPECT_EQ(tokens_of(t, "Hello world"), (std::vector<std::string>{"\u2581Hello", "\u2581world"}));
  // Metaspace prepends only when the text does not start with a space ...
  EXPECT_EQ(tokens_of(t, " Hello").front(), "\u2581Hello");
  // ... and with "first", only to the stretch at the start of the text (not after a special).
  EXPECT_EQ(tokens_of(t, "<s>Hello"), (std::vector<std::string>{"<s>", "H", "el", "lo"}));
  EXPECT_EQ(decoded(t, ids_of(t, "Hello world")), "Hello world");
  // split: each ▁ starts a word, so "▁ ▁" cannot merge across words.
  EXPECT_EQ(tokens_of(t, "a  b"), (std::vector<std::string>{"\u2581", "a", "\u2581\u2581", "b"}));
  j["pre_tokenizer"]["split"] = true;
  auto split = from_json(j);
  EXPECT_EQ(tokens_of(split, "a  b"), (std::vector<std::string>{"\u2581", "a", "\u2581", "\u2581", "b"}));
  EXPECT_EQ(decoded(split, ids_of(split, "a  b")), "a  b");
}

TEST(bpe_tokenizer, loading_errors_name_the_problem) {
  auto expect_error = [](const result<bpe_tokenizer>& r, std::string_view needle) {
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message().find(needle), std::string::npos) << r.error().message();
  };
  expect_error(bpe_tokenizer::from_tokenizer_json("{not json"), "not valid JSON");
  expect_error(bpe_tokenizer::from_tokenizer_json("{}"), "no \"model\"");
  json j = llama_json(llama_tokens, llama_merges);
  j["model"]["merges"].push_back("x y");
  expect_error(bpe_tokenizer::from_tokenizer_json(j.dump()), "merge \"x y\" uses a token not in the vocab");
  j = llama_json(llama_tokens, llama_merges);
  j["normalizer"] = {{"type", "NFKC"}};
  auto r = bpe_tokenizer::from_tokenizer_json(j.dump());
  expect_error(r, "normalizer \"NFKC\" is not supported");
  EXPECT_EQ(r.error().code(), errc::unsupported);
  j = llama_json(llama_tokens, llama_merges);
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}};
  expect_error(bpe_tokenizer::from_tokenizer_json(j.dump()), "pre-tokenizer \"Split\" is not supported");
  j = llama_json(llama_tokens, llama_merges);
  j["model"]["type"] = "WordPiece";
  expect_error(bpe_tokenizer::from_tokenizer_json(j.dump()), "model \"WordPiece\" is not supported");
  j = llama_json(llama_tokens, llama_merges);
  j["model"]["vocab"]["dup"] = 5;
  expect_error(bpe_tokenizer::from_tokenizer_json(j.dump()), "id 5 is given to both");
  expect_error(bpe_tokenizer::from_vocab_merges("{\"a\": 0}", "#version: 0.2\na b c\n"), "merges line 2");
  expect_error(bpe_tokenizer::from_dir("/nonexistent/tokenizer"), "not a folder");
  expect_error(bpe_tokenizer::preset("gpt5"), "no tokenizer preset \"gpt5\"");
  const std::string dir = testing::make_temp_dir("bpe-empty");
  expect_error(bpe_tokenizer::from_dir(dir), "neither tokenizer.json nor vocab.json + merges.txt");
}

TEST(bpe_tokenizer, from_dir_reads_tokenizer_config) {
  const std::string dir = testing::make_temp_dir("bpe-config");
  testing::write_file(dir + "/tokenizer.json", llama_json(llama_tokens, llama_merges).dump());
  testing::write_file(dir + "/tokenizer_config.json",
                      json{{"bos_token", {{"content", "<s>"}}}, {"eos_token", "</s>"}, {"add_bos_token", true}, {"add_eos_token", true},
                           {"chat_template", "{{ bos_token }}{{ messages }}"}}.dump());
  auto t = bpe_tokenizer::from_dir(dir);
  ASSERT_TRUE(t) << t.error().to_string();
  const auto ids = ids_of(*t, "Hello", true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(t->chat_template(), "{{ bos_token }}{{ messages }}");
}

}  // namespace
}  // namespace tessera::models
