// The built-in kernel estimators, one section per kernel.
//
// IPU side (Poplar style): cycles = overhead + ceil(ceil(work / tiles) / lanes) * cycles_per_vector,
// with lanes = vector_bytes_per_cycle / bytes per element (4 fp16 or 2 fp32 on a 64-bit datapath)
// and matmuls on the AMP unit at flops_per_cycle_per_tile * amp_efficiency. The cycles-per-vector
// constants below are instruction counts of the inner loops (load/compute/store, dual issue),
// not measurements; docs/timing.md lists them.
// GPU side: FLOPs and HBM bytes per launch, for the roofline in gpu_roofline.cpp.
#include "builtin_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "matmul_plan.hpp"
#include "tessera/models/kernel_list.hpp"

namespace tessera::timing::detail {
namespace {

// Cycles per vector of the inner loops (see the file comment).
constexpr double copy_cpv = 1;        // ld64 + st64, paced
constexpr double add_cpv = 2;         // two loads, add, store
constexpr double scale_cpv = 1;       // load, mul, store
constexpr double reduce_cpv = 1;      // load + accumulate
constexpr double layer_norm_cpv = 4;  // sum, sum of squares, normalise, scale+shift
constexpr double per_row_cycles = 20; // a row's cross-worker reduction, rsqrt / reciprocal
constexpr double gelu_cpv = 3;        // on 2-lane transcendental vectors (f16v2 tanh)
constexpr double softmax_cpv = 3;     // max, sum, scale passes on full vectors ...
constexpr double softmax_exp_cpv = 2; // ... plus exp on 2-lane transcendental vectors
constexpr double embed_cpv = 5;       // three gathers, two adds

double lanes(const ipu_preset& p, dtype t) { return p.calibration.vector_bytes_per_cycle / double(dtype_bytes(t)); }
double overhead(const ipu_preset& p) { return p.calibration.compute_set_overhead_cycles; }
double bytes_of(dtype t) { return static_cast<double>(dtype_bytes(t)); }

// An estimator function of a typed shape: the query's shape is read (and checked) once, then
// `f(shape, q, rest...)` runs.
template <class S, class F>
auto with_shape(F f) {
  return [f](const kernel_query& q, const auto&... rest)
             -> std::invoke_result_t<const F&, const S&, const kernel_query&, decltype(rest)...> {
    auto s = read_shape<S>(q);
    if (!s.ok()) return s.error();
    return f(*s, q, rest...);
  };
}

using gpu_list = std::vector<gpu_kernel_work>;

// An estimator named for kernel `id`, its parameters those of shape S.
template <class S>
kernel_estimator estimator_of(models::kernel_id id) {
  kernel_estimator e;
  e.name = std::string(models::kernel_name(id));
  e.params = shape_param_names<S>();
  return e;
}

// ---- elementwise: copy, add, scale ------------------------------------------------------------
kernel_estimator elementwise(models::kernel_id id, double cpv, double inputs, double flops_per_element,
                             bool fusable) {
  kernel_estimator e = estimator_of<elements_shape>(id);
  const std::string name = e.name;
  e.ipu_cycles = with_shape<elements_shape>(
      [cpv](const auto& sh, const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
        const double n = double(sh.elements);
        return vector_cycles(overhead(p), n, tiles, lanes(p, q.type), cpv);
      });
  e.gpu_work = with_shape<elements_shape>(
      [name, inputs, flops_per_element, fusable](const auto& sh, const kernel_query& q, bool) -> result<gpu_list> {
        const double n = double(sh.elements);
        gpu_kernel_work w{name, 0, n * flops_per_element, (inputs + 1) * n * bytes_of(q.type), fusable,
                          (inputs - 1) * n * bytes_of(q.type)};
        return gpu_list{w};
      });
  return e;
}

// ---- reduce_sum -------------------------------------------------------------------------------
kernel_estimator reduce_sum() {
  kernel_estimator e = estimator_of<reduce_shape>(models::kernel_id::reduce_sum);
  e.ipu_cycles = with_shape<reduce_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
        const double n = double(sh.elements), outputs = double(sh.outputs);
        return vector_cycles(overhead(p), n, tiles, lanes(p, q.type), reduce_cpv) + std::ceil(outputs / tiles);
      });
  e.gpu_work = with_shape<reduce_shape>([](const auto& sh, const kernel_query& q, bool) -> result<gpu_list> {
    const double n = double(sh.elements), outputs = double(sh.outputs);
    return gpu_list{{"reduce_sum", 0, n, (n + outputs) * bytes_of(q.type)}};
  });
  e.relayout_bytes = with_shape<reduce_shape>([](const auto& sh, const kernel_query& q) -> result<double> {
    const double n = double(sh.elements);
    return n * bytes_of(q.type);
  });
  return e;
}

