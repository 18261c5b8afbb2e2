#include "tessera/timing/bert_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "tessera/timing/estimator.hpp"
#include "tessera/timing/superstep.hpp"

namespace tessera::timing {

result<gpu_estimate> model_gpu_batch(const gpu_preset& p, const model_shape& shape, const bert_batch& batch, dtype t) {
  TESSERA_RETURN_IF_ERROR(batch.validate());
  auto ops = bert_forward_ops(shape, batch.padded_to_longest(), t);
  if (!ops) return ops.error();
  return estimate_gpu_ops(p, *ops);
}

result<double> model_gpu_forward_seconds(const gpu_preset& p, const model_shape& shape, const bert_batch& batch,
                                         dtype t) {
  // Every encoder layer is the same launches and no epilogue fuses across a part boundary (each part
  // starts with embed, a GEMM or the classifier): cost head, one layer and tail.
  auto parts = bert_forward_split(shape, batch, t);
  if (!parts) return parts.error();
  auto head = estimate_gpu_ops(p, parts->head);
  if (!head) return head.error();
  auto layer = estimate_gpu_ops(p, parts->layer);
  if (!layer) return layer.error();
  auto tail = estimate_gpu_ops(p, parts->tail);
  if (!tail) return tail.error();
  return head->seconds + double(parts->layers) * layer->seconds + tail->seconds;
}

result<double> model_gpu_batch_seconds(const gpu_preset& p, const model_shape& shape, const bert_batch& batch, dtype t) {
  TESSERA_RETURN_IF_ERROR(batch.validate());
  return model_gpu_forward_seconds(p, shape, batch.padded_to_longest(), t);
}

namespace {

// Longest sequences first, each to the group with the fewest tokens so far.
std::vector<bert_batch> split_over_groups(const bert_batch& batch, int64_t groups) {
  std::vector<bert_batch> out(static_cast<size_t>(groups));
  std::vector<int64_t> load(static_cast<size_t>(groups), 0);
  std::vector<int64_t> lens = batch.seq_lens;
  std::sort(lens.begin(), lens.end(), std::greater<>());
  for (int64_t l : lens) {
    size_t g = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[g].seq_lens.push_back(l);
    out[g].pad_to = batch.pad_to;
    load[g] += batch.pad_to > 0 ? batch.pad_to : l;
  }
  std::erase_if(out, [](const bert_batch& b) { return b.seq_lens.empty(); });
  return out;
}

// Bytes a tile of a group holds: its slice of the weights plus the live activations of the
// widest point of a layer (input, QKV, FFN hidden, attention scores of its sequences).
double bytes_per_tile(const model_shape& s, const bert_batch& b, dtype t, int64_t width) {
  const double e = static_cast<double>(dtype_bytes(t));
  const double tokens = double(b.computed_tokens());
  double l2 = 0;
  for (int64_t l : b.computed_lens()) l2 += double(l) * double(l);
  const double weights = double(s.parameter_count()) * e;
  const double activations =
      tokens * double(2 * s.hidden_size + 3 * s.hidden_size + s.intermediate_size) * e + l2 * double(s.num_heads) * e;
  return (weights + activations) / double(width);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

namespace {

// `detail`: fill est.ops with every superstep (the tool's --ops); the seconds alone need one layer.
result<ipu_batch_estimate> model_ipu(const ipu_preset& p, const model_shape& shape, const bert_batch& batch, dtype t,
                                     const ipu_mapping& mapping, bool detail) {
  TESSERA_RETURN_IF_ERROR(shape.validate());
  TESSERA_RETURN_IF_ERROR(batch.validate());
  ipu_batch_estimate est;
  est.tiles_used = mapping.tiles_used > 0 ? mapping.tiles_used : p.tiles;
  if (est.tiles_used > p.tiles)
    return status::invalid("tiles_used " + std::to_string(est.tiles_used) + " exceeds the " + std::to_string(p.tiles) +
                           " tiles of " + p.name);
  est.tensor_parallel_width = mapping.tensor_parallel_width > 0 ? mapping.tensor_parallel_width : est.tiles_used;
  if (est.tensor_parallel_width > est.tiles_used)
    return status::invalid("tensor_parallel_width " + std::to_string(est.tensor_parallel_width) +
                           " exceeds tiles_used " + std::to_string(est.tiles_used));
  est.groups = est.tiles_used / est.tensor_parallel_width;
  const int64_t width = est.tensor_parallel_width;

  double worst_cycles = -1;
  for (const bert_batch& part : split_over_groups(batch, est.groups)) {
    const double mem = bytes_per_tile(shape, part, t, width);
    est.memory_bytes_per_tile = std::max(est.memory_bytes_per_tile, mem);
    if (mem > double(p.memory_bytes_per_tile))
      return status::out_of_memory(
          shape.name + " with " + std::to_string(part.seq_lens.size()) + " sequences (" +
          std::to_string(part.computed_tokens()) + " tokens) over " + std::to_string(width) + " tiles needs ~" +
          fmt("%.0f", mem) + " bytes per tile; " + p.name + " tiles hold " + std::to_string(p.memory_bytes_per_tile) +
          "; use a wider tensor_parallel_width or a smaller batch");
    // Every encoder layer runs the same queries: cost head, one layer and tail, count the layer `layers` times.
    auto parts = bert_forward_split(shape, part, t);
    if (!parts) return parts.error();
    struct part_cost {
      double compute = 0, sync = 0, exchange = 0;
      std::vector<ipu_op_time> times;
    };
    auto cost = [&](const std::vector<kernel_query>& ops) -> result<part_cost> {
      part_cost c;
      c.times.reserve(ops.size());
      for (const kernel_query& q : ops) {
        auto sc = estimate_spread(q, p, width);
        if (!sc) return sc.error().with_context("IPU cost of " + q.to_string());
        ipu_op_time o{q.kernel, sc->plan, sc->compute_cycles, sync_cycles(p), exchange_cycles(p, sc->exchange_bytes)};
        c.compute += o.compute_cycles, c.sync += o.sync_cycles, c.exchange += o.exchange_cycles;
        c.times.push_back(std::move(o));
      }
      return c;
    };
    auto head = cost(parts->head);
    if (!head) return head.error();
    auto layer = cost(parts->layer);
    if (!layer) return layer.error();
    auto tail = cost(parts->tail);
    if (!tail) return tail.error();
    const double layers = double(parts->layers);
    const double compute = head->compute + layers * layer->compute + tail->compute;
    const double sync = head->sync + layers * layer->sync + tail->sync;
    const double exchange = head->exchange + layers * layer->exchange + tail->exchange;
    const double total = compute + sync + exchange;
    if (total > worst_cycles) {
      worst_cycles = total;
      est.compute_s = cycles_to_seconds(p, compute);
      est.sync_s = cycles_to_seconds(p, sync);
      est.exchange_s = cycles_to_seconds(p, exchange);
      est.supersteps = static_cast<int64_t>(head->times.size() + parts->layers * layer->times.size() + tail->times.size());
      est.ops.clear();
      if (detail) {
        est.ops = head->times;
        for (int64_t l = 0; l < parts->layers; ++l) est.ops.insert(est.ops.end(), layer->times.begin(), layer->times.end());
        est.ops.insert(est.ops.end(), tail->times.begin(), tail->times.end());
      }
    }
  }
  est.seconds = est.compute_s + est.sync_s + est.exchange_s;
  if (!detail) return est;  // the note is for people; a timing-only sweep wants the seconds
  est.note = shape.name + " on " + p.name + ": " + std::to_string(est.groups) + " model cop" +
             (est.groups == 1 ? "y" : "ies") + " x " + std::to_string(width) + " tiles (" +
             std::to_string(est.tiles_used) + " of " + std::to_string(p.tiles) + " tiles), " +
             std::to_string(est.supersteps) + " supersteps per forward, " +
             (batch.pad_to > 0 ? "padded to " + std::to_string(batch.pad_to) : std::string("packed (no padding)")) +
             ", ~" + fmt("%.0f", est.memory_bytes_per_tile / 1024.0) + " KiB per tile";
  return est;
}

}  // namespace

result<ipu_batch_estimate> model_ipu_batch(const ipu_preset& p, const model_shape& shape, const bert_batch& batch,
                                           dtype t, const ipu_mapping& mapping) {
  return model_ipu(p, shape, batch, t, mapping, true);
}


result<double> model_ipu_batch_seconds(const ipu_preset& p, const model_shape& shape, const bert_batch& batch, dtype t,
                                       const ipu_mapping& mapping) {
  auto e = model_ipu(p, shape, batch, t, mapping, false);
  if (!e) return e.error();
  return e->seconds;
}

}  // namespace tessera::timing
