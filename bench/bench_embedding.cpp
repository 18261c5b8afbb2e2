// tessera-bench-embedding: an embedding model (the head tile pools the last layer's rows with the
// `pool` kernel and ships [sequences, hidden]) against the classifier path (pooler + classifier
// on the same head tile, [sequences, labels] shipped) on the same N tile processes, the same plan
// and the same encoder weights, on the seed's workload (60% U[8,64] + 40% U[200,512] tokens,
// seed 0), in one run: rounds alternate classifier and embedding (ABBA order) so a change of the
// machine's load falls on both alike. Issue 23's target: embedding req/s >= 0.95x classifier's.
//
// Each row: requests/s of wall time and per CPU-second (this process and its tiles), the ratio to
// the classifier, bytes the host receives per request (logits or pooled vectors), the tiles'
// compute per request (summed over tiles), and the largest |difference| from the single-process
// forward (reference_forward / reference_embed) on the first batches. Markdown table, RESULT lines.
//
//   tessera-bench-embedding                                 # bert-base, 2 tiles, 64 requests, 3 rounds
//   tessera-bench-embedding --model bert-tiny --requests 32 --tiles 2 --rounds 2
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "bench_common.hpp"
#include "tessera/common/cli.hpp"
#include "tessera/common/cpu_time.hpp"
#include "tessera/common/log.hpp"
#include "tessera/common/units.hpp"
#include "tessera/host/tile_model.hpp"
#include "tessera/models/embedding.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/kernels.hpp"

namespace po = boost::program_options;
using namespace tessera;
using clk = std::chrono::steady_clock;

