// tessera-gpu --dtype bf16 as real processes: its logits (packed, padded to the longest, padded
// wider) against the single-process fp32 reference within the bf16 bounds of
// tests/common's bf16_bounds.hpp; its modelled clock equal to an fp32 process's (the 16-bit
// tensor-core rate whatever the forward computes in); a client or a host in the other dtype
// refused with a message naming both; tessera-host --serve routing HTTP requests to a spawned
// bf16 tessera-gpu or an in-process bf16 GPU replica (hybrid routing) with raw scores near an
// fp32 host's; tessera-gpu --serve --dtype bf16 on a decoder (twice the KV blocks, completions).
// tessera-gpu --dtype int8: within the int8 bound of fp32 and as the single-process int8 forward;
// a client in fp32 refused; no VNNI and decoders refused by name.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "tessera/host/remote_backend.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/test/bf16_bounds.hpp"
#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"
#include "tessera/test/run_tool.hpp"
#include "batch_requests.hpp"

using namespace tessera;
using namespace std::chrono_literals;
using test_support::bin;
using test_support::compare_logits;
using test_support::kBf16Agreement;
using test_support::kBf16MaxAbs;
using test_support::request_of;
using test_support::run;

namespace {

const models::bert_model& tiny() {
  static models::bert_model m = models::load_model("bert-tiny").value();
  return m;
}

// A tessera-gpu started by the test on a free loopback port; stopped (SIGTERM) at the end.
struct gpu_process {
  test_support::child c;
  std::string endpoint;
  explicit gpu_process(const std::string& dtype) {
    c = test_support::spawn({bin("tessera-gpu"), "--model", "bert-tiny", "--bind", "tcp://127.0.0.1:0", "--threads",
                             "2", "--dtype", dtype});
    const std::string line = test_support::read_line(c.out_fd);
    const std::string prefix = "listening on ";
    if (line.rfind(prefix, 0) == 0) endpoint = line.substr(prefix.size());
  }
  ~gpu_process() { test_support::stop(c); }
};

std::shared_ptr<host::remote_backend> connect(const std::string& endpoint, models::dtype compute) {
  host::remote_backend_config c;
  c.endpoint = endpoint;
  c.info = {.name = "gpu0", .kind = "gpu", .max_sequence_length = tiny().config.max_position_embeddings,
            .num_labels = tiny().config.num_labels};
  c.compute = compute;
  auto b = host::remote_backend::start(c);
  EXPECT_TRUE(b) << b.error().to_string();
  if (!b) return nullptr;
  EXPECT_TRUE((*b)->wait_ready(30s));
  return *b;
}

#define REQUIRE_BF16_AND_BINARY(name)                                                                       \
  ASSERT_TRUE(models::check_dtype_supported(models::dtype::bf16).ok()) << "the bf16 tests need avx512_bf16"; \
  if (!std::filesystem::exists(bin(name))) GTEST_FAIL() << bin(name) << " not built"

}  // namespace