// ---- matmul and linear --------------------------------------------------------------------------
kernel_estimator matmul() {
  kernel_estimator e = estimator_of<matmul_shape>(models::kernel_id::matmul);
  e.ipu_cycles = with_shape<matmul_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
        const double m = double(sh.m), n = double(sh.n), k = double(sh.k);
        return overhead(p) + amp_cycles(std::ceil(m * n * k / tiles), 1, 1, q.type, p);
      });
  e.gpu_work = with_shape<matmul_shape>([](const auto& sh, const kernel_query& q, bool) -> result<gpu_list> {
    const double m = double(sh.m), n = double(sh.n), k = double(sh.k);
    return gpu_list{{"matmul", 2 * m * n * k, 0, (m * k + k * n + m * n) * bytes_of(q.type)}};
  });
  e.ipu_spread = with_shape<matmul_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, int64_t tiles) -> result<spread_cost> {
        const double m = double(sh.m), n = double(sh.n), k = double(sh.k);
        matmul_plan plan = plan_matmul(int64_t(m), int64_t(n), int64_t(k), q.type, p, tiles, false);
        return spread_cost{plan.compute_cycles, plan.exchange_bytes, plan.to_string()};
      });
  return e;
}

kernel_estimator linear() {
  kernel_estimator e = estimator_of<linear_shape>(models::kernel_id::linear);
  e.ipu_cycles = with_shape<linear_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
        const double t = double(sh.tokens), in = double(sh.in), out = double(sh.out);
        return overhead(p) + amp_cycles(std::ceil(t * in * out / tiles), 1, 1, q.type, p) +
               vector_cycles(0, t * out, tiles, lanes(p, q.type), scale_cpv);  // bias
      });
  e.gpu_work = with_shape<linear_shape>([](const auto& sh, const kernel_query& q, bool) -> result<gpu_list> {
    const double t = double(sh.tokens), in = double(sh.in), out = double(sh.out);
    return gpu_list{{"linear", 2 * t * in * out, t * out, (t * in + in * out + out + t * out) * bytes_of(q.type)}};
  });
  e.ipu_spread = with_shape<linear_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, int64_t tiles) -> result<spread_cost> {
        const double t = double(sh.tokens), in = double(sh.in), out = double(sh.out);
        matmul_plan plan = plan_matmul(int64_t(t), int64_t(out), int64_t(in), q.type, p, tiles, true);
        double bias = vector_cycles(0, t * out, double(tiles), lanes(p, q.type), scale_cpv);
        return spread_cost{plan.compute_cycles + bias, plan.exchange_bytes, plan.to_string()};
      });
  return e;
}

// ---- layer_norm, gelu, softmax ------------------------------------------------------------------
kernel_estimator layer_norm() {
  kernel_estimator e = estimator_of<rows_shape>(models::kernel_id::layer_norm);
  e.ipu_cycles = with_shape<rows_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
        const double t = double(sh.tokens), h = double(sh.hidden);
        return vector_cycles(overhead(p), t * h, tiles, lanes(p, q.type), layer_norm_cpv) +
               std::ceil(t / tiles) * per_row_cycles;
      });
  e.gpu_work = with_shape<rows_shape>([](const auto& sh, const kernel_query& q, bool) -> result<gpu_list> {
    const double t = double(sh.tokens), h = double(sh.hidden);
    return gpu_list{{"layer_norm", 0, 8 * t * h, (2 * t * h + 2 * h) * bytes_of(q.type)}};
  });
  // Rows must be whole on a tile: the producer's (matmul) layout is re-laid out once.
  e.relayout_bytes = with_shape<rows_shape>([](const auto& sh, const kernel_query& q) -> result<double> {
    const double t = double(sh.tokens), h = double(sh.hidden);
    return t * h * bytes_of(q.type);
  });
  return e;
}

kernel_estimator gelu() {
  kernel_estimator e = estimator_of<elements_shape>(models::kernel_id::gelu);
  e.ipu_cycles = with_shape<elements_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
        const double n = double(sh.elements);
        return vector_cycles(overhead(p), n, tiles, std::max(1.0, lanes(p, q.type) / 2), gelu_cpv);
      });
  e.gpu_work = with_shape<elements_shape>([](const auto& sh, const kernel_query& q, bool) -> result<gpu_list> {
    const double n = double(sh.elements);
    return gpu_list{{"gelu", 0, 8 * n, 2 * n * bytes_of(q.type), true, 0}};
  });
  return e;
}

