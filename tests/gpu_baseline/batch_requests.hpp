// The GPU baseline tests' requests: a packed_batch as a backend request, and one request run to
// its answer (or a timeout status when none comes).
#pragma once

#include <chrono>
#include <future>
#include <memory>

#include "tessera/backends/backend.hpp"
#include "tessera/models/batch.hpp"

namespace tessera::test_support {

inline backends::batch_request request_of(const models::packed_batch& b, uint64_t id,
                                          backends::batch_layout layout = backends::batch_layout::packed,
                                          int32_t padded_length = 0) {
  backends::batch_request r;
  r.batch_id = id;
  r.layout = layout;
  r.padded_length = padded_length;
  for (int i = 0; i < b.num_seqs(); ++i) {
    backends::sequence_input s;
    s.token_ids.assign(b.token_ids.begin() + b.seq_offsets[i], b.token_ids.begin() + b.seq_offsets[i + 1]);
    s.token_type_ids.assign(b.token_type_ids.begin() + b.seq_offsets[i],
                            b.token_type_ids.begin() + b.seq_offsets[i + 1]);
    r.sequences.push_back(std::move(s));
  }
  return r;
}

/// Submits `r` and waits up to `limit` for its answer.
inline backends::batch_result run(backends::backend& b, backends::batch_request r,
                                  std::chrono::seconds limit = std::chrono::seconds(30)) {
  auto p = std::make_shared<std::promise<backends::batch_result>>();
  auto f = p->get_future();
  b.submit(std::move(r), [p](backends::batch_result res) { p->set_value(std::move(res)); });
  if (f.wait_for(limit) != std::future_status::ready) {
    backends::batch_result never;
    never.st = status::timeout("test: no answer");
    return never;
  }
  return f.get();
}

}  // namespace tessera::test_support
