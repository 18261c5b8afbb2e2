// Profiler: Chrome trace JSON (wall and modelled tile timelines, backend batches), memory report,
// slowest supersteps and load imbalance. See profiler.hpp for the track layout.
#include "tessera/host/profiler.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tessera/common/check.hpp"
#include "tessera/common/units.hpp"

namespace tessera::host {

using nlohmann::json;

namespace {

constexpr int wall_pid = 1, modelled_pid = 2, backend_pid = 3;

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

json meta(const char* what, int pid, int tid, const std::string& name) {
  json e = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

json slice(const std::string& name, const char* cat, int pid, int tid, double ts_us, double dur_us, json args = json::object()) {
  return {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", ts_us}, {"dur", dur_us}, {"args", std::move(args)}};
}

std::string mib(uint64_t b) { return format_bytes(b); }

}  // namespace

result<std::unique_ptr<profiler>> profiler::create(const compiled_model& c, profiler_options o) {
  auto p = timing::load_ipu_preset(o.preset);
  if (!p) return p.error();
  if (c.chosen.tiles() > p->tiles)
    return status::invalid(std::to_string(c.chosen.tiles()) + " emulated tiles are more than the " + std::to_string(p->tiles) +
                           " tiles of " + p->name + "; choose a preset with more tiles or use fewer tiles");
  return std::make_unique<profiler>(c, std::move(*p), std::move(o));
}

profiler::profiler(compiled_model c, timing::ipu_preset preset, profiler_options o)
    : compiled_(std::move(c)), preset_(std::move(preset)), opt_(std::move(o)) {
  if (opt_.timing.emulated_tiles <= 0) opt_.timing.emulated_tiles = compiled_.chosen.tiles();
  auto s = timing::make_tile_share(preset_, opt_.timing.emulated_tiles);
  TESSERA_CHECK(s.has_value()) << s.error().message();
  share_ = *s;
  tensors_ = tensors_of(compiled_);
}

double profiler::now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count(); }

status profiler::record(batch_record b) {
  if (b.replica < 0 || b.replica >= static_cast<int>(compiled_.programs.size()))
    return status::invalid("replica " + std::to_string(b.replica) + " does not exist");
  auto m = time_program(compiled_.programs[static_cast<size_t>(b.replica)], tensors_, b.seq_lengths, preset_, opt_.timing);
  if (!m) return m.error();
  std::lock_guard lock(mu_);
  entry e{std::move(b), std::move(*m), 0};
  double& end = modelled_end_us_[e.rec.replica];
  e.modelled_start_us = std::max(end, e.rec.start_seconds * 1e6);
  end = e.modelled_start_us + e.model.total_seconds * 1e6;
  entries_.push_back(std::move(e));
  return ok_status();
}

status profiler::record(int replica, const models::packed_batch& batch, const tile_batch_result& r, double start_seconds,
                        const std::string& backend) {
  batch_record b;
  b.backend = backend;
  b.replica = replica;
  {
    std::lock_guard lock(mu_);
    b.batch_id = entries_.size();
  }
  for (int i = 0; i < batch.num_seqs(); ++i) b.seq_lengths.push_back(batch.seq_len(i));
  b.start_seconds = start_seconds;
  b.wall_seconds = r.wall_seconds;
  b.counters = r.counters;
  b.memory_high_water = r.memory_high_water;
  return record(std::move(b));
}

status profiler::record(int replica, const std::vector<int32_t>& seq_lengths, const run_result& r, double start_seconds,
                        const std::string& backend) {
  batch_record b{backend, replica, r.batch_id, seq_lengths, start_seconds, r.wall_seconds, r.counters, r.memory_high_water};
  return record(std::move(b));
}

size_t profiler::batches() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

program_timing profiler::modelled(size_t i) const {
  std::lock_guard lock(mu_);
  return entries_.at(i).model;
}

std::vector<std::string> profiler::kernels_of(int replica, uint32_t tile, size_t step) const {
  std::vector<std::string> k;
  const auto& progs = compiled_.programs[static_cast<size_t>(replica)];
  auto it = progs.find(tile);
  if (it == progs.end() || step >= it->second.steps.size()) return k;
  for (const auto& c : it->second.steps[step].compute) k.emplace_back(models::kernel_name(c.kernel));
  return k;
}

json profiler::trace() const {
  std::lock_guard lock(mu_);
  json events = json::array();
  events.push_back(meta("process_name", wall_pid, -1, "tiles (wall clock)"));
  events.push_back(meta("process_name", modelled_pid, -1, "tiles (modelled " + preset_.name + ")"));
  events.push_back(meta("process_name", backend_pid, -1, "backends"));
  for (int pid : {wall_pid, modelled_pid, backend_pid}) {
    json e = {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"args", {{"sort_index", pid}}}};
    events.push_back(e);
  }
  for (const auto& t : compiled_.tiles) {
    char name[96];
    std::snprintf(name, sizeof name, "tile %u (replica %d stage %d lane %d)", t.tile, t.replica, t.stage, t.lane);
    events.push_back(meta("thread_name", wall_pid, static_cast<int>(t.tile), name));
    events.push_back(meta("thread_name", modelled_pid, static_cast<int>(t.tile), name));
  }
  // Backend tracks: (backend, replica) -> tid; even tids wall, odd modelled.
  std::map<std::pair<std::string, int>, int> backend_tid;
  for (const auto& e : entries_) {
    auto key = std::make_pair(e.rec.backend, e.rec.replica);
    if (backend_tid.count(key)) continue;
    const int tid = 2 * static_cast<int>(backend_tid.size());
    backend_tid[key] = tid;
    const std::string base = e.rec.backend + " replica " + std::to_string(e.rec.replica);
    events.push_back(meta("thread_name", backend_pid, tid, base + " (wall)"));
    events.push_back(meta("thread_name", backend_pid, tid + 1, base + " (modelled " + preset_.name + ")"));
  }
  // Slices, gathered per track, sorted by start (parents before their children) at the end.
  std::map<std::pair<int, int>, std::vector<json>> tracks;
  for (const auto& e : entries_) {
    const auto& r = e.rec;
    const int64_t start_ns = static_cast<int64_t>(r.start_seconds * 1e9);
    int64_t tokens = 0;
    for (int32_t l : r.seq_lengths) tokens += l;
    const std::string bname = "batch " + std::to_string(r.batch_id);
    json bargs = {{"batch", r.batch_id}, {"replica", r.replica}, {"sequences", r.seq_lengths.size()},
                  {"tokens", tokens}, {"wall_ms", r.wall_seconds * 1e3}, {"modelled_ms", e.model.total_seconds * 1e3}};
    bargs.update(r.args);
    const int btid = backend_tid[{r.backend, r.replica}];
    tracks[{backend_pid, btid}].push_back(slice(bname, "batch", backend_pid, btid, start_ns / 1e3, r.wall_seconds * 1e6, bargs));
    tracks[{backend_pid, btid + 1}].push_back(
        slice(bname, "batch", backend_pid, btid + 1, e.modelled_start_us, e.model.total_seconds * 1e6, bargs));
    // Wall: each tile's counters accumulated from the batch start, in integer ns.
    for (const auto& [tile, cs] : r.counters) {
      const int tid = static_cast<int>(tile);
      auto& tr = tracks[{wall_pid, tid}];
      int64_t at = start_ns;
      for (size_t k = 0; k < cs.size(); ++k) {
        const auto& c = cs[k];
        const int64_t total = static_cast<int64_t>(c.compute_ns + c.exchange_ns + c.sync_ns);
        if (total == 0) continue;
        const std::string step = "step " + std::to_string(k);
        tr.push_back(slice(step, "superstep", wall_pid, tid, at / 1e3, total / 1e3,
                           {{"batch", r.batch_id}, {"superstep", k}, {"kernels", join(kernels_of(r.replica, tile, k))},
                            {"bytes_sent", c.bytes_sent}, {"bytes_received", c.bytes_received}}));
        int64_t t0 = at;
        for (auto [name, ns] : {std::pair<const char*, uint64_t>{"compute", c.compute_ns}, {"exchange", c.exchange_ns}, {"sync", c.sync_ns}}) {
          if (ns > 0) tr.push_back(slice(name, name, wall_pid, tid, t0 / 1e3, static_cast<int64_t>(ns) / 1e3, {{"superstep", k}}));
          t0 += static_cast<int64_t>(ns);
        }
        at += total;
      }
    }
    // Modelled: every tile of the replica, superstep after superstep (compute, sync, exchange).
    double at = e.modelled_start_us;
    const double us_per_cycle = 1e6 / preset_.clock_hz;
    for (const auto& st : e.model.steps) {
      const double len = st.total_cycles * us_per_cycle;
      if (len <= 0) continue;
      for (const auto& ts : st.tiles) {
        const int tid = static_cast<int>(ts.tile);
        if (ts.compute_cycles == 0 && ts.exchange_cycles == 0 && st.sync_cycles == 0) continue;
        auto& tr = tracks[{modelled_pid, tid}];
        std::vector<std::string> q;
        for (const auto& x : ts.queries) q.push_back(x.to_string());
        tr.push_back(slice("step " + std::to_string(st.index), "superstep", modelled_pid, tid, at, len,
                           {{"batch", r.batch_id}, {"superstep", st.index}, {"kernels", join(ts.kernels)}, {"queries", q},
                            {"compute_cycles", ts.compute_cycles}, {"exchange_cycles", ts.exchange_cycles},
                            {"bytes_received", ts.bytes_received}, {"superstep_cycles", st.total_cycles}}));
        const double ce = at + st.compute_cycles * us_per_cycle, se = ce + st.sync_cycles * us_per_cycle;
        if (ts.compute_cycles > 0)
          tr.push_back(slice("compute", "compute", modelled_pid, tid, at, std::min(ts.compute_cycles * us_per_cycle, len), {{"superstep", st.index}}));
        if (st.sync_cycles > 0)
          tr.push_back(slice("sync", "sync", modelled_pid, tid, ce, st.sync_cycles * us_per_cycle, {{"superstep", st.index}}));
        if (ts.exchange_cycles > 0)
          tr.push_back(slice("exchange", "exchange", modelled_pid, tid, se,
                             std::min(ts.exchange_cycles * us_per_cycle, at + len - se), {{"superstep", st.index}}));
      }
      at += len;
    }
  }
  for (auto& [key, v] : tracks) {
    std::stable_sort(v.begin(), v.end(), [](const json& a, const json& b) {
      const double ta = a["ts"], tb = b["ts"];
      if (ta != tb) return ta < tb;
      return a["dur"].get<double>() > b["dur"].get<double>();
    });
    for (auto& x : v) events.push_back(std::move(x));
  }
  json other = {{"preset", preset_.name}, {"tile_share", share_.note}, {"plan", compiled_.chosen.to_string()},
                {"modelled_clock", "each emulated tile stands for its share of the chip: " + share_.note}};
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(other)}};
}