// Softmax of `n` scores in `rows` rows.
double softmax_cycles(double rows, double n, dtype t, const ipu_preset& p, double tiles) {
  return vector_cycles(0, n, tiles, lanes(p, t), softmax_cpv) +
         vector_cycles(0, n, tiles, std::max(1.0, lanes(p, t) / 2), softmax_exp_cpv) +
         std::ceil(rows / tiles) * per_row_cycles;
}

kernel_estimator softmax() {
  kernel_estimator e = estimator_of<softmax_shape>(models::kernel_id::softmax);
  e.ipu_cycles = with_shape<softmax_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
        const double r = double(sh.rows), c = double(sh.cols);
        return overhead(p) + softmax_cycles(r, r * c, q.type, p, tiles);
      });
  e.gpu_work = with_shape<softmax_shape>([](const auto& sh, const kernel_query& q, bool) -> result<gpu_list> {
    const double r = double(sh.rows), c = double(sh.cols);
    return gpu_list{{"softmax", 0, 5 * r * c, 2 * r * c * bytes_of(q.type)}};
  });
  e.relayout_bytes = with_shape<softmax_shape>([](const auto& sh, const kernel_query& q) -> result<double> {
    const double r = double(sh.rows), c = double(sh.cols);
    return r * c * bytes_of(q.type);
  });
  return e;
}

// ---- attention: per-sequence, no cross-sequence work ----------------------------------------------
struct attention_sums {
  double heads = 0, head_dim = 0;
  double sum_l = 0, sum_l2 = 0, max_l = 0;
};

result<attention_sums> attention_sums_of(const kernel_query& q) {
  auto shape = read_shape<attention_shape>(q);
  if (!shape.ok()) return shape.error();
  if (shape->seq_lens.empty())
    return status::invalid("kernel 'attention' needs seq_lens (one length per sequence); query: " + q.to_string());
  attention_sums s{double(shape->heads), double(shape->head_dim)};
  for (int64_t l : shape->seq_lens) {
    if (l <= 0) return status::invalid("kernel 'attention': every sequence length must be > 0");
    s.sum_l += double(l);
    s.sum_l2 += double(l) * double(l);
    s.max_l = std::max(s.max_l, double(l));
  }
  return s;
}

kernel_estimator attention() {
  kernel_estimator e = estimator_of<attention_shape>(models::kernel_id::attention);
  // Q K^T and P V: 2 * sum(L^2) * head_dim MACs per head; softmax over sum(L^2) scores per head.
  e.ipu_cycles = [](const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
    auto s = attention_sums_of(q);
    if (!s.ok()) return s.error();
    const double macs = 2 * s->sum_l2 * s->head_dim * s->heads;
    return overhead(p) + amp_cycles(std::ceil(macs / tiles), 1, 1, q.type, p) +
           softmax_cycles(s->sum_l * s->heads, s->sum_l2 * s->heads, q.type, p, tiles);
  };
  e.gpu_work = [](const kernel_query& q, bool fused) -> result<gpu_list> {
    auto s = attention_sums_of(q);
    if (!s.ok()) return s.error();
    const double b = bytes_of(q.type), h = s->heads, d = s->head_dim;
    const double qkv = s->sum_l * h * d * b;     // one of Q, K, V or O
    const double scores = s->sum_l2 * h * b;
    if (fused)  // FMHA: scores stay on chip
      return gpu_list{{.name = "attention", .tensor_flops = 4 * s->sum_l2 * d * h, .vector_flops = 5 * s->sum_l2 * h,
                       .hbm_bytes = 4 * qkv, .blocks = double(q.seq_lens.size()) * h}};
    return gpu_list{{"attention.qk", 2 * s->sum_l2 * d * h, 0, 2 * qkv + scores},
                    {"attention.softmax", 0, 6 * s->sum_l2 * h, 2 * scores},
                    {"attention.pv", 2 * s->sum_l2 * d * h, 0, scores + 2 * qkv}};
  };
  e.ipu_spread = [](const kernel_query& q, const ipu_preset& p, int64_t tiles) -> result<spread_cost> {
    auto s = attention_sums_of(q);
    if (!s.ok()) return s.error();
    auto cycles = estimate_tile_cycles(q, p, double(tiles));
    if (!cycles) return cycles.error();
    const double b = bytes_of(q.type);
    const double units = double(q.seq_lens.size()) * s->heads;  // (sequence, head) pairs
    const double qkv_per_tile = 3 * s->sum_l * s->heads * s->head_dim * b / double(tiles);
    // With fewer (sequence, head) units than tiles, a unit's query rows are split over
    // several tiles and each needs the unit's whole K and V.
    double bytes = qkv_per_tile;
    if (units < double(tiles)) bytes = std::max(bytes, 2 * s->max_l * s->head_dim * b + qkv_per_tile / 3);
    return spread_cost{*cycles, bytes, "seq x head units " + std::to_string(int64_t(units)) + " over " +
                                           std::to_string(tiles) + " tiles"};
  };
  return e;
}

