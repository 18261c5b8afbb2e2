// libFuzzer target over the BPE tokenizers: the real GPT-2 and LLaMA vocabularies (the build's
// tokenizer presets), a small tokenizer.json with a Metaspace pre-tokenizer and lstrip/rstrip
// added tokens, and a small byte-level one with Qwen2's NFC + Split regex pipeline. The input is
// arbitrary bytes, used twice: as a text, and as a list of token ids.
//
// Invariants beyond "no crash, no sanitizer report, no hang":
//  - encode() fails exactly when the text is not UTF-8 (checked with utfcpp, not tessera's code);
//  - for UTF-8 text: decode(encode(x)) == x without added bos (GPT-2 with specials parsed or not;
//    LLaMA with specials as text, unless x holds U+2581, LLaMA's space marker), and the stream
//    decoder gives x too; for the Qwen2 pipeline, both give NFC(x) (utf8proc's, called here);
//  - any ids: decode() fails exactly when an id is outside the vocab, and its text is UTF-8; the
//    stream decoder's text is UTF-8 and, for GPT-2's byte-level BPE, equals decode().
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utf8.h>
#include <utf8proc.h>
#include <vector>

#include "tessera/models/bpe_tokenizer.hpp"
#include "../models/byte_vocab.hpp"

using namespace tessera::models;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "tokenizer_fuzz: %s\n", what.c_str());
  std::abort();
}

bpe_tokenizer must(tessera::result<bpe_tokenizer> t, const char* what) {
  if (!t) fail(std::string(what) + ": " + t.error().to_string());
  return std::move(*t);
}

bpe_tokenizer small_metaspace() {
  using json = nlohmann::json;
  json vocab = tessera::models::testing::byte_fallback_vocab();
  for (const char* t : {"\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab", "bc", "abc"}) vocab[t] = static_cast<int>(vocab.size());
  json j = {
      {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                        {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}},
                        {{"id", 300}, {"content", "<mask>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}, {"normalized", false}},
                        {{"id", 301}, {"content", "ab"}, {"special", false}, {"normalized", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}}}}}},
      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"vocab", vocab},
                 {"merges", {"a b", "\u2581 a", "\u2581 ab", "b c", "a bc"}}}}};
  return must(bpe_tokenizer::from_tokenizer_json(j.dump(), "fuzz tokenizer.json"), "small tokenizer");
}

