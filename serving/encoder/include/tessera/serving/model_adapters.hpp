// tessera/serving/model_adapters.hpp: a models::bert_model behind the serving interfaces: its
// WordPiece tokenizer as a serving::tokenizer, its labels and limits as a model_info. The
// forward itself is backends::make_reference_backend (or a tile group, or a GPU process).
// A decoder's BPE tokenizer (models::bpe_tokenizer) as an llm_tokenizer, its stream_decoder as
// the token_stream; the step itself is backends::make_decoder_backend.
//
//   auto tok = make_model_tokenizer(*model).value();
//   model_info info = model_info_of(*model, "bert-tiny");
#pragma once

#include <memory>
#include <string>

#include "tessera/common/status.hpp"
#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/models/model.hpp"
#include "tessera/serving/llm_tokenizer.hpp"
#include "tessera/serving/service.hpp"
#include "tessera/serving/tokenizer.hpp"

namespace tessera::serving {

/// The model's WordPiece tokenizer behind the serving interface. Needs a vocab.
result<std::shared_ptr<const tokenizer>> make_model_tokenizer(const models::bert_model& model);

/// A decoder's BPE tokenizer behind the LLM interface.
std::shared_ptr<const llm_tokenizer> make_bpe_llm_tokenizer(models::bpe_tokenizer tok);

/// Labels, max input length and vocab size of a model, named `model_id`.
model_info model_info_of(const models::bert_model& model, std::string model_id);

}  // namespace tessera::serving
