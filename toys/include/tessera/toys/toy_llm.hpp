// tessera/toys/toy_llm.hpp: a deterministic stand-in decoder and tokenizer, for tests of the
// scheduler and the OpenAI API, and for measuring the LLM front door alone
// (tessera-serve --model toy-llm). Not a language model.
//
// Byte tokenizer: token i < 256 is byte i; 256 is BOS, 257 is EOS (vocabulary 258).
// Toy decoder: a paged "KV cache" holding one 64-bit state per position; the state of position p
// is a hash of the state of p-1 (read from the cache through the block table), the token and p,
// so the logits of a position are a function of the whole token prefix. A step that reads a
// position whose K/V was never written, or written for another prefix, gives an error or
// different logits: scheduler bugs (wrong block tables, a lost preemption, a wrongly shared prefix
// block) show up as tokens different from toy_llm_generate().
//
//   auto backend = make_toy_llm_backend({.num_blocks = 64});
//   auto want = toy_llm_generate(prompt, /*new_tokens=*/8);   // greedy, without a cache
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/backends/llm_backend.hpp"
#include "tessera/serving/llm_tokenizer.hpp"

namespace tessera::toys {

std::shared_ptr<const serving::llm_tokenizer> make_byte_tokenizer();

struct toy_llm_options {
  std::string name = "toy-llm";
  int32_t num_blocks = 256;
  int32_t block_tokens = 16;
  int32_t max_positions = 4096;
  /// Busy work per computed token and per logits row, imitating a model's cost.
  std::chrono::nanoseconds per_token{0};
  std::chrono::nanoseconds per_step{0};
  /// Ids 32..126 (printable ASCII, and EOS) get a head start in the logits so that greedy
  /// text is readable; 0 leaves every byte equally likely.
  float printable_bias = 2.0f;
};

std::shared_ptr<backends::step_fn_backend> make_toy_llm_backend(toy_llm_options opts = {});

/// Logits after the token prefix `tokens` (what the toy decoder computes without a cache).
std::vector<float> toy_llm_logits(const std::vector<int32_t>& tokens, float printable_bias = 2.0f);
/// Greedy continuation of `prompt`: `new_tokens` ids (stops early at EOS only when stop_at_eos).
std::vector<int32_t> toy_llm_generate(std::vector<int32_t> prompt, int32_t new_tokens,
                                      bool stop_at_eos = false, float printable_bias = 2.0f);

inline constexpr int32_t toy_llm_vocab = 258;
inline constexpr int32_t toy_llm_bos = 256;
inline constexpr int32_t toy_llm_eos = 257;

}  // namespace tessera::toys
