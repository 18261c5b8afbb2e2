#include "tessera/toys/demo_programs.hpp"

#include <cmath>

namespace tessera::toys {

using namespace tessera::exchange;
using namespace tessera::host;

std::vector<float> demo_values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& f : v) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    f = static_cast<float>(static_cast<double>(z >> 40) / double(1ull << 24) * 2.0 - 1.0);
  }
  return v;
}

namespace {

// Tensor ids used by the demos.
enum : uint32_t { id_a = 1, id_b = 2, id_c = 3, id_x = 10 };

tensor_desc mat(uint32_t id, const char* name, int64_t r, int64_t c) { return {id, name, dtype::f32, {r, c}}; }

// Copies rows [r0, r1) or columns [c0, c1) of a row-major [rows, cols] matrix.
std::vector<float> sub(const std::vector<float>& m, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>((r1 - r0) * (c1 - c0)));
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) out.push_back(m[static_cast<size_t>(r * cols + c)]);
  return out;
}

}  // namespace

demo_program make_matmul_demo(matmul_split split, uint32_t tiles, int64_t m, int64_t k, int64_t n, uint64_t seed) {
  demo_program d;
  d.m = m, d.k = k, d.n = n, d.split = split;
  d.a = demo_values(static_cast<size_t>(m * k), seed);
  d.b = demo_values(static_cast<size_t>(k * n), seed + 1);
  d.storage.reserve(3 * tiles);
  std::vector<uint32_t> all;
  for (uint32_t t = 0; t < tiles; ++t) all.push_back(t);
  d.batch.program_id = 1;
  d.batch.active_tokens = m;

  for (uint32_t t = 0; t < tiles; ++t) {
    program p;
    p.id = 1;
    p.tiles = all;
    superstep s;
    int64_t rows = m, cols = n, inner = k;
    std::vector<float> a_part, b_part;
    if (split == matmul_split::rows) {
      auto r = token_partition(m, t, tiles);
      rows = r.end - r.begin;
      a_part = sub(d.a, k, r.begin, r.end, 0, k);
      b_part = d.b;
    } else if (split == matmul_split::columns) {
      auto c = token_partition(n, t, tiles);
      cols = c.end - c.begin;
      a_part = d.a;
      b_part = sub(d.b, n, 0, k, c.begin, c.end);
    } else {
      auto r = token_partition(k, t, tiles);
      inner = r.end - r.begin;
      a_part = sub(d.a, k, 0, m, r.begin, r.end);
      b_part = sub(d.b, n, r.begin, r.end, 0, n);
    }
    d.storage.push_back(std::move(a_part));
    d.allocations.push_back({t, mat(id_a, "A", rows, inner), d.storage.back().data()});
    d.storage.push_back(std::move(b_part));
    d.allocations.push_back({t, mat(id_b, "B", inner, cols), d.storage.back().data()});
    p.temporaries.push_back(mat(id_c, "C", rows, cols));
    s.compute.push_back(make_call<models::kernel_id::matmul>({id_a, id_b}, {id_c}));
    if (split == matmul_split::inner) {
      // All-reduce of the partial C: reduce-scatter by row blocks, then all-gather.
      superstep gather;
      const uint64_t total = static_cast<uint64_t>(m * n);
      for (uint32_t j = 0; j < tiles; ++j) {
        auto blk = token_partition(static_cast<int64_t>(total), j, tiles);
        slice_ref piece{id_c, slice_kind::fixed, static_cast<uint64_t>(blk.begin), static_cast<uint64_t>(blk.end - blk.begin)};
        if (j == t) {
          for (uint32_t q = 0; q < tiles; ++q)
            if (q != t) s.recvs.push_back({q, j, piece, true});
          for (uint32_t q = 0; q < tiles; ++q)
            if (q != t) gather.sends.push_back({q, 1000 + j, piece});
        } else {
          s.sends.push_back({j, j, piece});
          gather.recvs.push_back({j, 1000 + j, piece, false});
        }
      }
      p.steps.push_back(std::move(s));
      p.steps.push_back(std::move(gather));
    } else {
      p.steps.push_back(std::move(s));
    }
    d.programs[t] = std::move(p);
    if (split != matmul_split::inner || t == 0)
      d.batch.outputs.push_back({t, {id_c, slice_kind::fixed, 0, static_cast<uint64_t>(rows * cols)}});
  }
  return d;
}