// ---- embed, classifier ---------------------------------------------------------------------------
kernel_estimator embed() {
  kernel_estimator e = estimator_of<rows_shape>(models::kernel_id::embed);
  e.ipu_cycles = with_shape<rows_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
        const double t = double(sh.tokens), h = double(sh.hidden);
        return vector_cycles(overhead(p), t * h, tiles, lanes(p, q.type), embed_cpv);
      });
  e.gpu_work = with_shape<rows_shape>([](const auto& sh, const kernel_query& q, bool) -> result<gpu_list> {
    const double t = double(sh.tokens), h = double(sh.hidden);
    return gpu_list{{"embed", 0, 2 * t * h, 4 * t * h * bytes_of(q.type)}};
  });
  // The tables are spread over all tiles: each token's three rows come from elsewhere.
  e.relayout_bytes = with_shape<rows_shape>([](const auto& sh, const kernel_query& q) -> result<double> {
    const double t = double(sh.tokens), h = double(sh.hidden);
    return 3 * t * h * bytes_of(q.type);
  });
  return e;
}

kernel_estimator classifier() {
  kernel_estimator e = estimator_of<classifier_shape>(models::kernel_id::classifier);
  e.ipu_cycles = with_shape<classifier_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
        const double s = double(sh.seqs), h = double(sh.hidden), l = double(sh.labels);
        return 2 * overhead(p) + amp_cycles(std::ceil(s * h * (h + l) / tiles), 1, 1, q.type, p) +
               vector_cycles(0, s * h, tiles, std::max(1.0, lanes(p, q.type) / 2), gelu_cpv);  // tanh
      });
  e.gpu_work = with_shape<classifier_shape>([](const auto& sh, const kernel_query& q, bool fused) -> result<gpu_list> {
    const double s = double(sh.seqs), h = double(sh.hidden), l = double(sh.labels);
    const double b = bytes_of(q.type);
    gpu_kernel_work pool{"classifier.pooler", 2 * s * h * h, s * h, (s * h + h * h + 2 * s * h) * b};
    gpu_kernel_work tanh_k{"classifier.tanh", 0, 8 * s * h, 2 * s * h * b, true, 0};
    gpu_kernel_work out{"classifier.dense", 2 * s * h * l, s * l, (s * h + h * l + s * l) * b};
    if (fused) return gpu_list{pool, out};
    return gpu_list{pool, tanh_k, out};
  });
  e.ipu_spread = with_shape<classifier_shape>(
      [](const auto& sh, const kernel_query& q, const ipu_preset& p, int64_t tiles) -> result<spread_cost> {
        const double s = double(sh.seqs), h = double(sh.hidden), l = double(sh.labels);
        matmul_plan pool = plan_matmul(int64_t(s), int64_t(h), int64_t(h), q.type, p, tiles, true);
        matmul_plan out = plan_matmul(int64_t(s), int64_t(l), int64_t(h), q.type, p, tiles, true);
        double tanh_c = vector_cycles(0, s * h, double(tiles), std::max(1.0, lanes(p, q.type) / 2), gelu_cpv);
        return spread_cost{pool.compute_cycles + out.compute_cycles + tanh_c + double(p.global_sync_cycles),
                           pool.exchange_bytes + out.exchange_bytes, "pooler " + pool.to_string()};
      });
  return e;
}

}  // namespace

void add_builtin_kernels(estimator_registry& r) {
  using models::kernel_id;
  for (kernel_estimator e :
       {elementwise(kernel_id::copy, copy_cpv, 1, 0, false), elementwise(kernel_id::add, add_cpv, 2, 1, true),
        elementwise(kernel_id::scale, scale_cpv, 1, 1, true), reduce_sum(), matmul(), linear(), layer_norm(), gelu(),
        softmax(), attention(), embed(), classifier()}) {
    status s = r.add(std::move(e));
    (void)s;  // names are distinct by construction
  }
}

}  // namespace tessera::timing::detail
