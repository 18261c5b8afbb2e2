// Test vocabularies shared by the tokenizer test and the tokenizer fuzzer: the start of every
// LLaMA-style one (<unk> <s> </s>, then the 256 byte-fallback tokens <0x00>..<0xFF>, ids 3..258),
// and GPT-2's byte-level characters (bytes_to_unicode) for byte-level ones.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::models::testing {

inline nlohmann::json byte_fallback_vocab() {
  nlohmann::json vocab = nlohmann::json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  return vocab;
}

/// GPT-2's character for byte b (bytes_to_unicode), as UTF-8: printable Latin-1 bytes are
/// themselves, the others 256, 257, ... in byte order.
inline std::string byte_char(int b) {
  auto printable = [](int c) { return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255); };
  int n = 0;
  for (int c = 0; c < b; ++c)
    if (!printable(c)) ++n;
  const char32_t cp = printable(b) ? b : 256 + n;
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

}  // namespace tessera::models::testing