// Byte-level BPE with Qwen2's tokenizer.json pipeline: NFC, Split on its regex, ByteLevel.
bpe_tokenizer small_qwen2() {
  using json = nlohmann::json;
  using tessera::models::testing::byte_char;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::string g = byte_char(' '), nl = byte_char('\n');
  json merges = json::array();
  for (auto [l, r] : std::vector<std::pair<std::string, std::string>>{{g, "a"}, {"a", "b"}, {g + "a", "b"}, {"1", "2"}, {nl, nl}, {g, nl}, {"'", "s"}}) {
    if (!vocab.contains(l + r)) vocab[l + r] = static_cast<int>(vocab.size());
    merges.push_back(json::array({l, r}));
  }
  const char* regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json j = {{"added_tokens", {{{"id", static_cast<int>(vocab.size())}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}}},
            {"normalizer", {{"type", "NFC"}}},
            {"pre_tokenizer", {{"type", "Sequence"},
                               {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                                                  {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
            {"post_processor", {{"type", "ByteLevel"}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  return must(bpe_tokenizer::from_tokenizer_json(j.dump(), "fuzz qwen2 tokenizer.json"), "small qwen2 tokenizer");
}

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0 || !out) fail("utf8proc refused text that utfcpp calls UTF-8");
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

struct tokenizers {
  bpe_tokenizer gpt2 = must(bpe_tokenizer::preset("gpt2"), "gpt2 preset (build the target tokenizer-presets)");
  bpe_tokenizer llama = must(bpe_tokenizer::preset("llama"), "llama preset (build the target tokenizer-presets)");
  bpe_tokenizer small = small_metaspace();
  bpe_tokenizer qwen2 = small_qwen2();
};

const tokenizers& all() {
  static const tokenizers t;
  return t;
}

std::string streamed(const bpe_tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  stream_decoder s(tok, skip_special);
  std::string out;
  for (int32_t id : ids) {
    auto piece = s.push(id);
    if (!piece) fail("stream_decoder refused id " + std::to_string(id) + " that encode() produced");
    if (!utf8::is_valid(piece->begin(), piece->end())) fail("stream_decoder emitted part of a character");
    out += *piece;
  }
  const std::string tail = s.flush();
  if (!utf8::is_valid(tail.begin(), tail.end())) fail("stream_decoder's flush is not UTF-8");
  return out + tail;
}

void round_trip(const bpe_tokenizer& tok, const char* name, const std::string& text, bool parse_special, bool expect_equal,
                const std::string* expected = nullptr) {
  const bool valid = utf8::is_valid(text.begin(), text.end());
  if (auto with_bos = tok.encode(text, true, parse_special); with_bos.has_value() != valid) fail(std::string(name) + ": encode() with specials disagrees");
  auto ids = tok.encode(text, false, parse_special);
  if (ids.has_value() != valid) fail(std::string(name) + ": encode() " + (valid ? "refused UTF-8: " + ids.error().to_string() : "accepted ill-formed UTF-8"));
  if (!ids) return;
  for (int32_t id : *ids)
    if (id < 0 || id >= tok.vocab_size()) fail(std::string(name) + ": encode() gave id " + std::to_string(id) + " outside the vocab");
  auto back = tok.decode(*ids);
  if (!back) fail(std::string(name) + ": decode() of encode()'s ids failed: " + back.error().to_string());
  const std::string& want = expected ? *expected : text;
  if (expect_equal && *back != want) fail(std::string(name) + ": decode(encode(x)) != " + (expected ? "NFC(x)" : "x"));
  if (expect_equal && streamed(tok, *ids, false) != want) fail(std::string(name) + ": the stream decoder's text != " + (expected ? "NFC(x)" : "x"));
}

void decode_ids(const bpe_tokenizer& tok, const char* name, const uint8_t* data, size_t size, bool stream_equals_decode) {
  std::vector<int32_t> ids;
  bool in_range = true;
  for (size_t i = 0; i + 3 <= size; i += 3) {
    // 3 bytes an id: mostly inside the vocab, sometimes just outside it or negative.
    const uint32_t v = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16);
    int32_t id = static_cast<int32_t>(v % static_cast<uint32_t>(tok.vocab_size() + 2));
    if (v % 97 == 0) id = -1 - static_cast<int32_t>(v % 3);
    in_range = in_range && id >= 0 && id < tok.vocab_size();
    ids.push_back(id);
  }
  for (bool skip : {false, true}) {
    auto text = tok.decode(ids, skip);
    if (text.has_value() != in_range) fail(std::string(name) + ": decode() of " + (in_range ? "valid ids failed" : "an id outside the vocab succeeded"));
    if (!text) continue;
    if (!utf8::is_valid(text->begin(), text->end())) fail(std::string(name) + ": decode() gave ill-formed UTF-8");
    const std::string s = streamed(tok, ids, skip);
    if (stream_equals_decode && s != *text) fail(std::string(name) + ": stream decoder != decode() on the same ids");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tokenizers& t = all();
  const std::string text(reinterpret_cast<const char*>(data), size);
  round_trip(t.gpt2, "gpt2", text, true, true);
  round_trip(t.gpt2, "gpt2 (specials as text)", text, false, true);
  const bool marker = text.find("\u2581") != std::string::npos;
  round_trip(t.llama, "llama", text, false, !marker);
  round_trip(t.llama, "llama (specials parsed)", text, true, false);
  round_trip(t.small, "small", text, true, false);
  if (utf8::is_valid(text.begin(), text.end())) {
    const std::string normal = nfc(text);
    round_trip(t.qwen2, "qwen2", text, false, true, &normal);
  } else {
    round_trip(t.qwen2, "qwen2", text, false, false);
  }
  decode_ids(t.gpt2, "gpt2", data, size, true);
  decode_ids(t.llama, "llama", data, size, false);
  decode_ids(t.small, "small", data, size, false);
  decode_ids(t.qwen2, "qwen2", data, size, true);
  return 0;
}
