#include "tessera/timing/anchors.hpp"
#include "tessera/common/text.hpp"
#include "anchor_fields.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <boost/math/distributions/normal.hpp>
#include <nlohmann/json.hpp>

#include "tessera/timing/bert_model.hpp"

namespace tessera::timing {

namespace {

using json = nlohmann::json;

// The IPU calibration row named by the split rule (ByteMLPerf's BERT fp16 report, BS 40).
constexpr std::string_view ipu_calibration_id = "ipu-c600-bytemlperf-bert-bs40";

result<anchor_row> parse_row(const json& j, size_t index, const std::string& origin) {
  const std::string where = origin + ": rows[" + std::to_string(index) + "]";
  if (!j.is_object()) return status::invalid(where + " is not an object");
  anchor_row r;
  auto num = [&](const char* key, auto& out) -> status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number() || it->template get<double>() <= 0)
      return status::invalid(where + ": field '" + key + "' is missing or not a positive number");
    out = it->template get<std::remove_reference_t<decltype(out)>>();
    return ok_status();
  };
  TESSERA_RETURN_IF_ERROR(detail::read_text_fields(
      j, where, {{"id", &r.id}, {"device", &r.device}, {"preset", &r.preset}, {"model", &r.model},
                 {"precision", &r.precision}, {"lengths", &r.lengths}, {"metric", &r.metric}, {"split", &r.split},
                 {"source_title", &r.source_title}, {"source_url", &r.source_url}, {"source_date", &r.source_date}}));
  TESSERA_RETURN_IF_ERROR(num("batch", r.batch));
  TESSERA_RETURN_IF_ERROR(num("seq", r.seq));
  TESSERA_RETURN_IF_ERROR(num("value", r.value));
  if (r.lengths != "uniform" && r.lengths != "bytemlperf_packed")
    return status::invalid(where + " (" + r.id + "): lengths '" + r.lengths + "'; use uniform or bytemlperf_packed");
  if (r.metric != "batch_latency_ms" && r.metric != "throughput_seq_per_s")
    return status::invalid(where + " (" + r.id + "): metric '" + r.metric +
                           "'; use batch_latency_ms or throughput_seq_per_s");
  if (r.split != "calibration" && r.split != "held_out")
    return status::invalid(where + " (" + r.id + "): split '" + r.split + "'; use calibration or held_out");
  return r;
}

}  // namespace

std::filesystem::path anchors_path() {
  if (const char* env = std::getenv("TESSERA_ANCHORS"); env != nullptr && *env != '\0') return env;
  return TESSERA_TIMING_DEFAULT_ANCHORS_FILE;
}

std::string split_rule(const anchor_row& row, const std::vector<anchor_row>& all) {
  if (row.lengths == "bytemlperf_packed") return row.id == ipu_calibration_id ? "calibration" : "held_out";
  if (row.seq != 128) return "held_out";
  int64_t largest = 0;
  for (const anchor_row& o : all)
    if (o.preset == row.preset && o.model == row.model && o.precision == row.precision && o.seq == 128 &&
        o.lengths == row.lengths)
      largest = std::max(largest, o.batch);
  return row.batch == 1 || row.batch == largest ? "calibration" : "held_out";
}

result<std::vector<anchor_row>> parse_anchors(std::string_view json_text, const std::string& origin) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    return status::invalid(origin + ": not valid JSON: " + e.what());
  }
  auto rows_it = root.is_object() ? root.find("rows") : root.end();
  if (rows_it == root.end() || !rows_it->is_array() || rows_it->empty())
    return status::invalid(origin + ": needs a non-empty array 'rows'");
  std::vector<anchor_row> rows;
  for (size_t i = 0; i < rows_it->size(); ++i) {
    auto r = parse_row((*rows_it)[i], i, origin);
    if (!r) return r.error();
    for (const anchor_row& o : rows)
      if (o.id == r->id) return status::invalid(origin + ": row id '" + r->id + "' appears twice");
    rows.push_back(std::move(*r));
  }
  for (const anchor_row& r : rows) {
    const std::string want = split_rule(r, rows);
    if (r.split != want)
      return status::invalid(origin + ": row '" + r.id + "' says split '" + r.split + "' but the fixed rule gives '" +
                             want + "' (see anchors.hpp); the split is not chosen per row");
  }
  return rows;
}

