// tessera-bench-decoder-tiles: decoders (GPT-2, LLaMA) on N real tile processes, against the same
// workload in this process.
//
// For each model, tile count N and plan (--plan auto: compile_decoder's choice for N tiles of
// --tile-memory; tp: tensor-parallel width W = N, plan 1,1,N; N = 0 is the single process,
// decoder_model::step on --threads threads), and for each prompt length P and batch B:
//   prefill: B prompts of P seeded tokens, packed into steps of at most --token-budget tokens
//            (prompts cut into chunks at the budget, as a serving scheduler does);
//   decode:  --decode greedy steps of one token for each of the B sequences.
// With --async-scheduling on, decode step t+1 is sent before step t's ids are back: its ids are
// -(row + 1), taken on the tiles from step t's samples (compile_decoder's feed_tokens), so the
// tiles go from one step to the next without waiting for the host (sched "async" in the table).
// On tiles the greedy token is chosen on the LM-head tile and only ids come back (--sample tile,
// the dec_sample kernel), or the whole logits rows come back and the argmax is taken here
// (--sample host, the step protocol before); token_hash (JSON/CSV) tells the runs chose alike.
// --plan auto ranks plans with the barrier measured on the tiles started for each model and N
// (start_ranked: measure_barrier's empty supersteps, as tessera-host does), the first plan then run
// on those tiles; the value is logged and in the table (ranking barrier us); --barrier-us X ranks
// with X instead, for plans that do not vary with the machine's load.
// With R replicas, sequence i lives on replica i % R and the replicas' steps run at once (one
// thread each). Per row it prints prefill and decode tokens/s, of wall time and of CPU time (this
// process and its tiles: on a shared machine, what dedicated cores would give), and per decode step or
// generated token what the tiles did: supersteps, barriers, bytes exchanged between tiles, and
// the time split from the tiles' counters (compute of the busiest tile; waiting at barriers and
// for slices, averaged over tiles; the host's round trip = step wall - the slowest tile's own
// time), and the modelled time of the same steps on --system (timing's LLM step model, with this
// plan's supersteps per step in place of the preset's per-layer count when the system is an IPU).
//
//   build/bin/tessera-bench-decoder-tiles --model llama-tiny gpt2 --tiles 0 2 4 --plan auto tp
//       --prompt 128 768 --batch 1 8 32 64 --decode 128 --csv /tmp/dt.csv --json /tmp/dt.json
//   build/bin/tessera-bench-decoder-tiles --model llama-tiny --tiles 2 --plan tp --prompt 16 --batch 2 --decode 4
//   build/bin/tessera-bench-decoder-tiles --model llama-tiny --tiles 2 --plan 1,1,2,1 1,1,2,1,2 --sample tile  (LM head split)
//   build/bin/tessera-bench-decoder-tiles --model gpt2 --tiles 0 2 --plan auto tp --collective rs-ag allreduce
//       (lanes reducing by reduce-scatter + all-gather against all-reduce, in one run)
//   build/bin/tessera-bench-decoder-tiles --model llama-tiny gpt2 --tiles 2 --plan auto --prompt 16 --batch 1 8 32
//       --decode 64 --async-scheduling off on
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <time.h>
#include <unistd.h>

#include "bench_common.hpp"
#include "tessera/common/cli.hpp"
#include "tessera/common/cpu_time.hpp"
#include "tessera/common/random.hpp"
#include "tessera/common/units.hpp"
#include "tessera/backends/gpu_llm.hpp"
#include "tessera/host/tile_decoder.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/timing/llm_system.hpp"
#include "tessera/timing/preset.hpp"

namespace po = boost::program_options;
using namespace tessera;
using namespace tessera::host;

namespace {

using tessera::bench::now;

// What one replica's step did, from either engine.
struct step_out {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> samples;  // per logits row: the tile's greedy token (-1: take its logits)
  uint64_t host_bytes = 0;       // logits or samples the host fetched
  int64_t supersteps = 0;
  uint64_t bytes = 0;
  double compute_s = 0;  // busiest tile's compute
  double wait_s = 0;     // sync + exchange, summed over the replica's tiles (averaged by the caller)
  double sync_s = 0;     // sync alone, summed over tiles
  double tile_max_s = 0; // the slowest tile's compute + exchange + sync
  int tiles = 0;
};

// Runs one step of `batch` on `replica`.
using step_fn = std::function<result<step_out>(int replica, const models::step_batch& batch)>;

struct engine {
  std::string plan_text;  // "single" or "R=1 S=1 W=2 M=1"
  int replicas = 1;
  int barriers = 0;   // per replica step (0 in one process)
  int supersteps = 0; // per replica step
  int max_seqs = 0, token_budget = 0, block_tokens = 16;
  bool sample_on_tile = false;  // each logits row carries greedy sample parameters (dec_sample)
  step_fn step;
  // Async scheduling (--async-scheduling on): starts a step and returns at once; decode step n + 1
  // is sent before step n's ids are back and takes them on the tiles (ids -(row + 1)).
  std::function<std::future<result<step_out>>(int replica, const models::step_batch& batch)> submit;
  std::vector<pid_t> tiles;  // their CPU time counts with this process's
  std::string barrier = "-";  // the ranking's barrier: "measured" or "forced" (--barrier-us)
  double barrier_s = 0;
};

// CPU seconds of this process and the engine's tile processes so far (on a shared machine,
// tokens per CPU-second estimate what dedicated cores would give).
double cpu_seconds(const engine& e) {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  double s = double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  static const double tick = double(sysconf(_SC_CLK_TCK));
  for (pid_t pid : e.tiles) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 13 && rest >> field; ++i) {
    }
    double utime = 0, stime = 0;
    rest >> utime >> stime;  // fields 14 and 15
    s += (utime + stime) / tick;
  }
  return s;
}