TEST(GpuBf16, LogitsMatchFp32ReferenceAndTheModelledClockIsTheFp32Process) {
  REQUIRE_BF16_AND_BINARY("tessera-gpu");
  gpu_process p16("bf16"), p32("fp32");
  ASSERT_FALSE(p16.endpoint.empty());
  ASSERT_FALSE(p32.endpoint.empty());
  auto b16 = connect(p16.endpoint, models::dtype::bf16), b32 = connect(p32.endpoint, models::dtype::fp32);
  ASSERT_TRUE(b16 && b32);
  // The seed mix (60% short, 40% long), as tests/models/bf16_test.cpp runs bert-tiny (fewer
  // sequences: padded to 512 on two processes, this is most of the test's time).
  const auto batch = models::synthetic_batch(models::seed_workload(48, 0.4, 5), tiny().config.vocab_size, 3);
  const auto want = models::reference_forward(tiny(), batch);
  const int32_t longest = batch.max_seq_len();
  for (auto [layout, padded] : {std::pair{backends::batch_layout::packed, 0},
                                std::pair{backends::batch_layout::padded, longest},
                                std::pair{backends::batch_layout::padded, tiny().config.max_position_embeddings}}) {
    const auto r16 = run(*b16, request_of(batch, 1, layout, padded), 120s);
    ASSERT_TRUE(r16.st.ok()) << r16.st.to_string();
    const auto a = compare_logits(r16.logits, want, tiny().config.num_labels);
    std::printf("[ gpu bf16 ] %s padded_length %d, %d sequences: max abs %.5f, mean abs %.6f, argmax agreement %.2f%% "
                "(%.2f%% of the %d decided)\n",
                layout == backends::batch_layout::packed ? "packed" : "padded", padded, batch.num_seqs(), a.max_abs,
                a.mean_abs, 100 * a.agreement, 100 * a.decided_agreement, a.decided);
    EXPECT_LE(a.max_abs, kBf16MaxAbs);
    EXPECT_GE(a.decided, batch.num_seqs() / 4) << "too few decided sequences for the agreement to mean much";
    EXPECT_GE(a.decided_agreement, kBf16Agreement);
    EXPECT_GT(a.mean_abs, 0.0) << "tessera-gpu --dtype bf16 answered fp32's logits exactly";
    // The modelled clock costs the batch's shape at the 16-bit tensor-core rate in both processes.
    const auto r32 = run(*b32, request_of(batch, 2, layout, padded), 120s);
    ASSERT_TRUE(r32.st.ok()) << r32.st.to_string();
    EXPECT_LE(compare_logits(r32.logits, want, tiny().config.num_labels).max_abs, 1e-4);
    EXPECT_GT(r16.timing.modelled_seconds, 0.0);
    EXPECT_EQ(r16.timing.modelled_seconds, r32.timing.modelled_seconds);
  }
}

TEST(GpuBf16, AClientInTheOtherDtypeIsRefusedNamingBoth) {
  REQUIRE_BF16_AND_BINARY("tessera-gpu");
  gpu_process p16("bf16");
  ASSERT_FALSE(p16.endpoint.empty());
  auto wrong = connect(p16.endpoint, models::dtype::fp32);
  ASSERT_TRUE(wrong);
  const status st = wrong->check_compute(30s);
  EXPECT_EQ(st.code(), errc::invalid_argument) << st.to_string();
  EXPECT_NE(st.message().find("this tessera-gpu computes in bf16 and the batch asks for fp32"), std::string::npos)
      << st.to_string();
  // A batch is refused too, never answered with logits of the other dtype.
  const auto batch = models::synthetic_batch({9, 30}, tiny().config.vocab_size, 4);
  const auto r = run(*wrong, request_of(batch, 3, backends::batch_layout::padded, 30));
  EXPECT_EQ(r.st.code(), errc::invalid_argument) << r.st.to_string();
  EXPECT_TRUE(r.logits.empty());
  auto right = connect(p16.endpoint, models::dtype::bf16);
  ASSERT_TRUE(right);
  EXPECT_TRUE(right->check_compute(30s).ok());

  // tessera-host pointed at it in fp32 refuses to start, naming both dtypes (exit 2).
  std::string out;
  const std::string host = test_support::tool_path("tessera-host");
  EXPECT_EQ(test_support::run_tool(host, "--model bert-tiny --tiles 1 --tile-memory 64MiB --serve --port 0 --gpu-endpoint " +
                                             p16.endpoint, out, "2>&1 < /dev/null"), 2) << out;
  EXPECT_NE(out.find("computes in bf16 and the batch asks for fp32: start tessera-gpu with --dtype fp32 or the host "
                     "with --dtype bf16"), std::string::npos) << out;
}

