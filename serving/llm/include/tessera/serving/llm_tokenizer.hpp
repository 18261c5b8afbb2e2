// tessera/serving/llm_tokenizer.hpp: what the OpenAI API needs of a decoder's tokenizer, so
// that serving does not depend on one implementation (models' byte-level BPE through an adapter,
// or the toy byte tokenizer of tessera/toys/toy_llm.hpp). Streaming goes through token_stream, which never
// returns part of a UTF-8 character: bytes of a character that spans tokens are held back until
// it is complete.
//
//   auto tok = make_byte_tokenizer();
//   auto ids = tok->encode("héllo", /*add_special=*/true).value();   // [bos, 104, 195, 169, ...]
//   auto s = tok->stream();
//   std::string piece = s->push(195);   // "" (half of é)
//   piece = s->push(169);               // "é"
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::serving {

class token_stream {
 public:
  virtual ~token_stream() = default;
  /// The text that token `id` completes (possibly empty).
  virtual std::string push(int32_t id) = 0;
  /// What is held back at the end (an incomplete character as U+FFFD).
  virtual std::string flush() = 0;
};

class llm_tokenizer {
 public:
  virtual ~llm_tokenizer() = default;
  /// Token ids of `text`; with add_special, the beginning-of-sequence token first when the
  /// model has one. Thread-safe.
  virtual result<std::vector<int32_t>> encode(std::string_view text, bool add_special) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  /// One token's raw bytes (part of a UTF-8 character, when the token is), for log-probability
  /// answers; by default its decoded text (an incomplete character as U+FFFD).
  virtual std::string token_bytes(int32_t id) const { return decode({id}); }
  virtual std::unique_ptr<token_stream> stream() const = 0;
  virtual int32_t bos_id() const = 0;  ///< -1: none
  virtual int32_t eos_id() const = 0;  ///< -1: none
  virtual int32_t vocab_size() const = 0;
  /// The checkpoint's chat template (tokenizer_config.json "chat_template"), empty when none.
  virtual std::string chat_template() const { return {}; }
};

}  // namespace tessera::serving
