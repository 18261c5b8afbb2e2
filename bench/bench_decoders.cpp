// bench_decoders: single-process decoder throughput over the paged KV cache (decoder_model::step):
// prefill tokens/s of packed prompts, and decode tokens/s at several batch sizes, each sequence
// at its own position after its prompt.
//
//   build/bin/tessera-bench-decoders --models llama-tiny,gpt2 --threads 2 --prompt 128 --decode 32 --batches 1,32
//
// Prefill: for each batch size B, B prompts of --prompt seeded tokens in one mixed step (packed, no
// padding; a prefill under 1 s is timed again, warm: the first pays its fresh workspaces' page
// faults once). Decode: for each batch size B, B sequences with a --prompt-token context each take
// --decode steps of one token each (one step = B tokens). Wall time and process CPU time are both
// shown: on a shared machine, tokens / (cpu / threads) estimates dedicated-core speed
// (pessimistically: OpenMP spin-waits count as CPU time). On a machine shared with other jobs,
// run it with OMP_WAIT_POLICY=passive: libgomp's spinning threads otherwise lose whole time slices
// to each other (gpt2 decode at batch 1 on 2 threads under load: 0.7 s passive vs 14 s active for
// 8 tokens). Prints a table and RESULT lines.
#include <algorithm>
#include <array>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/models/batch.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/kernels.hpp"

namespace po = boost::program_options;
using namespace tessera::models;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) v.push_back(item);
  return v;
}

struct measured {
  double wall = 0, cpu = 0;
  int64_t tokens = 0;
};

// B sequences of `prompt` tokens: one packed prefill step, then `decode` steps of one token each.
tessera::result<std::pair<measured, measured>> run(const decoder_model& m, int B, int prompt, int decode, uint64_t seed) {
  const auto& c = m.shape();
  const int bt = 16, per_seq = (prompt + decode + bt - 1) / bt;
  auto cache = paged_kv_cache::make(c, {bt, B * per_seq});
  if (!cache) return cache.error();
  splitmix64 r(seed);
  step_batch batch;
  for (int s = 0; s < B; ++s) {
    seq_step st;
    st.seq_id = static_cast<uint64_t>(s);
    for (int i = 0; i < prompt; ++i) st.tokens.push_back(static_cast<int32_t>(r.next_int(0, c.vocab_size - 1)));
    for (int b = 0; b < per_seq; ++b) st.block_table.push_back(s * per_seq + b);
    batch.seqs.push_back(std::move(st));
  }
  measured pre, dec;
  double t0 = now(), c0 = cpu_now();
  auto out = m.step(batch, *cache);
  if (!out) return out.error();
  pre = {now() - t0, cpu_now() - c0, int64_t{B} * prompt};
  if (pre.wall < 1.0) {  // cheap to repeat: time it warm (first-touch page faults of fresh workspaces are one-time)
    t0 = now();
    c0 = cpu_now();
    out = m.step(batch, *cache);
    if (!out) return out.error();
    pre = {now() - t0, cpu_now() - c0, int64_t{B} * prompt};
  }
  t0 = now();
  c0 = cpu_now();
  for (int n = 0; n < decode; ++n) {
    for (int s = 0; s < B; ++s) {
      const auto& l = (*out)[static_cast<size_t>(s)];
      batch.seqs[s].tokens = {static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin())};
      batch.seqs[s].start_pos = prompt + n;
    }
    out = m.step(batch, *cache);
    if (!out) return out.error();
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

}  // namespace

int main(int argc, char** argv) {
  std::string models, batches;
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
      "sgemm", "after each prefill, oneDNN's sgemm alone on its GEMM shapes: prefill GFLOP/s (GEMMs, attention, "
               "LM head) against sgemm's");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n" << opts;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  std::vector<int> bs;
  for (const auto& b : split(batches)) {
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
  std::printf("threads %d, OMP_WAIT_POLICY=%s, prompt %d, decode %d\n", threads, policy ? policy : "(unset)", prompt,
              decode);
  std::printf("%-12s %-9s %6s %8s %10s %10s %12s %12s\n", "model", "phase", "seqs", "tokens", "wall s", "cpu s",
              "tok/s wall", "tok/s cpu");
  for (const auto& name : split(models)) {
    auto m = load_decoder(name, seed);
    if (!m) {
      std::cerr << m.error().to_string() << "\n";
      return 2;
    }
    if (prompt + decode > m->shape().max_position_embeddings) {
      std::cerr << name << ": --prompt + --decode exceed max_position_embeddings "
                << m->shape().max_position_embeddings << "\n";
      return 2;
    }
    // Warm-up: oneDNN primitives and sgemm kernels, workspaces for a prompt (a server runs warm).
    (void)run(*m, 1, prompt, 2, seed);
    for (int B : bs) {
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
        const double per_cpu = x.tokens / (x.cpu / threads);
        std::printf("%-12s %-9s %6d %8lld %10.3f %10.3f %12.1f %12.1f\n", name.c_str(), phase, B,
                    static_cast<long long>(x.tokens), x.wall, x.cpu, x.tokens / x.wall, per_cpu);
        std::printf("RESULT bench=decoders model=%s phase=%s seqs=%d prompt=%d threads=%d tokens=%lld wall_s=%.4f "
                    "cpu_s=%.4f tok_per_s_wall=%.2f tok_per_s_cpu=%.2f\n",
                    name.c_str(), phase, B, prompt, threads, static_cast<long long>(x.tokens), x.wall, x.cpu,
                    x.tokens / x.wall, per_cpu);
      }
    }
  }
  return 0;
}
