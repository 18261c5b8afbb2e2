// The discrete-event loop on modelled time. See virtual_run.hpp.
#include "tessera/experiment/virtual_run.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <future>
#include <limits>

#include "tessera/common/check.hpp"
#include "tessera/models/batch.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/serving/clock.hpp"
#include "tessera/serving/request.hpp"

namespace tessera::experiment {

double logit_error(const std::vector<float>& want, const std::vector<float>& got, models::dtype computed_in) {
  if (want.size() != got.size()) return std::numeric_limits<double>::infinity();
  double err = 0, scale = 1;
  for (size_t k = 0; k < want.size(); ++k) {
    err = std::max(err, static_cast<double>(std::abs(want[k] - got[k])));
    scale = std::max(scale, static_cast<double>(std::abs(want[k])));
  }
  return computed_in == models::dtype::fp32 ? err : err / scale;
}

double logit_tolerance_of(models::dtype computed_in) {
  return computed_in == models::dtype::fp32 ? 1e-4 : models::bf16_logit_bound;
}


namespace {

using serving::time_point;
using ns = std::chrono::nanoseconds;

int64_t to_ns(double seconds) { return std::llround(seconds * 1e9); }

// One emulated device: serves its batches one after another, each for its modelled time.
class virtual_backend final : public backends::backend {
 public:
  virtual_backend(const virtual_backend_spec& spec, std::string kind, service_time_fn service,
                  const serving::manual_clock& clk, time_point t0, std::vector<batch_record>* batches)
      : spec_(spec), service_(std::move(service)), clk_(clk), t0_(t0), batches_(batches) {
    info_.name = spec.name;
    info_.kind = std::move(kind);
    info_.max_sequence_length = spec.max_sequence_length;
    info_.num_labels = spec.compute ? spec.compute->info().num_labels : 2;
  }

  backends::backend_info info() const override { return info_; }
  bool healthy() const override { return true; }
  int64_t outstanding_tokens() const override { return outstanding_; }

  void submit(backends::batch_request req, std::function<void(backends::batch_result)> done) override {
    const time_point now = clk_.now();
    std::vector<int32_t> lens;
    int64_t real_tokens = 0, real_seqs = 0;
    for (const auto& s : req.sequences) {
      lens.push_back(static_cast<int32_t>(s.token_ids.size()));
      // The batcher's dummy rows of static batches are single [PAD] tokens.
      if (!(s.token_ids.size() == 1 && s.token_ids[0] == 0)) {
        real_tokens += static_cast<int64_t>(s.token_ids.size());
        ++real_seqs;
      }
    }
    const bool padded = req.layout == backends::batch_layout::padded;
    const int32_t rows = static_cast<int32_t>(lens.size());
    backends::batch_result r;
    r.batch_id = req.batch_id;
    r.num_labels = info_.num_labels;
    auto svc = service_(lens, req.layout, req.padded_length);
    if (!svc) {
      if (error_.ok()) error_ = svc.error().with_context("modelled time of a batch on " + spec_.name);
      r.st = error_;
      pending_.push_back({now, std::move(done), std::move(r), 0});
      return;
    }
    const int64_t start = std::max(now.time_since_epoch().count(), busy_until_);
    const int64_t end = start + std::max<int64_t>(1, to_ns(*svc));
    busy_until_ = end;
    busy_ns_ += end - start;
    batch_record rec;
    rec.backend = spec_.name;
    rec.start_s = static_cast<double>(start - t0_.time_since_epoch().count()) * 1e-9;
    rec.end_s = static_cast<double>(end - t0_.time_since_epoch().count()) * 1e-9;
    rec.sequences = static_cast<int32_t>(real_seqs);
    rec.rows = rows;
    rec.real_tokens = real_tokens;
    rec.computed_tokens = padded ? static_cast<int64_t>(rows) * std::max<int32_t>(req.padded_length, 1) : real_tokens;
    if (spec_.compute) {
      // Computed for real; modelled time does not move while we wait.
      std::promise<backends::batch_result> p;
      auto f = p.get_future();
      auto w0 = std::chrono::steady_clock::now();
      spec_.compute->submit(std::move(req), [&p](backends::batch_result br) { p.set_value(std::move(br)); });
      r = f.get();
      rec.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      r.timing.wall_seconds = rec.wall_s;
    } else {
      r.st = ok_status();
      r.logits.assign(static_cast<size_t>(rows) * static_cast<size_t>(r.num_labels), 0.0f);
    }
    r.timing.modelled_seconds = *svc;
    batches_->push_back(rec);
    outstanding_ += real_tokens;
    pending_.push_back({time_point(ns(end)), std::move(done), std::move(r), real_tokens});
  }