status profiler::write_trace(const std::string& path) const {
  std::ofstream f(path);
  if (!f) return status::invalid("cannot write the trace to '" + path + "'; check the folder exists and is writable");
  f << trace().dump() << "\n";
  if (!f) return status::internal("writing the trace to '" + path + "' failed");
  return ok_status();
}

std::vector<tile_memory_row> profiler::memory_report() const {
  std::lock_guard lock(mu_);
  std::vector<tile_memory_row> rows;
  for (const auto& t : compiled_.tiles) {
    tile_memory_row m;
    m.tile = t.tile;
    m.weights = t.bytes_of("weights");
    m.activations = t.bytes_of("activations");
    m.exchange = t.bytes_of("exchange");
    m.used = t.total_bytes();
    m.capacity = opt_.tile_memory;
    m.free = static_cast<int64_t>(m.capacity) - static_cast<int64_t>(m.used);
    for (const auto& e : entries_)
      if (auto it = e.rec.memory_high_water.find(t.tile); it != e.rec.memory_high_water.end())
        m.high_water = std::max(m.high_water, it->second);
    rows.push_back(m);
  }
  return rows;
}

std::string profiler::memory_text() const {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-5s %12s %12s %12s %12s %12s %12s %12s\n", "tile", "weights", "activations", "exchange",
                "used", "capacity", "free", "high-water");
  os << line;
  for (const auto& m : memory_report()) {
    std::string free = m.capacity == 0 ? "?" : m.free < 0 ? "-" + mib(static_cast<uint64_t>(-m.free)) : mib(static_cast<uint64_t>(m.free));
    std::snprintf(line, sizeof line, "%-5u %12s %12s %12s %12s %12s %12s %12s\n", m.tile, mib(m.weights).c_str(),
                  mib(m.activations).c_str(), mib(m.exchange).c_str(), mib(m.used).c_str(),
                  m.capacity ? mib(m.capacity).c_str() : "?", free.c_str(), m.high_water ? mib(m.high_water).c_str() : "-");
    os << line;
  }
  return os.str();
}