TEST(GpuBf16, CommandLineNamesTheDtypes) {
  REQUIRE_BF16_AND_BINARY("tessera-gpu");
  const std::string gpu = test_support::tool_path("tessera-gpu");
  std::string out;
  EXPECT_EQ(test_support::run_tool(gpu, "--model bert-tiny --dtype fp16", out, "2>&1 < /dev/null"), 2) << out;
  EXPECT_NE(out.find("the modelled clock's dtype is --timing-dtype fp16"), std::string::npos) << out;
  EXPECT_EQ(test_support::run_tool(gpu, "--model bert-tiny --timing-dtype bf16", out, "2>&1 < /dev/null"), 2) << out;
  EXPECT_NE(out.find("--timing-dtype: unknown dtype 'bf16'; use fp16 or fp32"), std::string::npos) << out;
  EXPECT_EQ(test_support::run_tool(gpu, "--model llama-tiny --serve --dtype fp16", out, "2>&1 < /dev/null"), 2) << out;
  EXPECT_NE(out.find("--dtype: unknown dtype"), std::string::npos) << out;
  // A CPU without bf16 (oneDNN's ISA lowered): refused at start, never fp32 in its place.
  EXPECT_EQ(test_support::run_tool("ONEDNN_MAX_CPU_ISA=AVX512_CORE " + gpu, "--model bert-tiny --dtype bf16", out,
                                   "2>&1 < /dev/null"), 2) << out;
  EXPECT_NE(out.find("--dtype bf16 needs a CPU with avx512_bf16 or AMX"), std::string::npos) << out;
}

// ---- tessera-gpu --dtype int8 (docs/models.md "int8") ----

// int8 logits (packed, padded to the longest, padded to 512) against the single-process fp32
// reference within models::int8_logit_bound x max(1, max |fp32 logit|) with raw argmax agreement
// 100% (bert-tiny's single-process int8 keeps every argmax on these inputs: int8_test), and the
// packed answer against the single-process int8 forward: the process calibrates on the same
// seeded set and runs the same kernels, so it agrees to fp32 rounding (1e-5; measured 0).
TEST(GpuInt8, LogitsWithinTheInt8BoundOfFp32AndAsTheSingleProcessInt8) {
  ASSERT_TRUE(models::check_dtype_supported(models::dtype::int8).ok()) << "the int8 tests need avx512_vnni";
  if (!std::filesystem::exists(bin("tessera-gpu"))) GTEST_FAIL() << bin("tessera-gpu") << " not built";
  gpu_process p8("int8");
  ASSERT_FALSE(p8.endpoint.empty());
  auto b8 = connect(p8.endpoint, models::dtype::int8);
  ASSERT_TRUE(b8);
  const auto batch = models::synthetic_batch(models::seed_workload(48, 0.4, 5), tiny().config.vocab_size, 3);
  const auto want = models::reference_forward(tiny(), batch);
  models::bert_model q = tiny();
  ASSERT_TRUE(models::set_dtype(q, models::dtype::int8).ok());
  const auto want8 = models::reference_forward(q, batch);
  double scale = 1;
  for (float v : want) scale = std::max(scale, double(std::fabs(v)));
  const int32_t longest = batch.max_seq_len();
  uint64_t id = 1;
  for (auto [layout, padded] : {std::pair{backends::batch_layout::packed, 0},
                                std::pair{backends::batch_layout::padded, longest},
                                std::pair{backends::batch_layout::padded, tiny().config.max_position_embeddings}}) {
    const auto r8 = run(*b8, request_of(batch, id++, layout, padded), 120s);
    ASSERT_TRUE(r8.st.ok()) << r8.st.to_string();
    const auto a = compare_logits(r8.logits, want, tiny().config.num_labels);
    std::printf("[ gpu int8 ] %s padded_length %d, %d sequences: max abs %.5f (bound %.3f), mean abs %.6f, argmax "
                "agreement %.2f%%\n",
                layout == backends::batch_layout::packed ? "packed" : "padded", padded, batch.num_seqs(), a.max_abs,
                models::int8_logit_bound * scale, a.mean_abs, 100 * a.agreement);
    EXPECT_LE(a.max_abs, models::int8_logit_bound * scale);
    EXPECT_GE(a.agreement, 1.0 - 1e-9);  // a sum of 1 / n per agreeing sequence
    EXPECT_GT(a.mean_abs, 0.0) << "tessera-gpu --dtype int8 answered fp32's logits exactly";
    if (layout == backends::batch_layout::packed) {
      const auto s = compare_logits(r8.logits, want8, tiny().config.num_labels);
      std::printf("[ gpu int8 ] packed against the single-process int8 forward: max abs %.3g\n", s.max_abs);
      EXPECT_LE(s.max_abs, 1e-5);
    }
  }
  // A client in fp32 is refused naming both dtypes, never answered with int8 logits.
  auto wrong = connect(p8.endpoint, models::dtype::fp32);
  ASSERT_TRUE(wrong);
  const status st = wrong->check_compute(30s);
  EXPECT_EQ(st.code(), errc::invalid_argument) << st.to_string();
  EXPECT_NE(st.message().find("this tessera-gpu computes in int8 and the batch asks for fp32"), std::string::npos)
      << st.to_string();
}

