// bench_decoders: single-process decoder throughput over the paged KV cache (decoder_model::step):
// prefill tokens/s of packed prompts, and decode tokens/s at several batch sizes, each sequence
// at its own position after its prompt.
//
//   build/bin/tessera-bench-decoders --models llama-tiny,gpt2 --threads 2 --prompt 128 --decode 32 --batches 1,32
//   build/bin/tessera-bench-decoders --models gpt2,llama-1b --dtypes fp32,bf16   (bf16 / fp32 ratios, one run)
//   build/bin/tessera-bench-decoders --models gpt2 --threads 1 --batches 32 --decode 1 --linear   (decode GEMMs vs sgemm)
//
// Prefill: for each batch size B, B prompts of --prompt seeded tokens in one mixed step (packed, no
// padding; a prefill under 1 s is timed again, warm: the first pays its fresh workspaces' page
// faults once). Decode: for each batch size B, B sequences with a --prompt-token context each take
// --decode steps of one token each (one step = B tokens). Wall time and process CPU time are both
// shown: on a shared machine, tokens / (cpu / threads) estimates dedicated-core speed
// (pessimistically: OpenMP spin-waits count as CPU time). On a machine shared with other jobs,
// run it with OMP_WAIT_POLICY=passive: libgomp's spinning threads otherwise lose whole time slices
// to each other (gpt2 decode at batch 1 on 2 threads under load: 0.7 s passive vs 14 s active for
// 8 tokens). Prints a table and RESULT lines. A bf16 row runs bf16 matrices and a bf16 KV cache.
// The same workload on tile processes: tessera-bench-decoder-tiles (bench_decoder_tiles.cpp).
#include <algorithm>
#include <array>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <immintrin.h>
#include <iostream>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "tessera/models/batch.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/gguf_reader.hpp"
#include "tessera/models/huge_pages.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/common/cli.hpp"
#include "tessera/common/text.hpp"
#include "tessera/common/cpu_time.hpp"

namespace po = boost::program_options;
using namespace tessera::models;

