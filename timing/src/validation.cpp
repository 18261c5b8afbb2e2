#include "tessera/timing/validation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <variant>

#include "tessera/timing/bert_model.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::timing {

bool validation_row::within_tolerance() const { return std::abs(error_percent()) <= tolerance_percent; }

namespace {

constexpr double peak_tolerance = 1.0;  // published peaks are rounded to 2-3 digits

status add_ipu_peaks(const std::string& preset, std::vector<validation_row>& rows) {
  auto p = load_ipu_preset(preset);
  if (!p) return p.error();
  const auto& pub = p->published;
  if (pub.fp16_flops_per_s)
    rows.push_back({preset + " fp16 peak (tiles x flops/cycle x clock)", "TFLOP/s",
                    p->peak_flops_per_s(dtype::fp16) / 1e12, *pub.fp16_flops_per_s / 1e12, peak_tolerance,
                    p->sources["published.fp16_flops_per_s"]});
  if (pub.fp32_flops_per_s)
    rows.push_back({preset + " fp32 peak", "TFLOP/s", p->peak_flops_per_s(dtype::fp32) / 1e12,
                    *pub.fp32_flops_per_s / 1e12, peak_tolerance, p->sources["published.fp32_flops_per_s"]});
  if (pub.memory_bytes)
    rows.push_back({preset + " memory (tiles x bytes/tile)", "MiB", double(p->memory_bytes()) / (1 << 20),
                    *pub.memory_bytes / (1 << 20), peak_tolerance, p->sources["published.memory_bytes"]});
  if (pub.exchange_bytes_per_s)
    rows.push_back({preset + " exchange (tiles x bytes/cycle x clock)", "TB/s", p->exchange_bytes_per_s() / 1e12,
                    *pub.exchange_bytes_per_s / 1e12, 3.0, p->sources["published.exchange_bytes_per_s"]});
  return ok_status();
}

}  // namespace

std::vector<int64_t> byte_mlperf_ipu_seq_lens() {
  // ByteMLPerf's IPU pack benchmark draws lengths from int(N(172, 172)) clipped to [1, 384]
  // (backends/IPU/engine_poprt.py, benchmark_pack); these are its 40 mid-quantiles (mean 177.1):
  //   [min(384, max(1, int(NormalDist(172, 172).inv_cdf((i + 0.5) / 40)))) for i in range(40)]
  return {1,   1,   1,   1,   1,   1,   2,   19,  34,  49,  62,  75,  87,  99,  111, 122, 133, 144, 155, 166,
          177, 188, 199, 210, 221, 232, 244, 256, 268, 281, 294, 309, 324, 341, 359, 380, 384, 384, 384, 384};
}

namespace {

std::string row_name(const anchor_row& r) {
  return r.id + " (" + r.model + " " + r.precision + ", batch " + std::to_string(r.batch) +
         (r.lengths == "uniform" ? ", seq " + std::to_string(r.seq) : ", packed lengths up to " + std::to_string(r.seq)) +
         ")";
}

double target_percent(const anchor_row& r) { return r.lengths == "bytemlperf_packed" ? 25.0 : 15.0; }

result<validation_row> model_row(const hardware_preset& p, const anchor_row& r) {
  auto v = std::visit([&](const auto& preset) { return model_anchor(preset, r); }, p);
  if (!v) return v.error();
  return validation_row{row_name(r), r.unit(), *v, r.value, target_percent(r), r.source_title + " <" + r.source_url + ">"};
}

}  // namespace

result<validation_report> validate_timing_model(const std::vector<anchor_row>& anchors) {
  validation_report rep;
  auto a100 = load_gpu_preset("a100-40gb");
  if (!a100) return a100.error();
  auto c600 = load_ipu_preset("ipu-c600");
  if (!c600) return c600.error();
  auto fit = fit_gpu_constants(*a100, anchors);
  if (!fit) return fit.error();
  rep.a100_fit = *fit;
  rep.a100_preset_efficiency = a100->calibration.tensor_core_efficiency;
  rep.a100_preset_launch_overhead_s = a100->launch_overhead_s;
  auto amp = fit_ipu_amp_efficiency(*c600, anchors);
  if (!amp) return amp.error();
  rep.ipu_amp_fit = *amp;
  rep.ipu_preset_amp_efficiency = c600->calibration.amp_efficiency;

  for (const anchor_row& r : anchors) {
    hardware_preset p;
    if (r.preset == a100->name) {
      p = *a100;
    } else if (r.preset == c600->name) {
      p = *c600;
    } else {
      auto other = load_preset(r.preset);
      if (!other) return other.error().with_context("anchor '" + r.id + "'");
      p = *other;
    }
    auto row = model_row(p, r);
    if (!row) return row.error();
    (r.calibration() ? rep.calibration : rep.held_out).push_back(std::move(*row));
  }

  for (const anchor_row& r : anchors) {
    if (!r.calibration() || r.preset != a100->name) continue;
    auto f = fit_gpu_constants(*a100, anchors, r.id);
    if (!f) return f.error();
    const gpu_preset refit = with_fit(*a100, *f);
    auto left = model_anchor(refit, r);
    if (!left) return left.error();
    double worst = 0;
    for (const anchor_row& h : anchors) {
      if (h.calibration() || h.preset != a100->name) continue;
      auto v = model_anchor(refit, h);
      if (!v) return v.error();
      worst = std::max(worst, std::abs(100.0 * (*v - h.value) / h.value));
    }
    rep.leave_one_out.push_back({r.id, *f, 100.0 * (*left - r.value) / r.value, worst});
  }

  for (const char* ipu : {"ipu-mk2", "ipu-c600", "ipu-bow"}) TESSERA_RETURN_IF_ERROR(add_ipu_peaks(ipu, rep.preset_checks));
  return rep;
}