  std::optional<time_point> next_completion() const {
    if (pending_.empty()) return std::nullopt;
    return pending_.front().at;
  }
  /// Answers every batch that is complete at `now`, in order.
  void deliver(time_point now) {
    while (!pending_.empty() && pending_.front().at <= now) {
      auto p = std::move(pending_.front());
      pending_.pop_front();
      outstanding_ -= p.tokens;
      p.done(std::move(p.result));
    }
  }
  const status& error() const { return error_; }
  int64_t busy_ns() const { return busy_ns_; }

 private:
  struct pending {
    time_point at;
    std::function<void(backends::batch_result)> done;
    backends::batch_result result;
    int64_t tokens = 0;
  };
  virtual_backend_spec spec_;
  service_time_fn service_;
  const serving::manual_clock& clk_;
  time_point t0_;
  std::vector<batch_record>* batches_;
  backends::backend_info info_;
  int64_t busy_until_ = std::numeric_limits<int64_t>::min();
  int64_t busy_ns_ = 0;
  int64_t outstanding_ = 0;
  std::deque<pending> pending_;
  status error_;
};

}  // namespace

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double rank = std::ceil(q * static_cast<double>(v.size()));
  size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return v[std::min(i, v.size() - 1)];
}

result<run_result> run_virtual(const trace& t, const virtual_run_config& cfg) {
  if (cfg.backends.empty()) return status::invalid("a virtual run needs at least one backend");
  if (t.entries.empty()) return status::invalid("the trace has no requests");
  serving::manual_clock clk;
  const time_point t0 = clk.now();
  auto at = [&](double s) { return t0 + ns(to_ns(s)); };
  auto since = [&](time_point p) { return static_cast<double>((p - t0).count()) * 1e-9; };

  run_result out;
  const size_t n = t.entries.size();
  out.requests.resize(n);
  bool computed = true;      // every backend computes (answers can be checked)
  bool any_computes = false;  // some backend computes (requests need real token ids)

  std::vector<std::shared_ptr<virtual_backend>> vbs;
  serving::router router(cfg.routing, clk);
  for (const auto& spec : cfg.backends) {
    service_time_fn svc = spec.service;
    std::string kind = spec.kind;
    if (!svc) {
      auto dm = device_model::load(spec.preset, cfg.shape, cfg.dtype, spec.mapping);
      if (!dm) return dm.error().with_context("backend " + spec.name);
      std::shared_ptr<device_model> d = *dm;
      if (kind.empty()) kind = d->kind();
      svc = [d](const std::vector<int32_t>& l, backends::batch_layout lay, int32_t pad) {
        return d->batch_seconds(l, lay, pad);
      };
    }
    if (kind.empty()) kind = "gpu";
    if (!spec.compute) computed = false;
    if (spec.compute) any_computes = true;
    auto vb = std::make_shared<virtual_backend>(spec, kind, svc, clk, t0, &out.batches);
    serving::batching_config bc = spec.batching;
    bc.max_queue_requests = std::max<size_t>(bc.max_queue_requests, n + 1);  // the trace decides load, not refusals
    if (auto st = bc.validate(); !st.ok()) return st.with_context("backend " + spec.name);
    if (auto st = router.add_backend(vb, bc); !st.ok()) return st.with_context("backend " + spec.name);
    vbs.push_back(std::move(vb));
  }

  auto wall0 = std::chrono::steady_clock::now();
  double max_err = 0;
  int64_t checked = 0;
  auto submit = [&](size_t i) {
    const trace_entry& e = t.entries[i];
    request_record& rec = out.requests[i];
    rec.id = i;
    rec.length = e.length;
    rec.arrival_s = e.arrival_s;
    auto req = std::make_unique<serving::inference_request>();
    req->id = i;
    if (any_computes) {
      auto pb = models::synthetic_batch({e.length}, cfg.vocab_size, cfg.input_seed + i);
      req->input.token_ids = std::move(pb.token_ids);
    } else {
      req->input.token_ids.assign(static_cast<size_t>(e.length), 0);  // timing-only: only the length is read
    }
    req->arrival = clk.now();
    req->done = [&, i](serving::sequence_outcome o) {
      request_record& r = out.requests[i];
      r.done_s = since(clk.now());
      r.dispatch_s = r.done_s - o.inference_seconds;
      r.backend = o.backend;
      r.ok = o.st.ok();
      if (!r.ok) r.error = o.st.to_string();
      if (r.ok && cfg.check_model && !vbs.empty() && computed) {
        models::packed_batch one = models::synthetic_batch({r.length}, cfg.vocab_size, cfg.input_seed + i);
        auto want = models::reference_forward(*cfg.check_model, one);
        const double err = logit_error(want, o.logits, cfg.computed_in);
        max_err = std::max(max_err, err);
        ++checked;
        auto& bc = out.summary.checks[r.backend];
        bc.max_abs_logit_error = std::max(bc.max_abs_logit_error, err);
        ++bc.checked;
      }
    };
    if (auto st = router.submit(req); !st.ok()) {
      rec.done_s = rec.arrival_s;
      rec.error = st.to_string();
      req->done = nullptr;
    }
  };

  size_t next = 0;
  for (;;) {
    const time_point now = clk.now();
    for (auto& vb : vbs) vb->deliver(now);
    while (next < n && at(t.entries[next].arrival_s) <= now) submit(next++);
    std::optional<time_point> wake;
    for (size_t b = 0; b < router.num_backends(); ++b) {
      auto w = router.backend_batcher(b).poll();
      if (w) wake = wake ? std::min(*wake, *w) : *w;
    }
    for (auto& vb : vbs)
      if (!vb->error().ok()) {
        // Answer everything still in flight so the batchers drain before the router goes.
        status err = vb->error();
        for (int round = 0; round < 64; ++round) {
          bool busy = false;
          for (auto& v : vbs) {
            busy = busy || v->next_completion().has_value();
            v->deliver(time_point::max());
          }
          for (size_t b = 0; b < router.num_backends(); ++b) {
            auto& bt = router.backend_batcher(b);
            busy = busy || bt.queue_size() > 0 || bt.inflight_batches() > 0;
            bt.poll(true);
          }
          if (!busy) break;
        }
        return err;
      }
    time_point nxt = time_point::max();
    if (next < n) nxt = std::min(nxt, at(t.entries[next].arrival_s));
    for (auto& vb : vbs)
      if (auto c = vb->next_completion()) nxt = std::min(nxt, *c);
    if (wake) nxt = std::min(nxt, *wake);
    if (nxt == time_point::max()) break;
    if (nxt <= now) nxt = now + ns(1);
    clk.advance(nxt - now);
  }
  router.stop();

  // Summary.
  run_summary& s = out.summary;
  s.requests = static_cast<int64_t>(n);
  std::vector<double> lat;
  double first = std::numeric_limits<double>::max(), last = 0;
  for (auto& r : out.requests) {
    first = std::min(first, r.arrival_s);
    if (r.ok) {
      ++s.completed;
      lat.push_back(r.latency_s());
      last = std::max(last, r.done_s);
    } else {
      ++s.failed;
      if (r.error.empty()) r.error = "not answered";
    }
  }
  s.makespan_s = last > first ? last - first : 0;
  s.throughput_rps = s.makespan_s > 0 ? static_cast<double>(s.completed) / s.makespan_s : 0;
  if (!lat.empty()) {
    double sum = 0;
    for (double l : lat) sum += l;
    s.mean_latency_s = sum / static_cast<double>(lat.size());
    s.p50_latency_s = quantile(lat, 0.5);
    s.p99_latency_s = quantile(lat, 0.99);
  }
  s.batches = static_cast<int64_t>(out.batches.size());
  int64_t seqs = 0, real = 0, comp = 0;
  for (const auto& b : out.batches) {
    seqs += b.sequences;
    real += b.real_tokens;
    comp += b.computed_tokens;
    s.compute_wall_s += b.wall_s;
  }
  s.mean_batch_sequences = s.batches ? static_cast<double>(seqs) / static_cast<double>(s.batches) : 0;
  s.padding_share = comp > 0 ? 1.0 - static_cast<double>(real) / static_cast<double>(comp) : 0;
  for (auto& vb : vbs)
    s.busy_share.push_back(s.makespan_s > 0 ? static_cast<double>(vb->busy_ns()) * 1e-9 / s.makespan_s : 0);
  s.computed = computed;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  // The real computation's rate: batches' wall time when computed (the reference checks and the
  // loop itself excluded), else the whole loop's.
  double wall = computed && s.compute_wall_s > 0 ? s.compute_wall_s : s.wall_s;
  s.wall_rps = wall > 0 ? static_cast<double>(s.completed) / wall : 0;
  s.checked = checked;
  s.max_abs_logit_error = max_err;
  return out;
}

}  // namespace tessera::experiment