std::vector<float> assemble_matmul(const demo_program& d, const std::vector<std::vector<float>>& outputs) {
  std::vector<float> c(static_cast<size_t>(d.m * d.n), 0.f);
  const uint32_t tiles = static_cast<uint32_t>(d.programs.size());
  if (d.split == matmul_split::inner) return outputs.at(0);
  for (uint32_t t = 0; t < tiles; ++t) {
    const auto& part = outputs.at(t);
    if (d.split == matmul_split::rows) {
      auto r = exchange::token_partition(d.m, t, tiles);
      std::copy(part.begin(), part.end(), c.begin() + r.begin * d.n);
    } else {
      auto cr = exchange::token_partition(d.n, t, tiles);
      const int64_t w = cr.end - cr.begin;
      for (int64_t row = 0; row < d.m; ++row)
        for (int64_t j = 0; j < w; ++j) c[static_cast<size_t>(row * d.n + cr.begin + j)] = part[static_cast<size_t>(row * w + j)];
    }
  }
  return c;
}

demo_program make_allreduce_demo(uint32_t tiles, int64_t elements, uint64_t seed) {
  demo_program d;
  d.storage.reserve(tiles);
  std::vector<uint32_t> all;
  for (uint32_t t = 0; t < tiles; ++t) all.push_back(t);
  d.batch.program_id = 2;
  for (uint32_t t = 0; t < tiles; ++t) {
    d.storage.push_back(demo_values(static_cast<size_t>(elements), seed + t));
    program p;
    p.id = 2;
    p.tiles = all;
    p.temporaries.push_back({id_x, "x", dtype::f32, {elements}});
    superstep scatter, gather;
    for (uint32_t j = 0; j < tiles; ++j) {
      auto blk = token_partition(elements, j, tiles);
      slice_ref piece{id_x, slice_kind::fixed, static_cast<uint64_t>(blk.begin), static_cast<uint64_t>(blk.end - blk.begin)};
      for (uint32_t q = 0; q < tiles; ++q) {
        if (q == t) continue;
        if (j == t) {
          scatter.recvs.push_back({q, j, piece, true});
          gather.sends.push_back({q, 1000 + j, piece});
        }
      }
      if (j != t) {
        scatter.sends.push_back({j, j, piece});
        gather.recvs.push_back({j, 1000 + j, piece, false});
      }
    }
    p.steps.push_back(std::move(scatter));
    p.steps.push_back(std::move(gather));
    d.programs[t] = std::move(p);
    d.batch.inputs.push_back({t, {id_x, slice_kind::fixed, 0, static_cast<uint64_t>(elements)}, d.storage.back().data(),
                              static_cast<size_t>(elements) * 4});
    d.batch.outputs.push_back({t, {id_x, slice_kind::fixed, 0, static_cast<uint64_t>(elements)}});
  }
  return d;
}

std::vector<std::vector<float>> allreduce_inputs(const demo_program& d) { return d.storage; }

double matmul_reference_error(const demo_program& d, const std::vector<float>& c) {
  double e = 0;
  for (int64_t i = 0; i < d.m; ++i)
    for (int64_t j = 0; j < d.n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < d.k; ++q) s += double(d.a[i * d.k + q]) * d.b[q * d.n + j];
      e = std::max(e, std::abs(c[i * d.n + j] - s));
    }
  return e;
}

double allreduce_reference_error(const demo_program& d, const std::vector<std::vector<float>>& outputs) {
  double e = 0;
  for (size_t i = 0; i < d.storage[0].size(); ++i) {
    double s = 0;
    for (const auto& x : d.storage) s += x[i];
    for (const auto& out : outputs) e = std::max(e, std::abs(out[i] - s));
  }
  return e;
}

}  // namespace tessera::toys
