// The start of every LLaMA-style test vocabulary (the tokenizer test and the tokenizer fuzzer):
// <unk> <s> </s>, then the 256 byte-fallback tokens <0x00>..<0xFF> (ids 3..258).
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>

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

}  // namespace tessera::models::testing