// A CPU without VNNI is refused at start (never fp32 in int8's place); decoders (--serve) have no
// int8 path and refuse it by name.
TEST(GpuInt8, CommandLineRefusesWhatCannotRunInt8) {
  if (!std::filesystem::exists(bin("tessera-gpu"))) GTEST_FAIL() << bin("tessera-gpu") << " not built";
  const std::string gpu = test_support::tool_path("tessera-gpu");
  std::string out;
  EXPECT_EQ(test_support::run_tool("ONEDNN_MAX_CPU_ISA=AVX512_CORE " + gpu, "--model bert-tiny --dtype int8", out,
                                   "2>&1 < /dev/null"), 2) << out;
  EXPECT_NE(out.find("--dtype int8 needs a CPU with avx512_vnni"), std::string::npos) << out;
  EXPECT_EQ(out.find("listening on"), std::string::npos) << out;
  EXPECT_EQ(test_support::run_tool(gpu, "--model llama-tiny --serve --dtype int8", out, "2>&1 < /dev/null"), 2) << out;
  EXPECT_NE(out.find("--dtype int8 runs the BERT encoder only ("), std::string::npos) << out;
  EXPECT_EQ(test_support::run_tool(gpu, "--model bert-tiny --dtype int4", out, "2>&1 < /dev/null"), 2) << out;
  EXPECT_NE(out.find("unknown dtype \"int4\": use fp32 or bf16 or int8"), std::string::npos) << out;
}

namespace {

// Raw scores (logits) by label of each input of a /predict answer.
std::vector<std::map<std::string, double>> raw_scores(const test_support::http_response& r) {
  std::vector<std::map<std::string, double>> out;
  EXPECT_EQ(r.status, 200u) << r.body;
  if (r.status != 200) return out;
  for (const auto& input : nlohmann::json::parse(r.body)) {
    out.emplace_back();
    for (const auto& s : input) out.back()[s["label"].get<std::string>()] = s["score"].get<double>();
  }
  return out;
}

}  // namespace