namespace {

using tessera::bench::now;
using tessera::bench::cpu_now;
std::string two_places(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct measured {
  double wall = 0, cpu = 0;
  int64_t tokens = 0;
};

// B sequences of `prompt` tokens: one packed prefill step, then `decode` steps of one token each.
tessera::result<std::pair<measured, measured>> run(const decoder_model& m, int B, int prompt, int decode, uint64_t seed) {
  const auto& c = m.shape();
  const int bt = 16, per_seq = (prompt + decode + bt - 1) / bt;
  auto cache = paged_kv_cache::make(c, {bt, B * per_seq, m.default_kv_dtype()});  // a bf16 model: a bf16 KV cache
  if (!cache) return cache.error();
  splitmix64 r(seed);
  step_batch batch;
  for (int s = 0; s < B; ++s) {
    seq_step st;
    st.seq_id = static_cast<uint64_t>(s);
    for (int i = 0; i < prompt; ++i) st.tokens.push_back(static_cast<int32_t>(r.uniform(0, c.vocab_size - 1)));
    for (int b = 0; b < per_seq; ++b) st.block_table.push_back(s * per_seq + b);
    batch.seqs.push_back(std::move(st));
  }
  measured pre, dec;
  std::vector<std::vector<float>> out;  // reused by every step, as a serving loop does
  double t0 = now(), c0 = cpu_now();
  if (auto st = m.step(batch, *cache, out); !st.ok()) return st;
  pre = {now() - t0, cpu_now() - c0, int64_t{B} * prompt};
  if (pre.wall < 1.0) {  // cheap to repeat: time it warm (first-touch page faults of fresh workspaces are one-time)
    t0 = now();
    c0 = cpu_now();
    if (auto st = m.step(batch, *cache, out); !st.ok()) return st;
    pre = {now() - t0, cpu_now() - c0, int64_t{B} * prompt};
  }
  t0 = now();
  c0 = cpu_now();
  for (int n = 0; n < decode; ++n) {
    for (int s = 0; s < B; ++s) {
      const auto& l = out[static_cast<size_t>(s)];
      batch.seqs[s].tokens = {static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin())};
      batch.seqs[s].start_pos = prompt + n;
    }
    if (auto st = m.step(batch, *cache, out); !st.ok()) return st;
  }
  dec = {now() - t0, cpu_now() - c0, int64_t{B} * decode};
  return std::make_pair(pre, dec);
}

// Prefill FLOPs of B prompts of P tokens: every layer's GEMMs, causal attention (QK^T and PV over
// P(P+1)/2 pairs per head) and the LM head of B last rows.
double prefill_flops(const model_shape& c, int B, int P) {
  const double T = double(B) * P, h = c.hidden_size, f = c.intermediate_size, qw = c.q_width(), kvw = c.kv_width();
  const double gemm = 2 * T * h * (qw + 2 * kvw) + 2 * T * qw * h + 2 * T * h * f * (c.gated_mlp ? 2 : 1) + 2 * T * f * h;
  const double attn = 4.0 * c.num_heads * c.head_dim() * B * (double(P) * (P + 1) / 2);
  return c.num_layers * (gemm + attn) + 2.0 * B * h * c.vocab_size;
}

// oneDNN's sgemm alone on one layer's GEMM shapes of T rows (the roofline prefill is held to):
// wall seconds, CPU seconds and FLOPs, scaled to all layers.
struct sgemm_time {
  double wall = 0, cpu = 0, flops = 0;
};
sgemm_time sgemm_layers(const model_shape& c, int64_t T) {
  const int64_t h = c.hidden_size, f = c.intermediate_size, qw = c.q_width(), kvw = c.kv_width();
  const int64_t wide = std::max({qw + 2 * kvw, f, h});
  std::vector<float> x(static_cast<size_t>(T * std::max(h, f)), 0.01f), w(static_cast<size_t>(wide * std::max(h, f)), 0.02f),
      y(static_cast<size_t>(T * wide));
  std::vector<std::array<int64_t, 2>> shapes{{qw + 2 * kvw, h}, {h, qw}, {f, h}, {h, f}};
  if (c.gated_mlp) shapes.push_back({f, h});
  sgemm_abt(x.data(), w.data(), y.data(), std::min<int64_t>(T, 64), h, h);  // warm-up
  sgemm_time r;
  const double t0 = now(), c0 = cpu_now();
  for (const auto& [n, k] : shapes) {
    sgemm_abt(x.data(), w.data(), y.data(), T, n, k);
    r.flops += 2.0 * T * n * k * c.num_layers;
  }
  r.wall = (now() - t0) * c.num_layers;
  r.cpu = (cpu_now() - c0) * c.num_layers;
  return r;
}

// --attention: tessera's paged attention against oneDNN batched matmul + softmax on the same
// shapes, one thread's CPU time (best of a few runs). B sequences, each `rows` query rows at the end
// of `ctx` positions; heads/kv heads/head_dim of the model. oneDNN's side is what a framework does:
// K and V contiguous per (sequence, kv head), the group's query heads stacked as rows, S = Q K^T
// scaled, an additive causal mask (the binary primitive; as a matmul post-op oneDNN 2.6 falls back
// to its reference matmul), the softmax primitive, O = S V, all as
// batched matmuls over B x kv heads; it computes the full rows x ctx square where tessera skips
// the masked keys.
struct attn_time {
  double tessera = 0, onednn = 0, flops = 0;
};
attn_time time_attention(const model_shape& c, int B, int rows, int ctx, int reps) {
  const int H = c.num_heads, KV = c.num_kv_heads, d = c.head_dim(), g = H / KV, bt = 16;
  const int64_t qw = int64_t{H} * d;
  splitmix64 r(7);
  auto fill = [&](std::vector<float>& v) {
    for (auto& x : v) x = 2.0f * r.unit_float() - 1.0f;
  };
  // tessera: q rows [B * rows, H * d]; a paged cache with blocks in order.
  const int per = (ctx + bt - 1) / bt;
  std::vector<float> q(static_cast<size_t>(int64_t{B} * rows * qw)), out(q.size());
  std::vector<float> kc(static_cast<size_t>(int64_t{B} * per * KV * bt * d)), vc(kc.size());
  fill(q);
  fill(kc);
  fill(vc);
  std::vector<int32_t> table(static_cast<size_t>(B * per));
  for (int i = 0; i < B * per; ++i) table[static_cast<size_t>(i)] = i;
  std::vector<paged_seq> seqs;
  for (int s = 0; s < B; ++s) seqs.push_back({s * rows, rows, ctx - rows, table.data() + s * per});
  const int64_t head_stride = int64_t{bt} * d, block_stride = KV * head_stride;
  auto best = [&](auto&& f) {
    double b = 1e30;
    for (int i = 0; i < reps; ++i) {
      const double t0 = cpu_now();
      f();
      b = std::min(b, cpu_now() - t0);
    }
    return b;
  };
  attn_time t;
  t.tessera = best([&] {
    attention_paged({q.data(), qw}, {kc.data(), vc.data(), bt, block_stride, head_stride}, seqs.data(), B, H, KV, d,
                    {out.data(), qw});
  });
  // oneDNN: [B * KV] batches of Q [g * rows, d], K and V [ctx, d].
  using namespace dnnl;
  using dt = memory::data_type;
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  const int64_t nb = int64_t{B} * KV, M = int64_t{g} * rows;
  const memory::desc qd({nb, M, d}, dt::f32, {M * d, d, 1}), kd({nb, d, ctx}, dt::f32, {int64_t{ctx} * d, 1, d}),
      sd({nb, M, ctx}, dt::f32, {M * ctx, ctx, 1}), vd({nb, ctx, d}, dt::f32, {int64_t{ctx} * d, d, 1}),
      od({nb, M, d}, dt::f32, {M * d, d, 1}), maskd({1, M, ctx}, dt::f32, {M * ctx, ctx, 1});
  std::vector<float> Q(static_cast<size_t>(nb * M * d)), K(static_cast<size_t>(nb * ctx * d)), V(K.size()),
      S(static_cast<size_t>(nb * M * ctx)), O(Q.size()), mask(static_cast<size_t>(M * ctx), 0.0f);
  fill(Q);
  fill(K);
  fill(V);
  for (int64_t m = 0; m < M; ++m)  // row m is query row m % rows at position ctx - rows + m % rows
    for (int j = ctx - rows + static_cast<int>(m % rows) + 1; j < ctx; ++j) mask[static_cast<size_t>(m * ctx + j)] = -INFINITY;
  primitive_attr qk_attr;
  qk_attr.set_output_scales(0, {1.0f / std::sqrt(static_cast<float>(d))});
  matmul qk(matmul::primitive_desc(matmul::desc(qd, kd, sd), qk_attr, eng));
  binary add_mask(binary::primitive_desc(binary::desc(algorithm::binary_add, sd, maskd, sd), eng));
  softmax_forward sm(softmax_forward::primitive_desc(softmax_forward::desc(prop_kind::forward_inference, sd, 2), eng));
  matmul pv(matmul::primitive_desc(matmul::desc(sd, vd, od), eng));
  memory qm(qd, eng, Q.data()), km(kd, eng, K.data()), sm_(sd, eng, S.data()), vm(vd, eng, V.data()),
      om(od, eng, O.data()), mm(maskd, eng, mask.data());
  t.onednn = best([&] {
    qk.execute(st, {{DNNL_ARG_SRC, qm}, {DNNL_ARG_WEIGHTS, km}, {DNNL_ARG_DST, sm_}});
    if (rows > 1) add_mask.execute(st, {{DNNL_ARG_SRC_0, sm_}, {DNNL_ARG_SRC_1, mm}, {DNNL_ARG_DST, sm_}});
    sm.execute(st, {{DNNL_ARG_SRC, sm_}, {DNNL_ARG_DST, sm_}});
    pv.execute(st, {{DNNL_ARG_SRC, sm_}, {DNNL_ARG_WEIGHTS, vm}, {DNNL_ARG_DST, om}});
    st.wait();
  });
  // Useful FLOPs (causal): QK^T and PV over the keys each row sees.
  for (int i = 0; i < rows; ++i) t.flops += 4.0 * B * H * d * (ctx - rows + i + 1);
  return t;
}

// --linear: the fp32 linear() of a decode step of T rows (the few-row kernel from 4 to 48 rows)
// against oneDNN's sgemm (dnnl_sgemm, W as the model stores it, [out, in], transposed) on one GEMM
// shape: FLOPs per CPU-second, best of `reps` calls, each on another copy of W (the copies exceed
// 96 MB, more than the L3 cache here), so the weights come from memory as in a decode step.
struct linear_time {
  double tessera = 0, sgemm = 0, flops = 0;
};
linear_time time_linear(int64_t T, int64_t out, int64_t in, int reps) {
  const int64_t n = out * in, copies = std::max<int64_t>(2, (int64_t{96} << 20) / (n * 4) + 1);
  splitmix64 r(11);
  std::vector<float> w(static_cast<size_t>(n * copies)), x(static_cast<size_t>(T * in)), y(static_cast<size_t>(T * out));
  for (auto& v : w) v = r.unit_float() - 0.5f;
  for (auto& v : x) v = r.unit_float() - 0.5f;
  auto best = [&](auto&& f) {
    double b = 1e30;
    for (int i = 0; i < reps; ++i) {
      const float* wi = w.data() + (i % copies) * n;
      const double c0 = cpu_now();
      f(wi);
      b = std::min(b, cpu_now() - c0);
    }
    return b;
  };
  linear_time t;
  t.flops = 2.0 * T * out * in;
  t.tessera = best([&](const float* wi) { linear(x.data(), T, in, wi, nullptr, out, y.data()); });
  t.sgemm = best([&](const float* wi) { sgemm_abt(x.data(), wi, y.data(), T, out, in); });
  return t;
}

// Sum of n floats (n a multiple of 32) in four AVX2 accumulators: a read as fast as the memory gives.
__attribute__((target("avx2"))) float sum_floats(const float* p, int64_t n) {
  __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
  for (int64_t i = 0; i < n; i += 32) {
    a = _mm256_add_ps(a, _mm256_loadu_ps(p + i));
    b = _mm256_add_ps(b, _mm256_loadu_ps(p + i + 8));
    c = _mm256_add_ps(c, _mm256_loadu_ps(p + i + 16));
    d = _mm256_add_ps(d, _mm256_loadu_ps(p + i + 24));
  }
  alignas(32) float r[8];
  _mm256_store_ps(r, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
  return r[0] + r[1] + r[2] + r[3] + r[4] + r[5] + r[6] + r[7];
}

// The memory's read rate on `threads` threads (GB/s of wall time, best of 3 reads of 512 MB, each
// thread its own part), on 4 KB pages (a plain vector) or on huge pages (huge_page_allocator, as
// the decoders' weights and KV cache): what weights and a KV cache that do not fit in cache stream at.
template <class Alloc>
double read_gbps(int threads) {
  const int64_t n = int64_t{128} << 20, part = n / threads / 32 * 32;
  std::vector<float, Alloc> a(static_cast<size_t>(n), 0.0f);  // written: real pages
  std::vector<float> sums(static_cast<size_t>(threads));
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const double t0 = now();
    std::vector<std::thread> ts;
    for (int k = 0; k < threads; ++k)
      ts.emplace_back([&a, &sums, k, part] { sums[static_cast<size_t>(k)] = sum_floats(a.data() + k * part, part); });
    for (auto& t : ts) t.join();
    best = std::min(best, now() - t0);
  }
  if (sums[0] != 0.0f) std::printf("(sum %g)\n", double(sums[0]));  // keeps the reads
  return double(part) * threads * 4 / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string models, batches, dtypes;
  int threads, prompt, decode;
  uint64_t seed;
  po::options_description opts("tessera-bench-decoders: single-process prefill and decode tokens/s");
  opts.add_options()("help", "this help")(
      "models", po::value(&models)->default_value("llama-tiny,gpt2"), "decoder presets or folders, comma-separated")(
      "threads", po::value(&threads)->default_value(2), "oneDNN/OpenMP threads")(
      "prompt", po::value(&prompt)->default_value(128), "prompt tokens per sequence")(
      "decode", po::value(&decode)->default_value(32), "decode steps per sequence")(
      "batches", po::value(&batches)->default_value("1,32"), "decode batch sizes (sequences), comma-separated")(
      "seed", po::value(&seed)->default_value(0), "weights and prompt seed")(
      "dtypes", po::value(&dtypes)->default_value("fp32"),
      "forward dtypes, comma-separated (fp32, bf16, q8_0): each model runs in each, one after the other, and the "
      "table adds a ratio to the first dtype's decode tok/s. q8_0 of a GGUF file runs the file's own Q8_0 blocks "
      "(loaded again, kept), of a preset or folder the fp32 matrices quantised to Q8_0")(
      "attention", "also time the attention kernel alone against oneDNN batched matmul + softmax: a prefill "
                   "chunk (1 x --prompt rows) and a decode step (each --batches count of one row after --prompt)")(
      "linear", "also time the fp32 linear() of a decode step (each --batches count of rows) against oneDNN's sgemm "
                "on the model's GEMM shapes and the LM head, weights from memory, and the memory's read rate")(
      "sgemm", "after each prefill, oneDNN's sgemm alone on its GEMM shapes: prefill GFLOP/s (GEMMs, attention, "
               "LM head) against sgemm's");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-bench-decoders", argc, argv, opts, vm)) return *done;
  std::vector<int> bs;
  for (const auto& b : tessera::split_list(batches)) {
    try { bs.push_back(std::stoi(b)); } catch (...) { bs.push_back(0); }
    if (bs.back() < 1) {
      std::cerr << "--batches: \"" << b << "\" is not a positive count\n";
      return 2;
    }
  }
  if (threads < 1 || prompt < 1 || decode < 1 || bs.empty()) {
    std::cerr << "--threads, --prompt, --decode must be positive and --batches non-empty\n";
    return 2;
  }
  set_num_threads(threads);
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  std::printf("threads %d, OMP_WAIT_POLICY=%s, prompt %d, decode %d, load average %s\n", threads,
              policy ? policy : "(unset)", prompt, decode, load_average().c_str());
  std::vector<dtype> dts;
  for (const auto& d : tessera::split_list(dtypes)) {
    auto dt = parse_dtype(d, /*allow_int8=*/false, /*allow_q8_0=*/true);
    if (!dt) {
      std::cerr << "--dtypes: " << dt.error().message() << "\n";
      return 2;
    }
    if (auto st = check_dtype_supported(*dt); !st.ok()) {
      std::cerr << "--dtypes: " << st.message() << "\n";
      return 2;
    }
    dts.push_back(*dt);
  }
  if (dts.empty()) {
    std::cerr << "--dtypes is empty\n";
    return 2;
  }
  std::printf("%-12s %-5s %-9s %6s %8s %10s %10s %12s %12s %9s %9s\n", "model", "dtype", "phase", "seqs", "tokens",
              "wall s", "cpu s", "tok/s wall", "tok/s cpu", "x first", "x 1st cpu");
  for (const auto& name : tessera::split_list(models)) {
   auto loaded = load_decoder(name, seed);
   if (!loaded) {
     std::cerr << loaded.error().to_string() << "\n";
     return 2;
   }
   // decode tok/s (wall, cpu) of the first dtype per batch size: the ratios of the others to it.
   std::vector<std::pair<double, double>> first_rate;
   for (size_t di = 0; di < dts.size(); ++di) {
    const dtype dt = dts[di];
    const char* dname = dtype_name(dt).data();
    auto* m = &*loaded;
    std::optional<decoder_model> own;  // a GGUF file's own Q8_0 blocks
    const double l0 = now();
    if (dt == dtype::q8_0 && looks_like_gguf(name)) {
      auto q = load_decoder(name, seed, dt);
      if (!q) {
        std::cerr << q.error().to_string() << "\n";
        return 2;
      }
      own = std::move(*q);
      m = &*own;
    } else if (auto st = m->set_dtype(dt); !st.ok()) {
      std::cerr << name << ": " << st.message() << "\n";
      return 2;
    }
    std::printf("%-12s %-5s matrices %.1f MB (%.2f s to %s), load average %s\n", name.c_str(), dname,
                m->matrix_bytes() / 1e6, now() - l0, own ? "load the file's blocks" : "convert",
                load_average().c_str());
    if (prompt + decode > m->shape().max_position_embeddings) {
      std::cerr << name << ": --prompt + --decode exceed max_position_embeddings "
                << m->shape().max_position_embeddings << "\n";
      return 2;
    }
    // Warm-up: oneDNN primitives and sgemm kernels, workspaces for a prompt (a server runs warm).
    (void)run(*m, 1, prompt, 2, seed);
    if (vm.count("attention")) {
      std::vector<std::pair<int, int>> shapes{{1, prompt}};  // (sequences, rows each)
      for (int B : bs) shapes.push_back({B, 1});
      for (const auto& [B, rows] : shapes) {
        const attn_time t = time_attention(m->shape(), B, rows, prompt, 5);
        std::printf("%-12s attention %d x %d rows over %d keys: tessera %.3f ms (%.1f GFLOP/s), oneDNN batched matmul "
                    "+ softmax %.3f ms (%.1f): %.2fx\n", name.c_str(), B, rows, prompt, 1e3 * t.tessera,
                    t.flops / t.tessera / 1e9, 1e3 * t.onednn, t.flops / t.onednn / 1e9, t.onednn / t.tessera);
        std::printf("RESULT bench=decoders model=%s phase=attention seqs=%d rows=%d keys=%d threads=%d tessera_ms=%.4f "
                    "onednn_ms=%.4f speedup=%.3f\n", name.c_str(), B, rows, prompt, threads, 1e3 * t.tessera,
                    1e3 * t.onednn, t.onednn / t.tessera);
      }
    }
    if (vm.count("linear") && dt == dtype::fp32) {
      const auto& c = m->shape();
      const int64_t h = c.hidden_size, f = c.intermediate_size, qw = c.q_width(), kvw = c.kv_width();
      const std::vector<std::array<int64_t, 2>> shapes{{qw + 2 * kvw, h}, {h, qw}, {f, h}, {h, f}, {c.vocab_size, h}};
      for (int B : bs)
        for (const auto& [out, in] : shapes) {
          const linear_time t = time_linear(B, out, in, 6);
          std::printf("%-12s linear %d rows x %lld -> %lld: tessera %.1f GFLOP per CPU-second, oneDNN sgemm %.1f: "
                      "%.2fx\n", name.c_str(), B, static_cast<long long>(in), static_cast<long long>(out),
                      t.flops / t.tessera / 1e9, t.flops / t.sgemm / 1e9, t.sgemm / t.tessera);
          std::printf("RESULT bench=decoders model=%s phase=linear rows=%d in=%lld out=%lld threads=%d "
                      "tessera_gflops_cpu=%.2f sgemm_gflops_cpu=%.2f ratio=%.3f\n", name.c_str(), B,
                      static_cast<long long>(in), static_cast<long long>(out), threads, t.flops / t.tessera / 1e9,
                      t.flops / t.sgemm / 1e9, t.sgemm / t.tessera);
        }
      using small = std::allocator<float>;
      using huge = huge_page_allocator<float>;
      std::printf("memory read rate, GB/s on 1 and %d threads: 4 KB pages %.1f, %.1f; huge pages %.1f, %.1f "
                  "(load average %s)\n", threads, read_gbps<small>(1), read_gbps<small>(threads), read_gbps<huge>(1),
                  read_gbps<huge>(threads), load_average().c_str());
    }
    for (size_t bi = 0; bi < bs.size(); ++bi) {
      const int B = bs[bi];
      auto r = run(*m, B, prompt, decode, seed);
      if (!r) {
        std::cerr << name << ": " << r.error().to_string() << "\n";
        return 2;
      }
      if (vm.count("sgemm")) {
        // GFLOP/s per wall second and per CPU-second x threads (steadier on a shared machine).
        const double fl = prefill_flops(m->shape(), B, prompt) / 1e9;
        const sgemm_time sg = sgemm_layers(m->shape(), int64_t{B} * prompt);
        const double mine = fl / r->first.wall, roof = sg.flops / 1e9 / sg.wall;
        const double mine_cpu = fl / (r->first.cpu / threads), roof_cpu = sg.flops / 1e9 / (sg.cpu / threads);
        std::printf("%-12s prefill %d x %d: %.1f GFLOP/s (cpu %.1f), oneDNN sgemm alone on its GEMM shapes %.1f "
                    "(cpu %.1f): %.0f%% (cpu %.0f%%)\n", name.c_str(), B, prompt, mine, mine_cpu, roof, roof_cpu,
                    100 * mine / roof, 100 * mine_cpu / roof_cpu);
        std::printf("RESULT bench=decoders model=%s phase=prefill_vs_sgemm seqs=%d prompt=%d threads=%d gflops=%.2f "
                    "sgemm_gflops=%.2f ratio=%.3f gflops_cpu=%.2f sgemm_gflops_cpu=%.2f ratio_cpu=%.3f\n",
                    name.c_str(), B, prompt, threads, mine, roof, mine / roof, mine_cpu, roof_cpu, mine_cpu / roof_cpu);
      }
      for (const auto& [phase, x] : {std::pair{"prefill", r->first}, std::pair{"decode", r->second}}) {
        const double per_cpu = x.tokens / (x.cpu / threads), per_wall = x.tokens / x.wall;
        const bool dec = std::string(phase) == "decode";
        if (dec && di == 0) first_rate.push_back({per_wall, per_cpu});
        const double ratio = dec ? per_wall / first_rate[bi].first : 0, ratio_cpu = dec ? per_cpu / first_rate[bi].second : 0;
        std::printf("%-12s %-5s %-9s %6d %8lld %10.3f %10.3f %12.1f %12.1f %9s %9s\n", name.c_str(), dname, phase, B,
                    static_cast<long long>(x.tokens), x.wall, x.cpu, per_wall, per_cpu,
                    dec ? two_places(ratio).c_str() : "-", dec ? two_places(ratio_cpu).c_str() : "-");
        std::printf("RESULT bench=decoders model=%s dtype=%s phase=%s seqs=%d prompt=%d threads=%d tokens=%lld wall_s=%.4f "
                    "cpu_s=%.4f tok_per_s_wall=%.2f tok_per_s_cpu=%.2f ratio_to_first_dtype=%.3f ratio_to_first_dtype_cpu=%.3f\n",
                    name.c_str(), dname, phase, B, prompt, threads, static_cast<long long>(x.tokens), x.wall, x.cpu,
                    per_wall, per_cpu, ratio, ratio_cpu);
      }
    }
   }
  }
  std::printf("load average at the end %s\n", load_average().c_str());
  return 0;
}
