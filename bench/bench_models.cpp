// bench_models: throughput of the reference BERT forward on the seed workload, packed
// (padding-free) vs padded batches, against oneDNN sgemm alone on the same GEMM shapes.
//
//   build-models/bin/tessera-bench-models --model bert-base --threads 2
//
// Workload: --requests lengths from seed_workload (60% U[8,64] + 40% U[200,512], seed 0), synthetic
// token ids. Modes: a = packed batches of --batch requests in arrival order (one GEMM per linear
// layer over all tokens of the batch), b = padded batches of --batch in arrival order, c = padded
// after sorting by length, d = oneDNN's GEMM alone on mode a's GEMM shapes (one layer per batch,
// run right after each mode-a batch): sgemm in fp32, its bf16 matmul (fixed M, packed weights,
// primitive made before timing) in bf16.
// --dtype bf16 runs the bf16 forward (every mode; d is oneDNN's bf16 matmul) and checks its
// logits on the first --check requests against the fp32 forward: max and mean |difference| and
// argmax agreement. --dtype int8 runs the int8 encoder (int8_weights.hpp; d is oneDNN's s8s8
// matmul). A list (--dtype fp32,bf16,int8) runs every dtype in one process, mode a interleaved
// batch by batch (each batch in every dtype before the next batch), so that on a shared machine
// every dtype sees the same load; it prints each dtype's rows and the ratios to the first.
// --profile times each op of mode a's forwards (tessera/models/op_profile.hpp) and prints a
// table: seconds, share of the forward, GFLOP/s of the GEMMs and attention, and attention's parts
// as shares of its time; --profile-csv FILE writes the same rows as CSV.
// Prints a table and RESULT lines (key=value, as ../shared/peers/summarize.py reads).
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <ctime>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "tessera/models/bf16_weights.hpp"
#include "tessera/models/int8_weights.hpp"
#include "tessera/models/kernels_int8.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/op_profile.hpp"
#include "tessera/common/cli.hpp"
#include "tessera/common/cpu_time.hpp"

namespace po = boost::program_options;
using namespace tessera::models;