// Hybrid routing with a threshold above every input: each request goes to the GPU backend, a
// spawned tessera-gpu (which the bf16 host starts with --dtype bf16) or an in-process
// --gpu-replicas one (on the bf16 model); /metrics counts its sequences, the tiles' none.
TEST(GpuBf16, HostServesHttpThroughBf16GpuBackends) {
  REQUIRE_BF16_AND_BINARY("tessera-host");
  auto start = [](const std::string& dtype, const std::string& gpu_flag) {
    return std::make_unique<test_support::served_process>(std::vector<std::string>{
        bin("tessera-host"), "--model", "bert-tiny", "--tiles", "1", "--tile-memory", "64MiB", gpu_flag, "1",
        "--routing", "hybrid", "--long-threshold", "512", "--serve", "--port", "0", "--dtype", dtype});
  };
  auto h32 = start("fp32", "--spawn-gpu");
  ASSERT_NE(h32->port(), 0) << h32->line();
  test_support::http_connection a("127.0.0.1", h32->port());
  EXPECT_EQ(nlohmann::json::parse(a.request("GET", "/info").body)["model_dtype"], "float32");
  const std::string req = R"({"raw_scores": true, "inputs": [["the bf16 forward over http"],
      ["a second and somewhat longer input sentence, routed to the gpu process"], ["short"],
      ["one more of middling length for the padded batch"]]})";
  const auto s32 = raw_scores(a.request("POST", "/predict", req));
  ASSERT_EQ(s32.size(), 4u);
  for (const std::string gpu_flag : {"--spawn-gpu", "--gpu-replicas"}) {
    auto h16 = start("bf16", gpu_flag);
    ASSERT_NE(h16->port(), 0) << h16->line();
    test_support::http_connection b("127.0.0.1", h16->port());
    EXPECT_EQ(nlohmann::json::parse(b.request("GET", "/info").body)["model_dtype"], "bfloat16");
    const auto s16 = raw_scores(b.request("POST", "/predict", req));
    ASSERT_EQ(s16.size(), 4u);
    std::vector<float> got, want;
    for (size_t i = 0; i < s32.size(); ++i) {
      ASSERT_EQ(s16[i].size(), s32[i].size());
      for (const auto& [label, score] : s32[i]) {
        ASSERT_TRUE(s16[i].count(label)) << label;
        want.push_back(static_cast<float>(score));
        got.push_back(static_cast<float>(s16[i].at(label)));
      }
    }
    const auto d = compare_logits(got, want, static_cast<int>(s32[0].size()));
    std::printf("[ host bf16 over http, %s ] max |raw score - fp32 host's| %.5f, mean %.6f\n", gpu_flag.c_str(),
                d.max_abs, d.mean_abs);
    EXPECT_LE(d.max_abs, kBf16MaxAbs) << gpu_flag;
    EXPECT_GT(d.mean_abs, 0.0) << gpu_flag << ": the bf16 host answered fp32's scores exactly";
    const std::string metrics = b.request("GET", "/metrics").body;
    EXPECT_NE(metrics.find("tessera_backend_sequences{backend=\"gpu0\"} 4"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("tessera_backend_sequences{backend=\"tiles0\"} 0"), std::string::npos) << metrics;
  }
}

namespace {

// The value of a gauge in a /metrics text (NAN when absent).
double gauge(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  return at == std::string::npos ? NAN : std::stod(metrics.substr(at + name.size() + 2));
}

}  // namespace

// tessera-gpu --serve --dtype bf16 on a decoder: the same --kv-memory-mb holds twice the KV
// blocks (a bf16 block is half the bytes), and greedy completions come back over HTTP.
TEST(GpuBf16, DecoderServesWithTwiceTheKvBlocks) {
  REQUIRE_BF16_AND_BINARY("tessera-gpu");
  double blocks[2] = {0, 0};
  int i = 0;
  for (const std::string dtype : {"fp32", "bf16"}) {
    test_support::served_process p({bin("tessera-gpu"), "--model", "llama-tiny", "--serve", "--port", "0",
                                    "--kv-memory-mb", "8", "--dtype", dtype});
    ASSERT_NE(p.port(), 0) << p.line();
    test_support::http_connection c("127.0.0.1", p.port());
    blocks[i++] = gauge(c.request("GET", "/metrics").body, "tessera_llm_kv_blocks_free");
    const auto r = c.request("POST", "/v1/completions",
                             R"({"model": "llama-tiny", "prompt": [5, 17, 42, 7], "max_tokens": 8, "temperature": 0})");
    ASSERT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(nlohmann::json::parse(r.body)["usage"]["completion_tokens"], 8) << r.body;
  }
  ASSERT_GT(blocks[0], 0) << "no tessera_llm_kv_blocks_free gauge";
  EXPECT_EQ(blocks[1], 2 * blocks[0]);
}