std::vector<step_rank> profiler::slowest_wall(size_t top) const {
  std::lock_guard lock(mu_);
  std::vector<step_rank> all;
  for (const auto& e : entries_) {
    size_t steps = 0;
    for (const auto& [t, cs] : e.rec.counters) steps = std::max(steps, cs.size());
    for (size_t k = 0; k < steps; ++k) {
      step_rank s{e.rec.batch_id, e.rec.replica, k};
      uint64_t most = 0;
      bool any = false;
      for (const auto& [t, cs] : e.rec.counters) {
        if (k >= cs.size()) continue;
        const auto& c = cs[k];
        s.seconds = std::max(s.seconds, (c.compute_ns + c.exchange_ns + c.sync_ns) * 1e-9);
        if (!any || c.compute_ns > most) most = c.compute_ns, s.slowest_tile = t, any = true;
      }
      s.slowest_compute_seconds = most * 1e-9;
      all.push_back(std::move(s));
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const step_rank& a, const step_rank& b) { return a.seconds > b.seconds; });
  if (all.size() > top) all.resize(top);
  for (auto& s : all) s.kernels = kernels_of(s.replica, s.slowest_tile, s.step);
  return all;
}

std::vector<step_rank> profiler::slowest_modelled(size_t top) const {
  std::lock_guard lock(mu_);
  std::vector<step_rank> all;
  for (const auto& e : entries_)
    for (const auto& st : e.model.steps) {
      step_rank s{e.rec.batch_id, e.rec.replica, st.index, st.seconds, st.slowest_compute_tile,
                  st.compute_cycles / preset_.clock_hz};
      for (const auto& ts : st.tiles)
        if (ts.tile == st.slowest_compute_tile)
          for (const auto& q : ts.queries) s.kernels.push_back(q.to_string());
      all.push_back(std::move(s));
    }
  std::stable_sort(all.begin(), all.end(), [](const step_rank& a, const step_rank& b) { return a.seconds > b.seconds; });
  if (all.size() > top) all.resize(top);
  return all;
}