struct row {
  std::string model, mode, plan, dtype = "fp32", sample = "-", collective = "-", sched = "sync";
  int tiles = 0, prompt = 0, batch = 0, decode = 0;
  double prefill_s = 0, decode_s = 0, prefill_cpu_s = 0, decode_cpu_s = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0, prefill_steps = 0, decode_steps = 0;
  int64_t decode_supersteps = 0, decode_barriers = 0;
  uint64_t decode_bytes = 0, prefill_bytes = 0, decode_host_bytes = 0;
  uint64_t token_hash = 1469598103934665603ull;  // FNV-1a of every token chosen, in order
  void took(int32_t t) { token_hash = (token_hash ^ static_cast<uint32_t>(t)) * 1099511628211ull; }
  double decode_compute_s = 0, decode_wait_s = 0, decode_sync_s = 0, decode_host_s = 0;
  double modelled_prefill_s = 0, modelled_decode_s = 0;
  double load = -1;  // the 1-minute load average when the row ended
  // The barrier cost the plan ranking charged (machine_model::sync_seconds): measured on the tiles
  // started for this model and N, or forced by --barrier-us; "-" in one process.
  std::string barrier = "-";
  double barrier_s = 0;

  double prefill_tps() const { return prefill_tokens / std::max(prefill_s, 1e-12); }
  double decode_tps() const { return decode_tokens / std::max(decode_s, 1e-12); }
  double prefill_cpu_tps() const { return prefill_tokens / std::max(prefill_cpu_s, 1e-12); }
  double decode_cpu_tps() const { return decode_tokens / std::max(decode_cpu_s, 1e-12); }
  double per_step(double v) const { return v / std::max<int64_t>(1, decode_steps); }
  double per_token(double v) const { return v / std::max<int64_t>(1, decode_tokens); }
};

// One round: each replica's batch stepped at once. The combined wall time and outputs.
struct round_out {
  std::vector<step_out> outs;
  double wall = 0;
};
result<round_out> run_round(const engine& e, const std::vector<models::step_batch>& batches) {
  round_out r;
  r.outs.resize(batches.size());
  std::vector<std::future<result<step_out>>> fs(batches.size());
  const double t0 = now();
  for (size_t k = 0; k < batches.size(); ++k)
    if (!batches[k].seqs.empty())
      fs[k] = std::async(batches.size() > 1 ? std::launch::async : std::launch::deferred,
                         [&, k] { return e.step(static_cast<int>(k), batches[k]); });
  for (size_t k = 0; k < batches.size(); ++k) {
    if (batches[k].seqs.empty()) continue;
    auto o = fs[k].get();
    if (!o) return o.error().with_context("replica " + std::to_string(k));
    r.outs[k] = std::move(*o);
  }
  r.wall = now() - t0;
  return r;
}