result<validation_report> validate_timing_model() {
  auto anchors = load_anchors();
  if (!anchors) return anchors.error();
  return validate_timing_model(*anchors);
}

std::string validation_markdown(const std::vector<validation_row>& rows) {
  std::string s = "| case | unit | model | reference | error % | tolerance % | ok |\n|---|---|---|---|---|---|---|\n";
  char buf[512];
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "| %s | %s | %.4g | %.4g | %+.1f | %.0f | %s |\n", r.name.c_str(), r.unit.c_str(),
                  r.model, r.reference, r.error_percent(), r.tolerance_percent, r.within_tolerance() ? "yes" : "NO");
    s += buf;
  }
  return s;
}

}  // namespace tessera::timing

namespace tessera::timing {

std::string validation_report_markdown(const validation_report& r) {
  char buf[1024];
  std::string s;
  s += "## Fitted constants (fitted on the calibration rows only)\n\n";
  std::snprintf(buf, sizeof buf,
                "| constant | fitted | preset holds |\n|---|---|---|\n"
                "| a100-40gb calibration.tensor_core_efficiency | %.4f | %.4g |\n"
                "| a100-40gb launch_overhead_s | %.3f us | %.3g us |\n"
                "| ipu-c600 calibration.amp_efficiency (all IPU presets) | %.4f | %.4g |\n\n",
                r.a100_fit.tensor_core_efficiency, r.a100_preset_efficiency, r.a100_fit.launch_overhead_s * 1e6,
                r.a100_preset_launch_overhead_s * 1e6, r.ipu_amp_fit, r.ipu_preset_amp_efficiency);
  s += buf;
  s += "## Calibration rows (the constants above were fitted on these; an error here is a fit residual, not validation)\n\n";
  s += validation_markdown(r.calibration);
  s += "\n## Held-out rows (no fit read these; the model's error on points it has not seen)\n\n";
  s += validation_markdown(r.held_out);
  // Per target (15%: A100 latency rows, 25%: IPU throughput rows): count, within target, mean and max |error|.
  for (double target : {15.0, 25.0}) {
    int n = 0, within = 0;
    double sum = 0, worst = 0;
    for (const auto& h : r.held_out) {
      if (h.tolerance_percent != target) continue;
      ++n, within += h.within_tolerance() ? 1 : 0;
      sum += std::abs(h.error_percent()), worst = std::max(worst, std::abs(h.error_percent()));
    }
    if (n == 0) continue;
    std::snprintf(buf, sizeof buf, "\nheld out, %s rows (target %.0f%%): %d of %d within target; mean |error| %.1f%%, max %.1f%%",
                  target == 15.0 ? "A100" : "IPU", target, within, n, sum / n, worst);
    s += buf;
  }
  std::string misses;
  for (const auto& h : r.held_out)
    if (!h.within_tolerance()) misses += (misses.empty() ? "" : ", ") + h.name.substr(0, h.name.find(' '));
  s += "\nrows over their target: " + (misses.empty() ? std::string("none") : misses) + "\n";
  s += "\n## Leave-one-out over the A100 calibration rows (refit on the other rows)\n\n";
  s += "| left out | tensor_core_efficiency | change % | launch_overhead us | change % | error on the left-out row % | "
       "max held-out error % |\n|---|---|---|---|---|---|---|\n";
  for (const auto& l : r.leave_one_out) {
    std::snprintf(buf, sizeof buf, "| %s | %.4f | %+.1f | %.3f | %+.1f | %+.1f | %.1f |\n", l.left_out.c_str(),
                  l.fit.tensor_core_efficiency,
                  100.0 * (l.fit.tensor_core_efficiency - r.a100_fit.tensor_core_efficiency) /
                      r.a100_fit.tensor_core_efficiency,
                  l.fit.launch_overhead_s * 1e6,
                  r.a100_fit.launch_overhead_s > 0
                      ? 100.0 * (l.fit.launch_overhead_s - r.a100_fit.launch_overhead_s) / r.a100_fit.launch_overhead_s
                      : 0.0,
                  l.left_out_error_percent, l.held_out_max_abs_error_percent);
    s += buf;
  }
  s += "\n## Preset checks (peaks derived from the preset's fields vs the vendor's published peaks: consistency of "
       "the preset files, not validation of the model)\n\n";
  s += validation_markdown(r.preset_checks);
  return s;
}

}  // namespace tessera::timing