result<std::vector<anchor_row>> load_anchors(const std::filesystem::path& path) {
  const auto text = read_file(path);
  if (!text) return status::not_found("anchors file " + path.string() + " cannot be opened (set TESSERA_ANCHORS)");
  return parse_anchors(*text, path.string());
}

std::vector<int64_t> bytemlperf_mid_quantile_lengths(int64_t n, int64_t max_len) {
  const boost::math::normal_distribution<double> d(172.0, 172.0);
  std::vector<int64_t> lens;
  lens.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) {
    // Python's int() truncates toward zero; clipped to [1, max_len] as ByteMLPerf clips.
    const double q = boost::math::quantile(d, (double(i) + 0.5) / double(n));
    lens.push_back(std::clamp<int64_t>(static_cast<int64_t>(std::trunc(q)), 1, max_len));
  }
  return lens;
}

result<bert_batch> anchor_batch(const anchor_row& row) {
  if (row.lengths == "uniform") return bert_batch::uniform(row.batch, row.seq);
  if (row.lengths == "bytemlperf_packed") return bert_batch{bytemlperf_mid_quantile_lengths(row.batch, row.seq), 0};
  return status::invalid("anchor '" + row.id + "': unknown lengths '" + row.lengths + "'");
}

namespace {

template <class Preset, class Model>
result<double> model_row(const Preset& p, const anchor_row& row, Model model) {
  auto shape = models::shape_preset(row.model);
  if (!shape) return shape.error().with_context("anchor '" + row.id + "'");
  auto type = parse_dtype(row.precision);
  if (!type) return type.error().with_context("anchor '" + row.id + "'");
  auto batch = anchor_batch(row);
  if (!batch) return batch.error();
  auto s = model(p, *shape, *batch, *type);
  if (!s) return s.error().with_context("anchor '" + row.id + "'");
  return row.metric == "batch_latency_ms" ? *s * 1e3 : double(batch->seq_lens.size()) / *s;
}

}  // namespace

result<double> model_anchor(const gpu_preset& p, const anchor_row& row) {
  return model_row(p, row, [](const gpu_preset& g, const models::model_shape& s, const bert_batch& b, dtype t) {
    return model_gpu_batch_seconds(g, s, b, t);
  });
}

result<double> model_anchor(const ipu_preset& p, const anchor_row& row) {
  return model_row(p, row, [](const ipu_preset& i, const models::model_shape& s, const bert_batch& b, dtype t) {
    return model_ipu_batch_seconds(i, s, b, t);
  });
}

gpu_preset with_fit(gpu_preset p, const gpu_fit& f) {
  p.calibration.tensor_core_efficiency = f.tensor_core_efficiency;
  p.launch_overhead_s = f.launch_overhead_s;
  return p;
}