load_imbalance profiler::imbalance(size_t worst) const {
  std::lock_guard lock(mu_);
  load_imbalance li;
  double wmax = 0, wmean = 0, mmax = 0, mmean = 0;
  std::vector<std::pair<step_rank, double>> lost;  // (rank with seconds = max - mean, ratio)
  for (const auto& e : entries_) {
    const auto& progs = compiled_.programs[static_cast<size_t>(e.rec.replica)];
    size_t steps = 0;
    for (const auto& [t, cs] : e.rec.counters) steps = std::max(steps, cs.size());
    for (size_t k = 0; k < steps; ++k) {
      double mx = 0, sum = 0;
      uint32_t who = 0;
      for (const auto& [t, p] : progs) {
        auto it = e.rec.counters.find(t);
        const double c = it != e.rec.counters.end() && k < it->second.size() ? it->second[k].compute_ns * 1e-9 : 0;
        sum += c;
        if (c > mx) mx = c, who = t;
      }
      const double mean = progs.empty() ? 0 : sum / static_cast<double>(progs.size());
      wmax += mx, wmean += mean;
      if (mean > 0) lost.push_back({step_rank{e.rec.batch_id, e.rec.replica, k, mx - mean, who, mx}, mx / mean});
    }
    for (const auto& st : e.model.steps) {
      double sum = 0;
      for (const auto& ts : st.tiles) sum += ts.compute_cycles;
      mmax += st.compute_cycles;
      mmean += st.tiles.empty() ? 0 : sum / static_cast<double>(st.tiles.size());
    }
  }
  li.wall = wmean > 0 ? wmax / wmean : 1;
  li.modelled = mmean > 0 ? mmax / mmean : 1;
  std::stable_sort(lost.begin(), lost.end(), [](const auto& a, const auto& b) { return a.first.seconds > b.first.seconds; });
  if (lost.size() > worst) lost.resize(worst);
  li.worst_wall = std::move(lost);
  return li;
}

