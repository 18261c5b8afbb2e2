// tessera/models/forward.hpp: the single-process reference forward, the oracle every
// distributed path is tested against.
//
// reference_forward runs a packed, padding-free batch (one GEMM per linear layer over all T
// tokens, attention within each sequence). padded_forward runs the same sequences GPU style:
// batches of `batch_size` in the given order, each padded to its longest, with attention masks;
// it computes on padding and returns the same logits.
//
//   set_num_threads(2);
//   packed_batch b = synthetic_batch(seed_workload(32));
//   std::vector<float> logits = reference_forward(model, b);    // [b.num_seqs(), num_labels]
//   std::vector<float> same = padded_forward(model, b, 32);     // within ~1e-5
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/models/batch.hpp"
#include "tessera/models/model.hpp"

namespace tessera::models {

/// Logits [num_seqs, num_labels] of a packed batch, in the model's dtype (model.compute: fp32, or
/// bf16 after set_dtype). The batch must pass validate_batch (a bug otherwise: it aborts with
/// context).
std::vector<float> reference_forward(const bert_model& model, const packed_batch& batch);

/// Same logits through the padded path: sequences in batches of batch_size (0 = all at once),
/// each batch padded to its longest sequence, in the model's dtype (bf16: the packed path's
/// kernels over the rectangle, attention masked per sequence).
std::vector<float> padded_forward(const bert_model& model, const packed_batch& batch,
                                  int batch_size = 0);

/// Final hidden states [T, hidden] of a packed batch (for tests of distributed encoders).
std::vector<float> reference_encoder(const bert_model& model, const packed_batch& batch);

/// Floating-point operations of a forward over these sequence lengths (GEMMs: 2*T*in*out,
/// attention: 4*L^2*hidden per layer; pooler and classifier included; elementwise excluded).
double forward_flops(const bert_config& cfg, const std::vector<int>& lengths);
/// Flops of the GEMMs alone (the linear layers over all tokens), for the sgemm roofline.
double linear_flops(const bert_config& cfg, int64_t tokens);

}  // namespace tessera::models