namespace {

struct pass {
  double seconds = 0, cpu_seconds = 0, load = 0;
  uint64_t out_bytes = 0, compute_ns = 0;
};

// All batches once, replicas pulling from a shared queue as the tile backend does when serving.
result<pass> run_all(host::tile_model& m, const std::vector<pid_t>& pids,
                     const std::vector<models::packed_batch>& batches) {
  pass p{.load = bench::load_1min()};
  const double c0 = self_cpu_seconds() + cpu_seconds_of(pids);
  const auto t0 = clk::now();
  const status failure = bench::run_on_replicas(
      m.compiled().chosen.replicas, batches.size(), [&](int rep, size_t i) { return m.run(rep, batches[i]); },
      [&](int, size_t, const auto& out) {
        p.out_bytes += out.logits.size() * sizeof(float);
        for (const auto& [tile, cs] : out.counters)
          for (const auto& c : cs) p.compute_ns += c.compute_ns;
      });
  p.seconds = std::chrono::duration<double>(clk::now() - t0).count();
  p.cpu_seconds = self_cpu_seconds() + cpu_seconds_of(pids) - c0;
  if (!failure.ok()) return failure;
  return p;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  log::init_from_env();
  std::string model_name = "bert-base", dtype_text = "fp32", memory_text = "2GiB", pooling_text = "mean";
  int tiles = 2, rounds = 3, checked = 2;
  double target = 0.95;
  bench::workload_options w{.requests = 64};
  const int &requests = w.requests, &budget = w.budget, &max_seqs = w.max_seqs;
  po::options_description opts(
      "tessera-bench-embedding: pooling on the head tile vs the classifier path, same tiles and plan\nOptions");
  opts.add_options()("help,h", "show this help")
      ("model", po::value(&model_name)->default_value(model_name), "preset or Hugging Face classifier folder (its encoder weights serve both)")
      ("pooling", po::value(&pooling_text)->default_value(pooling_text), "cls, mean, max, mean_sqrt_len or lasttoken")
      ("dtype", po::value(&dtype_text)->default_value(dtype_text), "fp32 or bf16")
      ("tiles", po::value(&tiles)->default_value(tiles), "tile processes (automatic plan of the classifier, forced on both)");
  w.add_to(opts);
  opts.add_options()
      ("rounds", po::value(&rounds)->default_value(rounds), "passes over the workload per task (ABBA order)")
      ("check-batches", po::value(&checked)->default_value(checked), "batches checked against the single-process forward")
      ("target", po::value(&target)->default_value(target), "embedding req/s over classifier req/s to meet")
      ("tile-memory", po::value(&memory_text)->default_value(memory_text), "memory cap of each tile");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-bench-embedding", argc, argv, opts, vm)) return *done;
  auto fail = [](const std::string& what) { return std::cerr << "tessera-bench-embedding: " << what << "\n", 2; };
  if (!w.valid() || tiles < 1 || rounds < 1 || checked < 0)
    return fail("--requests, --token-budget, --max-seqs, --tiles and --rounds must be positive, --check-batches >= 0 "
                "and --long-share within [0, 1]");
  auto pooling = models::pooling_from_name(pooling_text);
  if (!pooling) return fail("--pooling " + pooling_text + ": use cls, mean, max, mean_sqrt_len or lasttoken");
  auto dt = models::parse_dtype(dtype_text);
  if (!dt) return fail("--dtype " + dtype_text + ": " + dt.error().message());
  auto tile_memory = parse_bytes(memory_text);
  if (!tile_memory) return fail("--tile-memory: " + tile_memory.error().message());
  auto loaded = models::load_model(model_name);
  if (!loaded) return fail(loaded.error().to_string());
  if (loaded->task != models::encoder_task::classifier)
    return fail(model_name + " is a " + std::string(models::task_name(loaded->task)) +
                "; give a classifier: its encoder weights serve both tasks");
  const models::bert_model classifier = std::move(*loaded);
  models::bert_model embedder = classifier;  // the same encoder, no head: a sentence-transformers model
  embedder.task = models::encoder_task::embedding;
  embedder.embedding.pooling = *pooling;
  embedder.config.num_labels = 0;
  embedder.config.id2label.clear();

  const auto batches = w.batches(classifier.config);
  int64_t tokens = 0;
  for (const auto& b : batches) tokens += b.num_tokens();
  const auto load0 = bench::load_avg();
  std::fprintf(stderr, "%s: %d requests, %lld tokens, %zu batches of <= %d tokens; %d cores, load %.2f %.2f %.2f\n",
               model_name.c_str(), requests, (long long)tokens, batches.size(), budget, usable_cores(), load0[0],
               load0[1], load0[2]);

  host::placement_request req;
  req.tiles = tiles;
  req.tile_memory = *tile_memory;
  req.token_budget = budget;
  req.max_sequences = max_seqs;
  req.dtype = *dt;
  auto cls = host::deploy_bert(classifier, req);
  if (!cls.ok()) return fail(cls.error().to_string());
  req.forced = cls->model->compiled().chosen;  // the same plan for both
  auto emb = host::deploy_bert(embedder, req);
  if (!emb.ok()) return fail(emb.error().to_string());
  const auto& plan = cls->model->compiled().chosen;
  const std::string plan_text = std::to_string(plan.replicas) + "," + std::to_string(plan.stages) + "," +
                                std::to_string(plan.width) + "," + std::to_string(plan.micro_batches);
  auto pids_of = [](const host::tile_deployment& d) {
    std::vector<pid_t> v;
    for (const auto& t : d.group->tiles()) v.push_back(t.pid);
    return v;
  };
  const auto cls_pids = pids_of(*cls), emb_pids = pids_of(*emb);

  // Correctness on the first batches (also the warm-up): the single process in the model's dtype.
  models::bert_model cls_ref = classifier, emb_ref = embedder;
  if (auto st = models::set_dtype(cls_ref, *dt); !st.ok()) return fail(st.message());
  if (auto st = models::set_dtype(emb_ref, *dt); !st.ok()) return fail(st.message());
  models::set_num_threads(std::max(1, usable_cores()));
  double cls_diff = 0, emb_diff = 0;
  for (int i = 0; i < std::max(1, std::min<int>(checked, static_cast<int>(batches.size()))); ++i) {
    const auto& batch = batches[static_cast<size_t>(i)];
    std::vector<float> want_cls, want_emb;
    if (i < checked) want_cls = models::reference_forward(cls_ref, batch), want_emb = models::reference_embed(emb_ref, batch);
    for (int r = 0; r < plan.replicas; ++r) {
      auto a = cls->model->run(r, batch);
      if (!a) return fail(a.error().to_string());
      auto b = emb->model->run(r, batch);
      if (!b) return fail(b.error().to_string());
      if (i < checked) {
        cls_diff = std::max(cls_diff, max_diff(a->logits, want_cls));
        emb_diff = std::max(emb_diff, max_diff(b->logits, want_emb));
      }
    }
  }
  models::set_num_threads(1);  // the tiles are other processes: nothing here spins meanwhile

  struct totals {
    double seconds = 0, cpu_seconds = 0, load = 0;
    uint64_t out_bytes = 0, compute_ns = 0;
    std::vector<double> req_per_s;
  } sum[2];
  std::vector<double> round_ratio;
  for (int round = 0; round < rounds; ++round) {
    double rate[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const int which = round % 2 == 0 ? k : 1 - k;  // ABBA: classifier first in even rounds
      auto& d = which == 0 ? *cls : *emb;
      auto p = run_all(*d.model, which == 0 ? cls_pids : emb_pids, batches);
      if (!p) return fail(p.error().to_string());
      auto& s = sum[which];
      s.seconds += p->seconds;
      s.cpu_seconds += p->cpu_seconds;
      s.load += p->load / rounds;
      s.out_bytes += p->out_bytes;
      s.compute_ns += p->compute_ns;
      rate[which] = requests / p->seconds;
      s.req_per_s.push_back(rate[which]);
      std::fprintf(stderr, "round %d %s: %.1f s, %.2f req/s, load %.2f\n", round, which == 0 ? "classifier" : "embedding",
                   p->seconds, rate[which], p->load);
    }
    round_ratio.push_back(rate[1] / rate[0]);
  }
  cls->group->shutdown();
  emb->group->shutdown();
  const auto load1 = bench::load_avg();

  std::sort(round_ratio.begin(), round_ratio.end());
  const size_t half = round_ratio.size() / 2;
  const double median_ratio =
      round_ratio.size() % 2 ? round_ratio[half] : (round_ratio[half - 1] + round_ratio[half]) / 2;
  const double total_reqs = double(requests) * rounds;
  const double ratio = (total_reqs / sum[1].seconds) / (total_reqs / sum[0].seconds);
  const double cpu_ratio = (total_reqs / sum[1].cpu_seconds) / (total_reqs / sum[0].cpu_seconds);
  std::printf("\n%s %s, %d tiles, plan R,S,W,M %s, %d requests x %d rounds (%lld tokens, %zu batches of <= %d tokens), "
              "%d cores\n",
              model_name.c_str(), dtype_text.c_str(), tiles, plan_text.c_str(), requests, rounds, (long long)tokens,
              batches.size(), budget, usable_cores());
  std::printf("load average (1/5/15 min): %.2f/%.2f/%.2f at the start, %.2f/%.2f/%.2f at the end\n\n", load0[0],
              load0[1], load0[2], load1[0], load1[1], load1[2]);
  std::printf("| task | head tile | seconds | req/s | req/CPU-s | vs classifier | per CPU-s vs classifier | "
              "host bytes/req | tile compute ms/req | max abs diff vs single process | mean load |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int w = 0; w < 2; ++w) {
    const auto& s = sum[w];
    std::printf("| %s | %s | %.2f | %.2f | %.2f | %.3fx | %.3fx | %.0f | %.1f | %.1e | %.2f |\n",
                w == 0 ? "classifier" : "embedding",
                w == 0 ? "pooler + classifier" : (std::string(models::pooling_name(*pooling)) + " pool").c_str(),
                s.seconds, total_reqs / s.seconds, total_reqs / s.cpu_seconds, w == 0 ? 1.0 : ratio,
                w == 0 ? 1.0 : cpu_ratio, double(s.out_bytes) / total_reqs, s.compute_ns * 1e-6 / total_reqs,
                w == 0 ? cls_diff : emb_diff, s.load);
  }
  std::printf("\nper-round embedding/classifier req/s: median %.3fx (", median_ratio);
  for (size_t i = 0; i < round_ratio.size(); ++i) std::printf("%s%.3f", i ? ", " : "", round_ratio[i]);
  std::printf("); target >= %.2fx: %s\n", target, median_ratio >= target ? "met" : "missed");
  std::printf("RESULT bench=embedding model=%s dtype=%s pooling=%s tiles=%d plan=%s requests=%d rounds=%d "
              "classifier_req_per_s=%.3f embedding_req_per_s=%.3f ratio=%.3f median_round_ratio=%.3f cpu_ratio=%.3f "
              "classifier_max_diff=%.2e embedding_max_diff=%.2e load1_start=%.2f load1_end=%.2f verdict=%s\n",
              model_name.c_str(), dtype_text.c_str(), pooling_text.c_str(), tiles, plan_text.c_str(), requests, rounds,
              total_reqs / sum[0].seconds, total_reqs / sum[1].seconds, ratio, median_ratio, cpu_ratio, cls_diff,
              emb_diff, load0[0], load1[0], median_ratio >= target ? "met" : "missed");
  return 0;
}