int32_t argmax(const std::vector<float>& l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

// The step model's time of one round (all replicas' sequences as one step of the modelled chip).
struct modeller {
  timing::llm_system sys;
  timing::decoder_dims dims;
  double seconds(const std::vector<models::step_batch>& batches) const {
    models::step_batch all;
    for (const auto& b : batches) all.seqs.insert(all.seqs.end(), b.seqs.begin(), b.seqs.end());
    auto t = timing::model_llm_step(sys, dims, backends::step_shape(all));
    return t ? t->seconds : 0;
  }
};

result<modeller> make_modeller(const std::string& spec, const models::model_shape& shape, int supersteps_per_step) {
  auto dims = timing::decoder_dims_of(shape);
  if (!dims) return dims.error();
  auto sys = timing::make_llm_system(spec, *dims);
  if (!sys) return sys.error().with_context("--system " + spec);
  if (sys->kind == "ipu" && supersteps_per_step > 0) {
    // The preset counts one superstep per kernel of a layer; this plan's programs take
    // supersteps_per_step per step, two of which are the embedding and the LM head.
    auto ipu = timing::load_ipu_preset(sys->preset);
    if (!ipu) return ipu.error();
    const double one = (double(ipu->global_sync_cycles) + ipu->calibration.compute_set_overhead_cycles) / ipu->clock_hz;
    sys->per_layer_overhead_s = std::max(0, supersteps_per_step - 2) * one / double(dims->layers);
  }
  return modeller{std::move(*sys), std::move(*dims)};
}

// Row i's greedy token: the tile's, or the argmax of its logits.
int32_t token_of(const step_out& o, size_t i) {
  if (i < o.samples.size() && o.samples[i] >= 0) return o.samples[i];
  return argmax(o.logits[i]);
}
size_t rows_of(const step_out& o) { return std::max(o.logits.size(), o.samples.size()); }

// B sequences of P prompt tokens then `decode` tokens each, on engine e.
result<row> run_row(const engine& e, const models::model_shape& shape, const modeller& m, int P, int B, int decode) {
  const int R = e.replicas;
  const int per_seq = (P + decode + e.block_tokens - 1) / e.block_tokens;
  splitmix64 rng(1000 + static_cast<uint64_t>(P) * 131 + static_cast<uint64_t>(B));
  struct seq {
    int replica = 0;
    std::vector<int32_t> prompt, blocks;
    int computed = 0;
    int32_t next = 0;
  };
  std::vector<seq> seqs(static_cast<size_t>(B));
  std::vector<int> on_replica(static_cast<size_t>(R), 0);
  for (int i = 0; i < B; ++i) {
    auto& s = seqs[static_cast<size_t>(i)];
    s.replica = i % R;
    const int k = on_replica[static_cast<size_t>(s.replica)]++;
    for (int t = 0; t < P; ++t) s.prompt.push_back(static_cast<int32_t>(rng.uniform(0, shape.vocab_size - 1)));
    for (int b = 0; b < per_seq; ++b) s.blocks.push_back(k * per_seq + b);
  }
  row r;
  r.prompt = P;
  r.batch = B;
  r.decode = decode;
  // Prefill: each round packs, per replica, prompt chunks up to the token budget and sequence limit.
  const double cpu0 = cpu_seconds(e);
  for (;;) {
    std::vector<models::step_batch> batches(static_cast<size_t>(R));
    std::vector<std::vector<seq*>> ends(static_cast<size_t>(R));  // sequences whose prompt this round ends
    bool any = false;
    for (auto& s : seqs) {
      auto& b = batches[static_cast<size_t>(s.replica)];
      const int left = P - s.computed;
      const int64_t room = e.token_budget - b.num_tokens();
      if (left == 0 || room <= 0 || static_cast<int>(b.seqs.size()) >= e.max_seqs) continue;
      models::seq_step st;
      st.seq_id = static_cast<uint64_t>(&s - seqs.data());
      st.start_pos = s.computed;
      const int n = static_cast<int>(std::min<int64_t>(left, room));
      st.tokens.assign(s.prompt.begin() + s.computed, s.prompt.begin() + s.computed + n);
      st.want_logits = s.computed + n == P;
      if (st.want_logits && e.sample_on_tile) st.sample = models::sample_params{.temperature = 0};
      st.block_table = s.blocks;
      s.computed += n;
      if (st.want_logits) ends[static_cast<size_t>(s.replica)].push_back(&s);
      b.seqs.push_back(std::move(st));
      any = true;
    }
    if (!any) break;
    auto out = run_round(e, batches);
    if (!out) return out.error().with_context("prefill");
    r.prefill_s += out->wall;
    r.modelled_prefill_s += m.seconds(batches);
    ++r.prefill_steps;
    for (size_t k = 0; k < batches.size(); ++k) {
      r.prefill_tokens += batches[k].num_tokens();
      r.prefill_bytes += out->outs[k].bytes;
      if (rows_of(out->outs[k]) != ends[k].size())
        return status::internal("prefill: " + std::to_string(rows_of(out->outs[k])) + " logit rows for " +
                                std::to_string(ends[k].size()) + " finished prompts");
      for (size_t i = 0; i < ends[k].size(); ++i) r.took(ends[k][i]->next = token_of(out->outs[k], i));
    }
  }
  // Decode: every sequence one token a step, greedy.
  const double cpu1 = cpu_seconds(e);
  r.prefill_cpu_s = cpu1 - cpu0;
  if (e.submit) {
    // Async: step n + 1 goes out before step n's answer is read; its ids are step n's samples,
    // taken on the tiles (sequence i is row i of every step of its replica).
    std::vector<std::vector<seq*>> members(static_cast<size_t>(R));
    for (auto& s : seqs) members[static_cast<size_t>(s.replica)].push_back(&s);
    auto batch_of = [&](int k, int n) {
      models::step_batch b;
      const auto& mine = members[static_cast<size_t>(k)];
      for (size_t i = 0; i < mine.size(); ++i) {
        models::seq_step st;
        st.seq_id = static_cast<uint64_t>(mine[i] - seqs.data());
        st.start_pos = mine[i]->computed + n;
        st.tokens = {n == 0 ? mine[i]->next : -static_cast<int32_t>(i + 1)};
        st.sample = models::sample_params{.temperature = 0};
        st.block_table = mine[i]->blocks;
        b.seqs.push_back(std::move(st));
      }
      return b;
    };
    std::vector<std::deque<std::future<result<step_out>>>> flying(static_cast<size_t>(R));
    double tiles_busy = 0;
    const double t0 = now();
    for (int n = 0; n <= decode; ++n) {
      if (n < decode) {
        std::vector<models::step_batch> batches(static_cast<size_t>(R));
        for (int k = 0; k < R; ++k) {
          if (members[static_cast<size_t>(k)].empty()) continue;
          batches[static_cast<size_t>(k)] = batch_of(k, n);
          flying[static_cast<size_t>(k)].push_back(e.submit(k, batches[static_cast<size_t>(k)]));
        }
        r.modelled_decode_s += m.seconds(batches);
      }
      if (n == 0) continue;
      double busiest = 0, wait = 0, sync = 0, compute = 0;
      int tiles = 0;
      for (int k = 0; k < R; ++k) {
        auto& q = flying[static_cast<size_t>(k)];
        if (q.empty()) continue;
        auto o = q.front().get();
        q.pop_front();
        if (!o) return o.error().with_context("decode step " + std::to_string(n - 1) + ", replica " + std::to_string(k));
        const auto& mine = members[static_cast<size_t>(k)];
        r.decode_tokens += static_cast<int64_t>(mine.size());
        r.decode_supersteps += o->supersteps;
        r.decode_barriers += e.barriers;
        r.decode_bytes += o->bytes;
        r.decode_host_bytes += o->host_bytes;
        busiest = std::max(busiest, o->tile_max_s);
        compute = std::max(compute, o->compute_s);
        wait += o->wait_s;
        sync += o->sync_s;
        tiles += o->tiles;
        if (rows_of(*o) != mine.size())
          return status::internal("decode: " + std::to_string(rows_of(*o)) + " rows for " + std::to_string(mine.size()) + " sequences");
        for (size_t i = 0; i < mine.size(); ++i) r.took(mine[i]->next = token_of(*o, i));
      }
      ++r.decode_steps;
      tiles_busy += busiest;
      r.decode_compute_s += compute;
      r.decode_wait_s += tiles > 0 ? wait / tiles : 0;
      r.decode_sync_s += tiles > 0 ? sync / tiles : 0;
    }
    r.decode_s = now() - t0;
    for (auto& s : seqs) s.computed += decode;
    // The steps overlap: the host's share is what the wall time has beyond the tiles' own time.
    r.decode_host_s = std::max(0.0, r.decode_s - tiles_busy);
    r.decode_cpu_s = cpu_seconds(e) - cpu1;
    return r;
  }
  for (int n = 0; n < decode; ++n) {
    std::vector<models::step_batch> batches(static_cast<size_t>(R));
    std::vector<std::vector<seq*>> members(static_cast<size_t>(R));
    for (auto& s : seqs) {
      models::seq_step st;
      st.seq_id = static_cast<uint64_t>(&s - seqs.data());
      st.start_pos = s.computed;
      st.tokens = {s.next};
      if (e.sample_on_tile) st.sample = models::sample_params{.temperature = 0};
      st.block_table = s.blocks;
      batches[static_cast<size_t>(s.replica)].seqs.push_back(std::move(st));
      members[static_cast<size_t>(s.replica)].push_back(&s);
    }
    auto out = run_round(e, batches);
    if (!out) return out.error().with_context("decode step " + std::to_string(n));
    r.decode_s += out->wall;
    r.modelled_decode_s += m.seconds(batches);
    ++r.decode_steps;
    double busiest = 0, wait = 0, sync = 0, compute = 0;
    int tiles = 0;
    for (size_t k = 0; k < batches.size(); ++k) {
      if (batches[k].seqs.empty()) continue;
      const auto& o = out->outs[k];
      r.decode_tokens += static_cast<int64_t>(batches[k].seqs.size());
      r.decode_supersteps += o.supersteps;
      r.decode_barriers += e.barriers;
      r.decode_bytes += o.bytes;
      r.decode_host_bytes += o.host_bytes;
      busiest = std::max(busiest, o.tile_max_s);
      compute = std::max(compute, o.compute_s);
      wait += o.wait_s;
      sync += o.sync_s;
      tiles += o.tiles;
      if (rows_of(o) != members[k].size())
        return status::internal("decode: " + std::to_string(rows_of(o)) + " logit rows for " +
                                std::to_string(members[k].size()) + " sequences");
      for (size_t i = 0; i < members[k].size(); ++i) {
        members[k][i]->computed += 1;
        r.took(members[k][i]->next = token_of(o, i));
      }
    }
    r.decode_compute_s += tiles > 0 ? compute : out->wall;
    r.decode_wait_s += tiles > 0 ? wait / tiles : 0;
    r.decode_sync_s += tiles > 0 ? sync / tiles : 0;
    r.decode_host_s += tiles > 0 ? std::max(0.0, out->wall - busiest) : 0;
  }
  r.decode_cpu_s = cpu_seconds(e) - cpu1;
  return r;
}

// The tiles' engine: a tile_decoder's steps and its counters.
step_out out_of(tile_step_result* o);

step_fn tile_steps(tile_decoder& dec) {
  return [&dec](int replica, const models::step_batch& b) -> result<step_out> {
    auto o = dec.step(replica, b);
    if (!o) return o.error();
    return out_of(&*o);
  };
}

// The same, started at once (async scheduling).
std::function<std::future<result<step_out>>(int, const models::step_batch&)> tile_submits(tile_decoder& dec) {
  return [&dec](int replica, const models::step_batch& b) {
    auto promise = std::make_shared<std::promise<result<step_out>>>();
    auto f = promise->get_future();
    dec.submit_step(replica, b, [promise](result<tile_step_result> o) {
      if (!o) return promise->set_value(o.error());
      promise->set_value(out_of(&*o));
    });
    return f;
  };
}

step_out out_of(tile_step_result* o) {
    step_out s;
    s.logits = std::move(o->logits);
    for (const auto& t : o->samples) s.samples.push_back(t.token);
    s.host_bytes = o->output_bytes;
    s.supersteps = o->supersteps;
    s.bytes = o->bytes_exchanged;
    for (const auto& [t, cs] : o->counters) {
      uint64_t compute = 0, exch = 0, sync = 0;
      for (const auto& c : cs) compute += c.compute_ns, exch += c.exchange_ns, sync += c.sync_ns;
      s.compute_s = std::max(s.compute_s, compute * 1e-9);
      s.tile_max_s = std::max(s.tile_max_s, (compute + exch + sync) * 1e-9);
      s.wait_s += (exch + sync) * 1e-9;
      s.sync_s += sync * 1e-9;
      ++s.tiles;
    }
    return s;
}

struct options {
  std::vector<std::string> models{"llama-tiny", "gpt2"};
  std::vector<int> tiles{2, 4};
  std::vector<std::string> plans{"auto", "tp"};
  std::vector<int> prompts{128, 768}, batches{1, 8, 32, 64};
  std::vector<std::string> samples{"tile"};
  std::vector<std::string> collectives{"auto"};
  std::vector<std::string> async{"off"};
  int decode = 128, token_budget = 2048, threads = 1;
  std::string tile_memory = "4GiB", system = "ipu-mk2:chips=1", csv, json, dtype = "fp32";
  std::optional<double> barrier_us;  // --barrier-us: rank with this barrier instead of the measured one
};

void print_table(const std::vector<row>& rows, const std::string& system) {
  std::printf(
      "\n| model | dtype | N | plan | sample | sched | prompt | B | prefill tok/s | decode tok/s | prefill tok/CPU-s | decode tok/CPU-s | decode ms/step | supersteps/token | "
      "barriers/step | KiB exchanged/token | compute ms/step | barrier+exchange wait ms/step | barrier wait ms/step | "
      "host round trip ms/step | KiB to host/step | modelled us/token (%s) | modelled prefill tok/s | ranking barrier us | load |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      system.c_str());
  for (const auto& r : rows) {
    char barrier[48] = "-";
    if (r.barrier != "-") std::snprintf(barrier, sizeof barrier, "%.1f %s", r.barrier_s * 1e6, r.barrier.c_str());
    std::printf("| %s | %s | %d | %s %s | %s | %s | %d | %d | %.0f | %.1f | %.0f | %.1f | %.2f | %.2f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.2f | %.0f | %s | %.1f |\n",
                r.model.c_str(), r.dtype.c_str(), r.tiles, r.mode.c_str(), r.plan.c_str(), r.sample.c_str(), r.sched.c_str(), r.prompt, r.batch, r.prefill_tps(),
                r.decode_tps(), r.prefill_cpu_tps(), r.decode_cpu_tps(), r.per_step(r.decode_s) * 1e3, r.per_token(double(r.decode_supersteps)),
                r.per_step(double(r.decode_barriers)), r.per_token(double(r.decode_bytes)) / 1024.0,
                r.per_step(r.decode_compute_s) * 1e3, r.per_step(r.decode_wait_s) * 1e3,
                r.per_step(r.decode_sync_s) * 1e3, r.per_step(r.decode_host_s) * 1e3, r.per_step(double(r.decode_host_bytes)) / 1024.0,
                r.per_token(r.modelled_decode_s) * 1e6, r.prefill_tokens / std::max(r.modelled_prefill_s, 1e-12), barrier, r.load);
  }
  std::fflush(stdout);
}

nlohmann::ordered_json to_json(const row& r) {
  return {{"model", r.model},
          {"dtype", r.dtype},
          {"tiles", r.tiles},
          {"mode", r.mode},
          {"plan", r.plan},
          {"sample", r.sample},
          {"collective", r.collective},
          {"sched", r.sched},
          {"token_hash", std::to_string(r.token_hash)},
          {"prompt", r.prompt},
          {"batch", r.batch},
          {"decode", r.decode},
          {"prefill_tokens", r.prefill_tokens},
          {"prefill_seconds", r.prefill_s},
          {"prefill_steps", r.prefill_steps},
          {"prefill_tokens_per_s", r.prefill_tps()},
          {"prefill_cpu_seconds", r.prefill_cpu_s},
          {"prefill_tokens_per_cpu_s", r.prefill_cpu_tps()},
          {"prefill_bytes_exchanged", r.prefill_bytes},
          {"decode_tokens", r.decode_tokens},
          {"decode_seconds", r.decode_s},
          {"decode_steps", r.decode_steps},
          {"decode_tokens_per_s", r.decode_tps()},
          {"decode_cpu_seconds", r.decode_cpu_s},
          {"decode_tokens_per_cpu_s", r.decode_cpu_tps()},
          {"decode_ms_per_step", r.per_step(r.decode_s) * 1e3},
          {"supersteps_per_token", r.per_token(double(r.decode_supersteps))},
          {"barriers_per_step", r.per_step(double(r.decode_barriers))},
          {"bytes_exchanged_per_token", r.per_token(double(r.decode_bytes))},
          {"compute_ms_per_step", r.per_step(r.decode_compute_s) * 1e3},
          {"wait_ms_per_step", r.per_step(r.decode_wait_s) * 1e3},
          {"barrier_wait_ms_per_step", r.per_step(r.decode_sync_s) * 1e3},
          {"host_round_trip_ms_per_step", r.per_step(r.decode_host_s) * 1e3},
          {"host_bytes_per_step", r.per_step(double(r.decode_host_bytes))},
          {"modelled_us_per_token", r.per_token(r.modelled_decode_s) * 1e6},
          {"modelled_prefill_tokens_per_s", r.prefill_tokens / std::max(r.modelled_prefill_s, 1e-12)},
          {"ranking_barrier", r.barrier},
          {"ranking_barrier_seconds", r.barrier_s},
          {"load_1min", r.load}};
}

status write_outputs(const std::vector<row>& rows, const options& o) {
  if (!o.json.empty()) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const auto& r : rows) j.push_back(to_json(r));
    std::ofstream f(o.json);
    f << j.dump(1) << "\n";
    if (!f) return status::io_error("cannot write " + o.json);
  }
  if (!o.csv.empty()) {
    std::ofstream f(o.csv);
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto j = to_json(rows[i]);
      if (i == 0)
        for (auto it = j.begin(); it != j.end(); ++it) f << (it == j.begin() ? "" : ",") << it.key();
      if (i == 0) f << "\n";
      for (auto it = j.begin(); it != j.end(); ++it)
        f << (it == j.begin() ? "" : ",") << (it->is_string() ? it->get<std::string>() : it->dump());
      f << "\n";
    }
    if (!f) return status::io_error("cannot write " + o.csv);
  }
  return ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  po::options_description opts("tessera-bench-decoder-tiles: decoders on tile processes and in one process");
  opts.add_options()("help,h", "show this help")
      ("model", po::value(&o.models)->multitoken(), "decoder presets (default llama-tiny gpt2)")
      ("tiles", po::value(&o.tiles)->multitoken(), "tile counts; 0 = the single process (default 2 4)")
      ("plan", po::value(&o.plans)->multitoken(),
       "auto (compile_decoder's choice), tp (width W = N) and/or R,S,W[,M[,V]] (a forced plan, its tiles N; V: LM-head "
       "vocabulary slices) (default auto tp)")
      ("prompt", po::value(&o.prompts)->multitoken(), "prompt lengths (default 128 768)")
      ("batch", po::value(&o.batches)->multitoken(), "sequences per batch (default 1 8 32 64)")
      ("decode", po::value(&o.decode)->default_value(o.decode), "tokens generated per sequence")
      ("token-budget", po::value(&o.token_budget)->default_value(o.token_budget), "tokens per step (prefill chunks)")
      ("tile-memory", po::value(&o.tile_memory)->default_value(o.tile_memory), "memory of each tile (the automatic plan's bound)")
      ("threads", po::value(&o.threads)->default_value(o.threads), "threads of the single process (tiles have 1 each)")
      ("system", po::value(&o.system)->default_value(o.system), "the modelled system (timing/llm_system.hpp spec)")
      ("sample", po::value(&o.samples)->multitoken(), "on tiles: tile (greedy tokens chosen on the LM-head tile, "
       "ids sent back) and/or host (whole logits rows sent back, argmax here) (default tile)")
      ("async-scheduling", po::value(&o.async)->multitoken(), "on tiles: off (each step sent when the last one's ids are "
       "back) and/or on (decode step t+1 sent while step t runs, its ids taken from step t's samples on the tiles; needs "
       "--sample tile) (default off)")
      ("collective", po::value(&o.collectives)->multitoken(), "on tiles, how lanes (W > 1) reduce: auto (the plan "
       "ranking's choice), allreduce (one superstep a sub-layer) and/or rs-ag (reduce-scatter + all-gather: two), each "
       "a run of every plan (default auto)")
      ("dtype", po::value(&o.dtype)->default_value(o.dtype), "fp32 or bf16: the decoder's matrices and KV cache, in "
       "the single process and on the tiles alike")
      ("barrier-us", po::value<double>(), "rank the plans with this barrier cost a superstep, in microseconds (> 0), "
       "for reproducible plans; default: measured on the tiles started for each model and tile count (measure_barrier)")
      ("csv", po::value(&o.csv), "also write the rows as CSV")
      ("json", po::value(&o.json), "also write the rows as JSON");
  po::variables_map vm;
  if (auto done = parse_command_line("tessera-bench-decoder-tiles", argc, argv, opts, vm)) return *done;
  auto bad = [](const std::string& what) {
    std::cerr << "tessera-bench-decoder-tiles: " << what << "; see tessera-bench-decoder-tiles --help\n";
    return 2;
  };
  for (const auto& p : o.plans)
    if (p != "auto" && p != "tp")
      if (auto parsed = parse_plan(p); !parsed) return bad("--plan " + p + ": use auto, tp or " + parsed.error().message());
  for (int n : o.tiles)
    if (n < 0 || n > 64) return bad("--tiles " + std::to_string(n) + ": use 0 (one process) to 64");
  for (int b : o.batches)
    if (b < 1) return bad("--batch must be positive");
  for (int p : o.prompts)
    if (p < 1) return bad("--prompt must be positive");
  if (o.decode < 1) return bad("--decode must be positive");
  for (const auto& s : o.samples)
    if (s != "tile" && s != "host") return bad("--sample " + s + ": use tile or host");
  for (const auto& a : o.async)
    if (a != "on" && a != "off") return bad("--async-scheduling " + a + ": use on or off");
  if (std::count(o.async.begin(), o.async.end(), "on") && !std::count(o.samples.begin(), o.samples.end(), "tile"))
    return bad("--async-scheduling on takes its ids from the tiles' samples: it needs --sample tile");
  std::vector<collective> reduces;
  for (const auto& c : o.collectives) {
    auto parsed = parse_collective(c);
    if (!parsed) return bad(parsed.error().message());
    reduces.push_back(*parsed);
  }
  if (o.token_budget < 1) return bad("--token-budget must be positive");
  if (vm.count("barrier-us")) {
    const double us = vm["barrier-us"].as<double>();
    if (!(us > 0) || !std::isfinite(us) || us > 1e7)
      return bad("--barrier-us " + std::to_string(us) + ": use a barrier cost above 0 and at most 1e7 microseconds");
    o.barrier_us = us;
  }
  if (o.threads < 1) return bad("--threads must be positive");
  auto dtype = models::parse_dtype(o.dtype);
  if (!dtype) return bad("--dtype: " + dtype.error().message());
  auto memory = parse_bytes(o.tile_memory);
  if (!memory) return bad("--tile-memory: " + memory.error().message());
  const int max_b = *std::max_element(o.batches.begin(), o.batches.end());
  const int max_p = *std::max_element(o.prompts.begin(), o.prompts.end());
  auto fail = [](const status& st) {
    std::cerr << "tessera-bench-decoder-tiles: " << st.to_string() << "\n";
    return st.code() == errc::invalid_argument || st.code() == errc::not_found || st.code() == errc::out_of_memory ? 2 : 1;
  };

  std::vector<row> rows;
  auto measure = [&](const engine& e, const std::string& name, const models::model_shape& shape, int n,
                     const std::string& mode, const std::string& sample, const std::string& reduce,
                     const std::string& sched = "sync") -> status {
    auto m = make_modeller(o.system, shape, e.supersteps);
    if (!m) return m.error();
    for (int P : o.prompts)
      for (int B : o.batches) {
        if (P + o.decode > shape.max_position_embeddings)
          return status::invalid("--prompt " + std::to_string(P) + " + --decode " + std::to_string(o.decode) +
                                 " is beyond " + name + "'s " + std::to_string(shape.max_position_embeddings) + " positions");
        auto r = run_row(e, shape, *m, P, B, o.decode);
        if (!r) return r.error().with_context(name + " on " + (n ? std::to_string(n) + " tiles" : "one process") +
                                             ", prompt " + std::to_string(P) + ", batch " + std::to_string(B));
        r->model = name;
        r->dtype = o.dtype;
        r->tiles = n;
        r->mode = mode;
        r->plan = e.plan_text;
        r->sample = sample;
        r->collective = reduce;
        r->sched = sched;
        r->barrier = e.barrier;
        r->barrier_s = e.barrier_s;
        r->load = bench::load_1min();
        std::fprintf(stderr, "%s N=%d %s %s %s P=%d B=%d: prefill %.0f tok/s, decode %.1f tok/s (%.1f a CPU-second), load %.1f\n",
                     name.c_str(), n, e.plan_text.c_str(), sample.c_str(), sched.c_str(), P, B, r->prefill_tps(), r->decode_tps(),
                     r->decode_cpu_tps(), r->load);
        rows.push_back(std::move(*r));
      }
    return ok_status();
  };

  for (const auto& name : o.models) {
    auto loaded = models::load_decoder(name);
    if (!loaded) return fail(loaded.error());
    if (auto st = loaded->set_dtype(*dtype); !st.ok()) return fail(st);
    auto model = std::make_shared<const models::decoder_model>(std::move(*loaded));
    const models::model_shape& shape = model->shape();
    const int per_seq_blocks = (max_p + o.decode + 15) / 16;
    for (int n : o.tiles) {
      if (n == 0) {  // the single process: decoder_model::step over one paged cache
        models::set_num_threads(o.threads);
        auto cache = models::paged_kv_cache::make(shape, {16, max_b * per_seq_blocks, *dtype});
        if (!cache) return fail(cache.error());
        engine e;
        e.plan_text = "1 process x" + std::to_string(o.threads) + " threads";
        e.max_seqs = max_b;
        e.token_budget = o.token_budget;
        e.step = [&](int, const models::step_batch& b) -> result<step_out> {
          step_out s;
          if (auto st = model->step(b, *cache, s.logits); !st.ok()) return st;
          return s;
        };
        if (auto st = measure(e, name, shape, 0, "-", "-", "-"); !st.ok()) return fail(st);
        continue;
      }
      std::set<std::string> done_plans;
      // The ranking's barrier for this model and N: measured on the first group started for it
      // (start_ranked, as tessera-host does), which the first plan then runs on; every later plan
      // of this N is ranked with the same value. --barrier-us forces it.
      std::optional<ranking_barrier> barrier;
      std::unique_ptr<tile_group> started;
      tile_group_config g;
      g.tiles = static_cast<uint32_t>(n);
      g.tile_memory = *memory;
      g.run_timeout = std::chrono::minutes(10);
      auto compile = [&shape](const placement_request& r) { return compile_decoder(shape, r); };
      std::vector<std::pair<std::string, collective>> runs;  // every plan under every --collective
      for (const auto& mode : o.plans)
        for (const collective reduce : reduces) runs.emplace_back(mode, reduce);
      for (const auto& [mode, reduce] : runs) {
        const std::string reduce_name = collective_name(reduce);
        placement_request req;
        req.reduce = reduce;
        req.tiles = n;
        req.tile_memory = *memory;
        req.token_budget = o.token_budget;
        req.max_sequences = max_b;
        req.dtype = *dtype;
        if (mode == "tp") req.forced = plan{1, 1, n, 1};
        if (mode != "tp" && mode != "auto") {
          req.forced = *parse_plan(mode);
          if (req.forced->tiles() != n) continue;  // a forced plan runs on its own tile count only
        }
        // The plan first (KV as many blocks as fit), then the plan again with the KV the rows need.
        if (o.barrier_us) req.machine.sync_seconds = *o.barrier_us * 1e-6;
        if (barrier) req.machine.sync_seconds = barrier->seconds;
        const std::string what = name + " on " + std::to_string(n) + " tiles, --plan " + mode + " --collective " + reduce_name;
        result<compiled_model> c = status::internal("not compiled");
        if (!barrier) {
          auto s = start_ranked(req, g, compile, !o.barrier_us);
          if (!s) return fail(s.error().with_context(what));
          barrier = s->barrier;
          started = std::move(s->group);
          c = std::move(s->compiled);
          req.machine.sync_seconds = barrier->seconds;
          std::fprintf(stderr, "%s on %d tiles: plans ranked with %s%s\n", name.c_str(), n, barrier->describe().c_str(),
                       o.barrier_us ? ", forced by --barrier-us" : "");
        } else {
          c = compile(req);
        }
        if (!c) return fail(c.error().with_context(what));
        const plan chosen = c->chosen;
        std::fprintf(stderr, "%s: chose %s\n", what.c_str(), chosen.to_string().c_str());
        if (!done_plans.insert(chosen.to_string()).second) {
          std::fprintf(stderr, "%s on %d tiles: --plan %s chose %s, measured already\n", name.c_str(), n, mode.c_str(),
                       chosen.to_string().c_str());
          for (size_t i = 0, end = rows.size(); i < end; ++i)
            if (rows[i].model == name && rows[i].tiles == n && rows[i].plan == chosen.to_string()) {
              row copy = rows[i];
              copy.mode = mode;
              copy.collective = reduce_name;
              rows.push_back(copy);
            }
          continue;
        }
        const int per_replica = (max_b + chosen.replicas - 1) / chosen.replicas;
        req.forced = chosen;
        req.reduce = chosen.width > 1 ? chosen.reduce : collective::rs_ag;  // as chosen, not ranked again
        req.max_sequences = per_replica;
        req.kv_blocks = per_replica * per_seq_blocks;
        for (const auto& async : o.async) {
          req.feed_tokens = async == "on";  // the program that forwards the samples to the first stage
          c = compile_decoder(shape, req);
          if (!c) return fail(c.error().with_context(name + " on " + std::to_string(n) + " tiles, plan " + chosen.to_string()));
          // The group the barrier was measured on runs the first plan; later ones start their own.
          auto group = started ? result<std::unique_ptr<tile_group>>(std::move(started)) : tile_group::start(g);
          if (!group) return fail(group.error());
          auto dec = tile_decoder::deploy(**group, std::move(*c), model);
          if (!dec) return fail(dec.error());
          const auto& cm = (*dec)->compiled();
          engine e;
          e.plan_text = chosen.to_string();
          e.replicas = chosen.replicas;
          e.barriers = cm.barriers();
          e.supersteps = cm.supersteps();
          e.max_seqs = cm.max_sequences;
          e.token_budget = cm.token_budget;
          e.block_tokens = cm.kv.block_tokens;
          e.barrier = o.barrier_us ? "forced" : "measured";
          e.barrier_s = barrier->seconds;
          e.step = tile_steps(**dec);
          if (req.feed_tokens) e.submit = tile_submits(**dec);
          for (const auto& t : (*group)->tiles()) e.tiles.push_back(t.pid);
          std::fprintf(stderr, "%s on %d tiles, --plan %s: %s, %d supersteps (%d barriers) a step, %d KV blocks a replica, %s\n",
                       name.c_str(), n, mode.c_str(), e.plan_text.c_str(), e.supersteps, e.barriers, cm.kv.num_blocks,
                       req.feed_tokens ? "async scheduling" : "sync");
          status st = ok_status();
          for (const auto& smp : o.samples) {
            if (req.feed_tokens && smp != "tile") continue;
            e.sample_on_tile = smp == "tile";
            st = measure(e, name, shape, n, mode, smp, reduce_name, req.feed_tokens ? "async" : "sync");
            if (!st.ok()) break;
          }
          (*group)->shutdown();
          if (!st.ok()) return fail(st);
        }
      }
    }
  }
  print_table(rows, o.system);
  if (auto st = write_outputs(rows, o); !st.ok()) return fail(st);
  return 0;
}
