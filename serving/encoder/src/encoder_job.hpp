// What the encoder APIs share after reading a body (tei_api.cpp defines it; embed_api.cpp uses
// it): one inference request's inputs, how to cut them, and how its outcomes become the answer.
// encoder_infer tokenizes and checks every input, submits the sequences through the router
// (dynamic batching), counts the request in TEI's te_* metrics and answers with TEI's timing
// headers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessera/serving/api.hpp"

namespace tessera::serving {

/// One input: a text, a pair of texts (the model sees "[CLS] a [SEP] b [SEP]"), or final token
/// ids (no special tokens added; each checked against the vocabulary).
struct tei_input {
  std::string a, b;
  bool pair = false;
  bool is_ids = false;
  std::vector<int32_t> ids;
};

struct tei_job {
  std::vector<tei_input> inputs;
  bool batch = false;  ///< counted as TEI's method="batch" (else "single")
  bool truncate = false;
  truncation_side side = truncation_side::right;
  bool every_token = false;  ///< embedding models: every token's vector, not the pooled one
  time_point start;
  /// The answer's body from the outcomes (in input order) and the request's token count, or an error.
  std::function<std::optional<detail::api_error>(std::vector<sequence_outcome>&, detail::json& body, size_t tokens)>
      answer;
};

/// Tokenizes, validates and submits `job`; `reply` gets the answer or TEI's error.
void encoder_infer(encoder_parts& parts, tei_job job, const reply_fn& reply);

/// POST / and /invocations on an embedding model (embed_api.cpp): TEI's /embed, or Hugging Face's
/// sentence-similarity body {"inputs": {"source_sentence", "sentences"}} on POST /.
void embed_default_route(service& svc, std::string_view body, time_point start, const reply_fn& reply);

/// An error for token ids that are empty or outside [0, vocab_size) (vocab_size 0: unchecked).
std::optional<std::string> check_token_ids(const std::vector<int32_t>& ids, int32_t vocab_size);

}  // namespace tessera::serving