namespace {

using tessera::bench::now;
using tessera::bench::cpu_now;

struct row {
  std::string mode, dtype;
  double secs, cpu_secs, useful_flops, executed_flops;
  int64_t tokens, padded_tokens;
};

double sgemm_seconds(const bert_config& c, const std::vector<int64_t>& batch_tokens, double& flops, double& cpu) {
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  int64_t max_t = *std::max_element(batch_tokens.begin(), batch_tokens.end());
  std::vector<float> x(max_t * f, 0.01f), y(max_t * f), w_hh(h * h, 0.02f), w_fh(f * h, 0.02f);
  double secs = 0;
  flops = 0;
  cpu = 0;
  for (int64_t T : batch_tokens) {
    const double t0 = now(), c0 = cpu_now();
    for (int i = 0; i < 4; ++i) sgemm_abt(x.data(), w_hh.data(), y.data(), T, h, h);  // Q, K, V, out
    sgemm_abt(x.data(), w_fh.data(), y.data(), T, f, h);                             // FFN in
    sgemm_abt(x.data(), w_fh.data(), y.data(), T, h, f);                             // FFN out
    secs += now() - t0;
    cpu += cpu_now() - c0;
    flops += linear_flops(c, T) / c.num_layers;
  }
  return secs;
}

// Mode d in bf16: oneDNN's bf16 matmul on the forward's shapes (Q, K and V fused as it runs them).
double bf16_gemm_seconds(const bert_config& c, int64_t T, double& flops, double& cpu) {
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  static std::vector<bfloat16> x, y;
  static bf16_weight w_qkv, w_hh, w_fh, w_hf;
  if (w_qkv.empty()) {
    std::vector<float> w(static_cast<size_t>(3 * h * f), 0.02f);
    w_qkv = bf16_weight::pack(w.data(), 3 * h, h);
    w_hh = bf16_weight::pack(w.data(), h, h);
    w_fh = bf16_weight::pack(w.data(), f, h);
    w_hf = bf16_weight::pack(w.data(), h, f);
  }
  x.assign(static_cast<size_t>(T * f), to_bf16(0.01f));
  y.resize(static_cast<size_t>(T * std::max(f, 3 * h)));
  auto layer = [&] {
    gemm_bf16_abt(x.data(), w_qkv, y.data(), T);
    gemm_bf16_abt(x.data(), w_hh, y.data(), T);
    gemm_bf16_abt(x.data(), w_fh, y.data(), T);
    gemm_bf16_abt(x.data(), w_hf, y.data(), T);
  };
  layer();  // makes the primitives for this T, untimed
  const double t0 = now(), c0 = cpu_now();
  layer();
  cpu = cpu_now() - c0;
  flops = linear_flops(c, T) / c.num_layers;
  return now() - t0;
}

// Mode d in int8: oneDNN's s8s8 matmul on the forward's shapes, dequantized to fp32 (Q, K and V
// fused as the forward runs them).
double int8_gemm_seconds(const bert_config& c, int64_t T, double& flops, double& cpu) {
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  static std::vector<int8_t> x;
  static std::vector<float> y;
  static int8_weight w_qkv, w_hh, w_fh, w_hf;
  if (w_qkv.empty()) {
    std::vector<float> w(static_cast<size_t>(3 * h * f), 0.02f);
    w_qkv = int8_weight::pack(w.data(), 3 * h, h);
    w_hh = int8_weight::pack(w.data(), h, h);
    w_fh = int8_weight::pack(w.data(), f, h);
    w_hf = int8_weight::pack(w.data(), h, f);
  }
  x.assign(static_cast<size_t>(T * f), 3);
  y.resize(static_cast<size_t>(T * std::max(f, 3 * h)));
  auto layer = [&] {
    gemm_int8_abt(x.data(), w_qkv, y.data(), T);
    gemm_int8_abt(x.data(), w_hh, y.data(), T);
    gemm_int8_abt(x.data(), w_fh, y.data(), T);
    gemm_int8_abt(x.data(), w_hf, y.data(), T);
  };
  layer();  // makes the primitives for this T, untimed
  const double t0 = now(), c0 = cpu_now();
  layer();
  cpu = cpu_now() - c0;
  flops = linear_flops(c, T) / c.num_layers;
  return now() - t0;
}

const char* gemm_name(dtype d) {
  return d == dtype::bf16 ? "bf16 GEMM" : d == dtype::int8 ? "s8s8 GEMM" : "sgemm";
}
std::string d_row_name(dtype d) {
  return d == dtype::bf16 ? "d_bf16_gemm_alone" : d == dtype::int8 ? "d_int8_gemm_alone" : "d_sgemm_alone";
}
const char* d_impl_name(dtype d) {
  return d == dtype::bf16 ? "onednn_bf16" : d == dtype::int8 ? "onednn_int8" : "onednn_sgemm";
}

// The per-op table of a profiled mode a (stdout) and its CSV rows.
// With append_csv set (a later dtype of a list), its rows are appended to that file instead.
void print_profile(const forward_profile& p, const std::string& dtype, const std::string& csv_path,
                   const std::string& append_csv = "") {
  struct line {
    std::string op;
    double secs, flops;
  };
  std::vector<line> lines;
  double timed = 0;
  for (int i = 0; i < kForwardOps; ++i) {
    lines.push_back({op_name(static_cast<forward_op>(i)), p.secs[static_cast<size_t>(i)],
                     p.flops[static_cast<size_t>(i)]});
    timed += p.secs[static_cast<size_t>(i)];
  }
  lines.push_back({"between ops", p.forward_secs - timed, 0});
  // Attention's parts: its wall time split in proportion to the parts' thread-seconds.
  const double attn = p.secs[static_cast<size_t>(forward_op::attention)];
  double part_total = 0;
  for (double v : p.attention_thread_secs) part_total += v;
  for (int i = 0; i < kAttentionParts && part_total > 0; ++i)
    lines.push_back({part_name(static_cast<attention_part>(i)),
                     attn * p.attention_thread_secs[static_cast<size_t>(i)] / part_total, 0});
  std::printf("\nper-op profile of mode a (%s, %lld forwards, %.2f s): wall seconds per op summed over layers\n",
              dtype.c_str(), static_cast<long long>(p.forwards), p.forward_secs);
  std::printf("%-20s %9s %8s %9s\n", "op", "secs", "share", "GFLOP/s");
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    csv << "dtype,op,secs,share,gflops\n";
  } else if (!append_csv.empty()) {
    csv.open(append_csv, std::ios::app);
  }
  for (const auto& l : lines) {
    const double share = l.secs / p.forward_secs, gf = l.flops > 0 && l.secs > 0 ? l.flops / l.secs / 1e9 : 0;
    char g[32] = "-";
    if (gf > 0) std::snprintf(g, sizeof g, "%.1f", gf);
    std::printf("%-20s %9.3f %7.1f%% %9s\n", l.op.c_str(), l.secs, 100 * share, g);
    if (csv) csv << dtype << "," << l.op << "," << l.secs << "," << share << "," << gf << "\n";
  }
  std::printf("(attn.* rows split attention's time by its parts' thread-seconds; they are inside 'attention')\n");
  if ((!csv_path.empty() || !append_csv.empty()) && !csv)
    std::fprintf(stderr, "%s: cannot write\n", (csv_path.empty() ? append_csv : csv_path).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name, modes, lengths_file, dtype_text, profile_csv;
  bool profile_ops = false;
  int threads, requests, batch_size, check_requests;
  double long_share;
  uint64_t seed;
  po::options_description opts("tessera-bench-models: BERT forward throughput, packed vs padded");
  opts.add_options()("help", "this help")(
      "model", po::value(&model_name)->default_value("bert-base"), "preset name or Hugging Face folder")(
      "threads", po::value(&threads)->default_value(2), "oneDNN/OpenMP threads")(
      "requests", po::value(&requests)->default_value(256), "number of requests")(
      "long-share", po::value(&long_share)->default_value(0.4), "share of U[200,512] requests (rest U[8,64])")(
      "seed", po::value(&seed)->default_value(0), "workload seed")(
      "batch", po::value(&batch_size)->default_value(32), "requests per batch")(
      "modes", po::value(&modes)->default_value("abcd"),
      "a packed, b padded, c padded sorted, d oneDNN GEMM alone (bf16: a and d)")(
      "dtype", po::value(&dtype_text)->default_value("fp32"),
      "fp32, bf16 or int8, or a comma-separated list of them run in one process (fp32,bf16,int8)")(
      "check", po::value(&check_requests)->default_value(32),
      "bf16, int8: compare logits with the fp32 forward on this many requests (0 = none)")(
      "profile", po::bool_switch(&profile_ops), "time each op of mode a's forwards and print the per-op table")(
      "profile-csv", po::value(&profile_csv), "with --profile: also write the table as CSV to this file")(
      "lengths-file", po::value(&lengths_file),
      "request lengths instead of the seed workload: integers separated by spaces, commas or brackets");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-bench-models", argc, argv, opts, vm)) return *done;
  if (threads < 1 || requests < 1 || batch_size < 1 || check_requests < 0) {
    std::cerr << "--threads, --requests and --batch must be positive, --check not negative\n";
    return 2;
  }
  if (profile_ops && modes.find('a') == std::string::npos) {
    std::cerr << "--profile times mode a: add a to --modes\n";
    return 2;
  }
  if (!profile_csv.empty() && !profile_ops) {
    std::cerr << "--profile-csv needs --profile\n";
    return 2;
  }
  std::vector<dtype> dts;
  for (size_t p = 0; p <= dtype_text.size();) {
    const size_t c = std::min(dtype_text.find(',', p), dtype_text.size());
    const auto dt = parse_dtype(dtype_text.substr(p, c - p), /*allow_int8=*/true);
    if (!dt) {
      std::cerr << dt.error().message() << "\n";
      return 2;
    }
    if (std::find(dts.begin(), dts.end(), *dt) != dts.end()) {
      std::cerr << "--dtype names " << dtype_name(*dt) << " twice\n";
      return 2;
    }
    dts.push_back(*dt);
    p = c + 1;
  }
  auto loaded = load_model(model_name);
  if (!loaded) {
    std::cerr << loaded.error().to_string() << "\n";
    return 2;
  }
  set_num_threads(threads);
  const bert_model fp32_model = *loaded;
  std::vector<bert_model> models(dts.size(), *loaded);
  for (size_t k = 0; k < dts.size(); ++k)
    if (const tessera::status st = set_dtype(models[k], dts[k]); st.code() != tessera::errc::ok) {
      std::cerr << st.message() << "\n";
      return 2;
    }
  const bert_model* model = &models[0];
  const bert_config& cfg = model->config;
  std::vector<int> lens = seed_workload(requests, long_share, seed);
  if (!lengths_file.empty()) {
    std::ifstream f(lengths_file);
    if (!f) {
      std::cerr << lengths_file << ": cannot open\n";
      return 2;
    }
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (char& c : text)
      if (!std::isdigit(static_cast<unsigned char>(c))) c = ' ';
    std::istringstream in(text);
    lens.clear();
    for (int L; in >> L;) lens.push_back(L);
    if (lens.empty() || *std::min_element(lens.begin(), lens.end()) < 1 ||
        *std::max_element(lens.begin(), lens.end()) > cfg.max_position_embeddings) {
      std::cerr << lengths_file << ": needs lengths in 1.." << cfg.max_position_embeddings << "\n";
      return 2;
    }
    requests = static_cast<int>(lens.size());
  }
  const packed_batch all = synthetic_batch(lens, cfg.vocab_size);
  const int64_t tokens = all.num_tokens();
  const double useful = forward_flops(cfg, lens);
  std::printf("model %s (%d layers, hidden %d), %s, %d threads, %d requests, %lld tokens (mean %.1f), batch %d\n",
              model->source.c_str(), cfg.num_layers, cfg.hidden_size, dtype_text.c_str(), threads, requests,
              static_cast<long long>(tokens), double(tokens) / requests, batch_size);
  for (const bert_model& m : models) {
    if (m.compute == dtype::bf16)
      std::printf("bf16 on oneDNN ISA %s, weights %.1f MB in bf16\n", bf16_isa_name().c_str(),
                  double(m.bf16->bytes()) / 1e6);
    if (m.compute == dtype::int8)
      std::printf("int8 on oneDNN ISA %s: encoder Linear weights %.1f MB in int8 (per-channel scales), activation "
                  "scales calibrated on %d seeded sequences (%d tokens) that are not this workload\n",
                  bf16_isa_name().c_str(), double(m.int8->bytes()) / 1e6, m.int8->calibration_sequences,
                  m.int8->calibration_tokens);
    (void)reference_forward(m, all.slice(0, std::min(4, requests)));  // warm-up: thread pool, primitives
  }
  std::vector<row> rows;

  std::vector<int64_t> batch_tokens;
  for (int first = 0; first < requests; first += batch_size) {
    const int count = std::min(batch_size, requests - first);
    batch_tokens.push_back(all.seq_offsets[first + count] - all.seq_offsets[first]);
  }
  // Mode d runs right after each packed batch on that batch's shapes, so that on a shared machine
  // both see the same load.
  const bool want_d = modes.find('d') != std::string::npos;
  const size_t D = dts.size();
  std::vector<double> sgemm_gflops(D), sgemm_cpu_gflops(D), d_secs(D), d_cpu(D), d_flops(D);
  auto run_d = [&](size_t k, int64_t T) {
    double flops = 0, cpu = 0;
    d_secs[k] += dts[k] == dtype::bf16   ? bf16_gemm_seconds(cfg, T, flops, cpu)
                 : dts[k] == dtype::int8 ? int8_gemm_seconds(cfg, T, flops, cpu)
                                         : sgemm_seconds(cfg, {T}, flops, cpu);
    d_cpu[k] += cpu;
    d_flops[k] += flops;
  };
  std::vector<forward_profile> profiles(D);
  if (modes.find('a') != std::string::npos) {
    std::vector<double> secs(D), cpu(D);
    for (int first = 0, b = 0; first < requests; first += batch_size, ++b) {
      const packed_batch part = all.slice(first, std::min(batch_size, requests - first));
      for (size_t k = 0; k < D; ++k) {
        const double t0 = now(), c0 = cpu_now();
        set_forward_profile(profile_ops ? &profiles[k] : nullptr);
        (void)reference_forward(models[k], part);
        set_forward_profile(nullptr);
        secs[k] += now() - t0;
        cpu[k] += cpu_now() - c0;
        if (want_d) run_d(k, batch_tokens[static_cast<size_t>(b)]);
      }
    }
    for (size_t k = 0; k < D; ++k)
      rows.push_back({"a_packed", std::string(dtype_name(dts[k])), secs[k], cpu[k], useful, useful, tokens, tokens});
  } else if (want_d) {
    for (int64_t T : batch_tokens)
      for (size_t k = 0; k < D; ++k) run_d(k, T);
  }
  auto padded_row = [&](const std::string& name, const std::vector<int>& order, size_t k) {
    packed_batch b;
    std::vector<int> ordered_lens;
    for (int i : order) {
      b.append(std::span(all.token_ids).subspan(all.seq_offsets[i], all.seq_len(i)),
               std::span(all.token_type_ids).subspan(all.seq_offsets[i], all.seq_len(i)));
      ordered_lens.push_back(lens[i]);
    }
    double executed = 0;
    int64_t padded = 0;
    for (int first = 0; first < requests; first += batch_size) {
      const int count = std::min(batch_size, requests - first);
      const int mx = *std::max_element(ordered_lens.begin() + first, ordered_lens.begin() + first + count);
      executed += forward_flops(cfg, std::vector<int>(count, mx));
      padded += int64_t{count} * mx;
    }
    const double t0 = now(), c0 = cpu_now();
    (void)padded_forward(models[k], b, batch_size);
    rows.push_back({name, std::string(dtype_name(dts[k])), now() - t0, cpu_now() - c0, useful, executed, tokens, padded});
  };
  std::vector<int> order(requests);
  std::iota(order.begin(), order.end(), 0);
  if (modes.find('b') != std::string::npos)
    for (size_t k = 0; k < D; ++k) padded_row("b_padded_arrival", order, k);
  if (modes.find('c') != std::string::npos) {
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return lens[x] < lens[y]; });
    for (size_t k = 0; k < D; ++k) padded_row("c_padded_sorted", order, k);
  }
  if (want_d)
    for (size_t k = 0; k < D; ++k) {
      sgemm_gflops[k] = d_flops[k] / d_secs[k] / 1e9;
      sgemm_cpu_gflops[k] = d_flops[k] / (d_cpu[k] / threads) / 1e9;
    }

  // bf16 and int8 against the fp32 reference on the first --check requests.
  struct accuracy {
    double max_diff = 0, mean_diff = 0, agree = 0, scale = 1;
  };
  std::vector<accuracy> acc(D);
  const int checked = std::min(check_requests, requests);
  std::vector<float> want;
  if (checked > 0 && std::any_of(dts.begin(), dts.end(), [](dtype d) { return d != dtype::fp32; }))
    want = reference_forward(fp32_model, all.slice(0, checked));
  for (float v : want) acc[0].scale = std::max(acc[0].scale, double(std::fabs(v)));
  for (size_t k = 0; k < D && checked > 0; ++k) {
    if (dts[k] == dtype::fp32) continue;
    accuracy& a = acc[k];
    a.scale = acc[0].scale;
    const auto got = reference_forward(models[k], all.slice(0, checked));
    const int labels = cfg.num_labels;
    for (size_t i = 0; i < got.size(); ++i) {
      a.max_diff = std::max(a.max_diff, double(std::fabs(got[i] - want[i])));
      a.mean_diff += std::fabs(got[i] - want[i]) / double(got.size());
    }
    for (int s = 0; s < checked; ++s) {
      auto arg = [&](const std::vector<float>& v) {
        return std::max_element(v.begin() + s * labels, v.begin() + (s + 1) * labels) - v.begin();
      };
      a.agree += arg(got) == arg(want) ? 1.0 / checked : 0.0;
    }
  }

  const bool several = D > 1;
  std::printf("\n%-18s %s%8s %8s %10s %9s %9s %10s %14s\n", "mode", several ? "dtype " : "", "secs", "req/s",
              "tokens/s", "useful", "executed", "cpu req/s", "padded tokens");
  std::printf("%-18s %s%8s %8s %10s %9s %9s %10s %14s\n", "", several ? "      " : "", "", "", "", "GFLOP/s",
              "GFLOP/s", "", "");
  for (const auto& r : rows)
    std::printf("%-18s %s%8.2f %8.2f %10.0f %9.1f %9.1f %10.2f %14lld\n", r.mode.c_str(),
                several ? (r.dtype + std::string(6 - std::min<size_t>(6, r.dtype.size()), ' ')).c_str() : "", r.secs,
                requests / r.secs, r.tokens / r.secs, r.useful_flops / r.secs / 1e9, r.executed_flops / r.secs / 1e9,
                requests / (r.cpu_secs / threads), static_cast<long long>(r.padded_tokens));
  for (size_t k = 0; k < D; ++k)
    if (sgemm_gflops[k] > 0)
      std::printf("%-18s %s%8s %8s %10s %9.1f %9s %10s   (cpu-normalised %.1f GFLOP/s)\n", d_row_name(dts[k]).c_str(),
                  several ? "      " : "", "-", "-", "-", sgemm_gflops[k], "-", "-", sgemm_cpu_gflops[k]);
  for (const auto& r : rows) {
    const size_t k = static_cast<size_t>(std::find_if(dts.begin(), dts.end(), [&](dtype d) {
                                           return dtype_name(d) == r.dtype;
                                         }) - dts.begin());
    if (r.mode == "a_packed" && sgemm_gflops[k] > 0)
      std::printf("%s packed forward at %.0f%% of oneDNN %s GFLOP/s on its shapes (%.0f%% cpu-normalised)\n",
                  r.dtype.c_str(), 100.0 * r.useful_flops / r.secs / 1e9 / sgemm_gflops[k], gemm_name(dts[k]),
                  100.0 * r.useful_flops / (r.cpu_secs / threads) / 1e9 / sgemm_cpu_gflops[k]);
  }
  // Ratios to the first dtype, mode by mode (one process, same load).
  for (const auto& r : rows) {
    if (r.dtype == rows.front().dtype) continue;
    for (const auto& base : rows)
      if (base.mode == r.mode && base.dtype == rows.front().dtype)
        std::printf("%s / %s %s: %.2fx req/s, %.2fx per CPU-second\n", r.dtype.c_str(), base.dtype.c_str(),
                    r.mode.c_str(), base.secs / r.secs, base.cpu_secs / r.cpu_secs);
  }
  std::printf("cpu req/s = requests / (process CPU seconds / threads): the speed with %d dedicated cores, "
              "pessimistic\n", threads);
  for (size_t k = 0; k < D && checked > 0; ++k)
    if (dts[k] != dtype::fp32)
      std::printf("%s vs fp32 logits on the first %d requests: max abs diff %.4f (%.4f of max(1, max |fp32 logit|)), "
                  "mean abs diff %.5f, argmax agreement %.1f%%\n", std::string(dtype_name(dts[k])).c_str(), checked,
                  acc[k].max_diff, acc[k].max_diff / acc[k].scale, acc[k].mean_diff, 100.0 * acc[k].agree);
  if (profile_ops)
    for (size_t k = 0; k < D; ++k)
      print_profile(profiles[k], std::string(dtype_name(dts[k])), k == 0 ? profile_csv : std::string(),
                    /*append_csv=*/k > 0 ? profile_csv : std::string());
  std::printf("\n");
  for (const auto& r : rows)
    std::printf("RESULT impl=tessera mode=%s dtype=%s threads=%d secs=%.3f req_per_s=%.2f tok_per_s=%.0f real_tokens=%lld "
                "padded_tokens=%lld useful_gflops=%.1f padded_gflops=%.1f cpu_req_per_s=%.2f\n",
                r.mode.c_str(), r.dtype.c_str(), threads, r.secs, requests / r.secs, r.tokens / r.secs,
                static_cast<long long>(r.tokens), static_cast<long long>(r.padded_tokens),
                r.useful_flops / r.secs / 1e9, r.executed_flops / r.secs / 1e9, requests / (r.cpu_secs / threads));
  for (size_t k = 0; k < D; ++k)
    if (sgemm_gflops[k] > 0)
      std::printf("RESULT impl=%s mode=d dtype=%s threads=%d gflops=%.1f cpu_gflops=%.1f\n", d_impl_name(dts[k]),
                  std::string(dtype_name(dts[k])).c_str(), threads, sgemm_gflops[k], sgemm_cpu_gflops[k]);
  for (size_t k = 0; k < D && checked > 0; ++k)
    if (dts[k] != dtype::fp32)
      std::printf("RESULT impl=tessera mode=accuracy dtype=%s requests=%d max_abs_diff=%.5f mean_abs_diff=%.6f "
                  "scaled_max_abs_diff=%.5f argmax_agreement=%.4f\n", std::string(dtype_name(dts[k])).c_str(), checked,
                  acc[k].max_diff, acc[k].mean_diff, acc[k].max_diff / acc[k].scale, acc[k].agree);
  return 0;
}
