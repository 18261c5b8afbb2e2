// tessera/serving/tokenizer.hpp: what the HTTP front door needs of a tokenizer, so that
// serving does not depend on one implementation (models::wordpiece_tokenizer through
// model_adapters.hpp, or the toy tokenizer in toy_model.hpp for tests).
//
//   std::shared_ptr<const tokenizer> tok = make_toy_tokenizer();
//   auto seq = tok->encode("hello world", 0);        // [CLS] hello world [SEP], untruncated
//   auto cut = tok->encode_pair("question", "a long passage ...", 512);   // truncated to 512
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/common/status.hpp"
#include "tessera/host/backend.hpp"

namespace tessera::serving {

class tokenizer {
 public:
  virtual ~tokenizer() = default;
  /// [CLS] text [SEP], truncated to max_length tokens (0 = no truncation). Thread-safe.
  virtual result<host::sequence_input> encode(std::string_view text, int32_t max_length) const = 0;
  /// [CLS] a [SEP] b [SEP] with token type ids 0.. then 1.., truncated to max_length tokens
  /// (0 = no truncation). Thread-safe.
  virtual result<host::sequence_input> encode_pair(std::string_view a, std::string_view b,
                                                   int32_t max_length) const = 0;
  /// The id of [SEP] (kept last by truncation).
  virtual int32_t sep_id() const { return 102; }
};

/// Cuts `s` to `max_length` tokens (>= 2) keeping a final [SEP]; no-op when it already fits.
void truncate_sequence(host::sequence_input& s, int32_t max_length, int32_t sep_id);

}  // namespace tessera::serving