std::string profiler::summary(size_t top) const {
  std::ostringstream os;
  char line[512];
  os << "profile: " << batches() << " batches, plan " << compiled_.chosen.to_string() << "; modelled on " << preset_.name
     << " (" << share_.note << ")\n";
  os << "slowest supersteps by wall time (longest tile; slowest = most compute):\n";
  for (const auto& s : slowest_wall(top)) {
    std::snprintf(line, sizeof line, "  batch %llu replica %d step %zu: %.3f ms, slowest tile %u (compute %.3f ms): %s\n",
                  (unsigned long long)s.batch_id, s.replica, s.step, s.seconds * 1e3, s.slowest_tile,
                  s.slowest_compute_seconds * 1e3, join(s.kernels).c_str());
    os << line;
  }
  os << "slowest supersteps by modelled time (" << preset_.name << "):\n";
  for (const auto& s : slowest_modelled(top)) {
    std::snprintf(line, sizeof line, "  batch %llu replica %d step %zu: %.3f us, slowest tile %u (compute %.3f us): %s\n",
                  (unsigned long long)s.batch_id, s.replica, s.step, s.seconds * 1e6, s.slowest_tile,
                  s.slowest_compute_seconds * 1e6, join(s.kernels).c_str());
    os << line;
  }
  auto li = imbalance(top);
  std::snprintf(line, sizeof line, "load imbalance (sum of max / sum of mean compute across a replica's tiles): wall %.2f, modelled %.2f\n",
                li.wall, li.modelled);
  os << line;
  for (const auto& [s, ratio] : li.worst_wall) {
    std::snprintf(line, sizeof line, "  batch %llu replica %d step %zu: max/mean %.2f, %.3f ms lost, busiest tile %u: %s\n",
                  (unsigned long long)s.batch_id, s.replica, s.step, ratio, s.seconds * 1e3, s.slowest_tile,
                  join(kernels_of(s.replica, s.slowest_tile, s.step)).c_str());
    os << line;
  }
  double wall = 0, model = 0;
  {
    std::lock_guard lock(mu_);
    for (const auto& e : entries_) wall += e.rec.wall_seconds, model += e.model.total_seconds;
  }
  std::snprintf(line, sizeof line, "total: %.3f ms wall, %.3f ms modelled\n", wall * 1e3, model * 1e3);
  os << line << "memory per tile (plan; high-water as reported by the tiles):\n" << memory_text();
  return os.str();
}

}  // namespace tessera::host