result<gpu_fit> fit_gpu_constants(const gpu_preset& p, const std::vector<anchor_row>& rows, std::string_view skip_id) {
  struct point {
    const anchor_row* row;
    double y;         // published batch latency, seconds
    double launches;  // launches of the forward (independent of the constants)
  };
  std::vector<point> pts;
  for (const anchor_row& r : rows) {
    if (!r.calibration() || r.preset != p.name || r.id == skip_id) continue;
    if (r.metric != "batch_latency_ms")
      return status::invalid("anchor '" + r.id + "': a GPU fit needs batch_latency_ms rows, got " + r.metric);
    pts.push_back({&r, r.value * 1e-3, 0});
  }
  if (pts.size() < 2)
    return status::invalid("fitting " + p.name + " needs at least 2 calibration rows, found " +
                           std::to_string(pts.size()));
  gpu_preset trial = p;
  trial.launch_overhead_s = 0;
  for (point& pt : pts) {
    auto shape = models::shape_preset(pt.row->model);
    auto type = parse_dtype(pt.row->precision);
    auto batch = anchor_batch(*pt.row);
    if (!shape || !type || !batch) return status::invalid("anchor '" + pt.row->id + "' cannot be modelled");
    auto est = model_gpu_batch(trial, *shape, *batch, *type);
    if (!est) return est.error();
    pt.launches = double(est->launches);
  }
  // For an efficiency e, each row's time is a_i(e) + launches_i * L; the best L >= 0 has a closed form.
  struct eval {
    double cost = 0, overhead = 0;
  };
  auto evaluate = [&](double e) -> result<eval> {
    trial.calibration.tensor_core_efficiency = e;
    std::vector<double> a;
    for (const point& pt : pts) {
      auto ms = model_anchor(trial, *pt.row);
      if (!ms) return ms.error();
      a.push_back(*ms * 1e-3);
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < pts.size(); ++i) {
      const double w = pts[i].launches / pts[i].y;
      num += w * (1 - a[i] / pts[i].y);
      den += w * w;
    }
    eval out;
    out.overhead = den > 0 ? std::max(0.0, num / den) : 0;
    for (size_t i = 0; i < pts.size(); ++i) {
      const double rel = (a[i] + pts[i].launches * out.overhead) / pts[i].y - 1;
      out.cost += rel * rel;
    }
    return out;
  };
  // Coarse grid, then golden-section search around the best grid point.
  double best_e = 0.2, best_cost = INFINITY;
  for (int k = 0; k <= 80; ++k) {
    const double e = 0.2 + 0.01 * k;
    auto v = evaluate(e);
    if (!v) return v.error();
    if (v->cost < best_cost) best_cost = v->cost, best_e = e;
  }
  double lo = std::max(0.2, best_e - 0.01), hi = std::min(1.0, best_e + 0.01);
  const double g = (std::sqrt(5.0) - 1) / 2;
  double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
  auto f1 = evaluate(x1), f2 = evaluate(x2);
  if (!f1) return f1.error();
  if (!f2) return f2.error();
  while (hi - lo > 1e-6) {
    if (f1->cost < f2->cost) {
      hi = x2, x2 = x1, f2 = f1, x1 = hi - g * (hi - lo), f1 = evaluate(x1);
      if (!f1) return f1.error();
    } else {
      lo = x1, x1 = x2, f1 = f2, x2 = lo + g * (hi - lo), f2 = evaluate(x2);
      if (!f2) return f2.error();
    }
  }
  const double e = (lo + hi) / 2;
  auto v = evaluate(e);
  if (!v) return v.error();
  return gpu_fit{e, v->overhead, static_cast<int64_t>(pts.size())};
}

result<double> fit_ipu_amp_efficiency(const ipu_preset& p, const std::vector<anchor_row>& rows) {
  const anchor_row* cal = nullptr;
  int found = 0;
  for (const anchor_row& r : rows)
    if (r.calibration() && r.preset == p.name) cal = &r, ++found;
  if (found != 1)
    return status::invalid("fitting " + p.name + " needs exactly one calibration row, found " + std::to_string(found));
  // Modelled throughput rises with the efficiency (or latency falls): bisect on the published value.
  const bool throughput = cal->metric == "throughput_seq_per_s";
  ipu_preset trial = p;
  double lo = 0.1, hi = 1.0;
  for (int it = 0; it < 40 && hi - lo > 1e-7; ++it) {
    const double mid = (lo + hi) / 2;
    trial.calibration.amp_efficiency = mid;
    auto v = model_anchor(trial, *cal);
    if (!v) return v.error();
    const bool too_slow = throughput ? *v < cal->value : *v > cal->value;
    (too_slow ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

}  // namespace tessera::timing
