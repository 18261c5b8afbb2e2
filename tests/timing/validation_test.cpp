// The validation: anchors and their split rule, fits that read calibration rows only, presets that
// hold the fits, tables whose reference numbers are the anchors file's, and the held-out errors
// that docs/timing.md states (including which rows miss their target).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tessera/timing/validation.hpp"

namespace tessera::timing {
namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::filesystem::path source_dir() {
  if (const char* s = std::getenv("TESSERA_SOURCE_DIR"); s != nullptr && *s != '\0') return s;
  return anchors_path().parent_path().parent_path().parent_path();  // timing/anchors/x.json -> repo
}

// The held-out rows docs/timing.md names as missing their target (and says why).
// With the fused attention's occupancy term (docs/timing.md, Validation); before it the s384 b2 and
// bert-large s384 b1/b2 rows missed too (-24.8%, -29.0%, -16.7%).
const std::set<std::string> documented_misses = {"a100-trt-bert-base-s384-b1"};

std::string id_of(const validation_row& r) { return r.name.substr(0, r.name.find(' ')); }

TEST(anchors, load_and_follow_the_split_rule) {
  auto rows = load_anchors();
  ASSERT_TRUE(rows) << rows.error().to_string();
  int a100_cal = 0, a100_held = 0, ipu_cal = 0, ipu_held = 0;
  for (const auto& r : *rows) {
    EXPECT_FALSE(r.source_url.empty()) << r.id;
    EXPECT_EQ(r.split, split_rule(r, *rows)) << r.id;
    if (r.preset == "a100-40gb") {
      (r.calibration() ? a100_cal : a100_held) += 1;
      if (r.calibration()) EXPECT_TRUE(r.seq == 128 && (r.batch == 1 || r.batch == 128)) << r.id;
    }
    if (r.preset == "ipu-c600") (r.calibration() ? ipu_cal : ipu_held) += 1;
  }
  EXPECT_EQ(a100_cal, 4);  // seq 128, batch 1 and 128, base and large
  EXPECT_GE(a100_held, 10);
  EXPECT_EQ(ipu_cal, 1);
  EXPECT_GE(ipu_held, 3);
}

TEST(anchors, a_split_column_that_disagrees_with_the_rule_is_refused) {
  std::string text = read_text(anchors_path());
  const std::string row = "\"id\": \"a100-trt-bert-base-s128-b32\"";
  auto at = text.find(row);
  ASSERT_NE(at, std::string::npos);
  auto split = text.find("\"split\": \"held_out\"", at);
  ASSERT_NE(split, std::string::npos);
  text.replace(split, std::string("\"split\": \"held_out\"").size(), "\"split\": \"calibration\"");
  auto rows = parse_anchors(text, "edited.json");
  ASSERT_FALSE(rows);
  EXPECT_EQ(rows.error().code(), errc::invalid_argument);
  EXPECT_NE(rows.error().message().find("a100-trt-bert-base-s128-b32"), std::string::npos) << rows.error().message();
}

TEST(anchors, bad_files_are_clear_errors) {
  auto missing = load_anchors("/nonexistent/anchors.json");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), errc::not_found);
  auto no_value = parse_anchors(R"({"rows": [{"id": "x", "device": "d", "preset": "a100-40gb", "model": "bert-base",
      "precision": "fp16", "batch": 1, "seq": 128, "lengths": "uniform", "metric": "batch_latency_ms",
      "split": "calibration", "source_title": "t", "source_url": "u", "source_date": "d"}]})",
                                "mine.json");
  ASSERT_FALSE(no_value);
  EXPECT_NE(no_value.error().message().find("'value'"), std::string::npos) << no_value.error().message();
  EXPECT_FALSE(parse_anchors("{\"rows\": []}", "empty.json"));
  EXPECT_FALSE(parse_anchors("not json", "bad.json"));
}

TEST(anchors, bytemlperf_lengths_are_the_mid_quantiles) {
  EXPECT_EQ(bytemlperf_mid_quantile_lengths(40), byte_mlperf_ipu_seq_lens());
  auto lens = byte_mlperf_ipu_seq_lens();
  double mean = 0;
  for (auto l : lens) mean += double(l) / 40;
  EXPECT_NEAR(mean, 177, 1);  // int(N(172, 172)) clipped to [1, 384] has mean ~177
  auto twenty = bytemlperf_mid_quantile_lengths(20);
  ASSERT_EQ(twenty.size(), 20u);
  EXPECT_TRUE(std::is_sorted(twenty.begin(), twenty.end()));
  EXPECT_LE(twenty.back(), 384);
  EXPECT_GE(twenty.front(), 1);
}

TEST(fit, reads_calibration_rows_only) {
  auto rows = load_anchors();
  ASSERT_TRUE(rows);
  auto a100 = load_gpu_preset("a100-40gb");
  auto c600 = load_ipu_preset("ipu-c600");
  ASSERT_TRUE(a100 && c600);
  auto base = fit_gpu_constants(*a100, *rows);
  auto base_amp = fit_ipu_amp_efficiency(*c600, *rows);
  ASSERT_TRUE(base && base_amp);
  EXPECT_EQ(base->rows_used, 4);

  auto held_changed = *rows;
  for (auto& r : held_changed)
    if (!r.calibration()) r.value *= 3;
  auto same = fit_gpu_constants(*a100, held_changed);
  auto same_amp = fit_ipu_amp_efficiency(*c600, held_changed);
  ASSERT_TRUE(same && same_amp);
  EXPECT_DOUBLE_EQ(same->tensor_core_efficiency, base->tensor_core_efficiency);
  EXPECT_DOUBLE_EQ(same->launch_overhead_s, base->launch_overhead_s);
  EXPECT_DOUBLE_EQ(*same_amp, *base_amp);

  auto cal_changed = *rows;
  for (auto& r : cal_changed)
    if (r.calibration()) r.value *= 1.2;
  auto moved = fit_gpu_constants(*a100, cal_changed);
  auto moved_amp = fit_ipu_amp_efficiency(*c600, cal_changed);
  ASSERT_TRUE(moved && moved_amp);
  EXPECT_LT(moved->tensor_core_efficiency, base->tensor_core_efficiency);  // 20% longer latencies: lower efficiency
  EXPECT_GT(*moved_amp, *base_amp);  // 20% more sequences/s: higher efficiency
}

TEST(fit, presets_hold_the_fitted_constants) {
  auto rows = load_anchors();
  ASSERT_TRUE(rows);
  auto a100 = load_gpu_preset("a100-40gb");
  ASSERT_TRUE(a100);
  auto fit = fit_gpu_constants(*a100, *rows);
  ASSERT_TRUE(fit);
  for (const char* name : {"a100-40gb", "a100-80gb", "h100-sxm"}) {  // the others carry the a100-40gb fit
    auto p = load_gpu_preset(name);
    ASSERT_TRUE(p);
    EXPECT_NEAR(p->calibration.tensor_core_efficiency, fit->tensor_core_efficiency, 0.001) << name;
    EXPECT_NEAR(p->launch_overhead_s, fit->launch_overhead_s, 0.01e-6) << name;
  }
  auto c600 = load_ipu_preset("ipu-c600");
  ASSERT_TRUE(c600);
  auto amp = fit_ipu_amp_efficiency(*c600, *rows);
  ASSERT_TRUE(amp);
  for (const char* name : {"ipu-mk2", "ipu-c600", "ipu-bow"}) {
    auto p = load_ipu_preset(name);
    ASSERT_TRUE(p);
    EXPECT_NEAR(p->calibration.amp_efficiency, *amp, 0.001) << name;
  }
}

TEST(fit, needs_enough_calibration_rows) {
  auto rows = load_anchors();
  ASSERT_TRUE(rows);
  auto a100 = load_gpu_preset("a100-40gb");
  ASSERT_TRUE(a100);
  std::vector<anchor_row> one;
  for (const auto& r : *rows)
    if (r.calibration() && r.preset == "a100-40gb" && one.empty()) one.push_back(r);
  EXPECT_FALSE(fit_gpu_constants(*a100, one));
  auto c600 = load_ipu_preset("ipu-c600");
  ASSERT_TRUE(c600);
  EXPECT_FALSE(fit_ipu_amp_efficiency(*c600, one));  // no IPU calibration row
}

TEST(validation, tables_quote_the_anchors_file) {
  auto rep = validate_timing_model();
  ASSERT_TRUE(rep) << rep.error().to_string();
  // Read the file independently of the library's parser.
  auto doc = nlohmann::json::parse(read_text(anchors_path()));
  std::map<std::string, std::pair<double, std::string>> file;
  for (const auto& r : doc["rows"]) file[r["id"]] = {r["value"].get<double>(), r["split"].get<std::string>()};
  ASSERT_EQ(rep->calibration.size() + rep->held_out.size(), file.size());
  for (const auto& r : rep->calibration) {
    ASSERT_TRUE(file.count(id_of(r))) << r.name;
    EXPECT_EQ(r.reference, file[id_of(r)].first) << r.name;
    EXPECT_EQ(file[id_of(r)].second, "calibration") << r.name;
  }
  for (const auto& r : rep->held_out) {
    ASSERT_TRUE(file.count(id_of(r))) << r.name;
    EXPECT_EQ(r.reference, file[id_of(r)].first) << r.name;
    EXPECT_EQ(file[id_of(r)].second, "held_out") << r.name;
    EXPECT_NE(r.source.find("https://"), std::string::npos) << r.name;
  }
}

TEST(validation, held_out_errors_are_the_documented_ones) {
  auto rep = validate_timing_model();
  ASSERT_TRUE(rep);
  std::set<std::string> misses;
  for (const auto& r : rep->held_out) {
    EXPECT_EQ(r.tolerance_percent, r.unit == "seq/s" ? 25 : 15) << r.name;
    if (!r.within_tolerance()) misses.insert(id_of(r));
  }
  EXPECT_EQ(misses, documented_misses);
  const std::string doc = read_text(source_dir() / "docs/timing.md");
  for (const auto& id : documented_misses) EXPECT_NE(doc.find(id), std::string::npos) << id << " not in docs/timing.md";
  for (const auto& r : rep->calibration) EXPECT_LT(std::abs(r.error_percent()), 5) << r.name;  // fit residuals
}

// The figures README and docs/timing.md quote: A100 35 of 36 within 15%, mean |error| 6.4%, max 15.6%;
// IPU 3 of 3, max 3.2%.
TEST(validation, summary_figures_are_the_quoted_ones) {
  auto rep = validate_timing_model();
  ASSERT_TRUE(rep);
  int a100 = 0, a100_within = 0, ipu = 0, ipu_within = 0;
  double a100_sum = 0, a100_max = 0, ipu_max = 0;
  for (const auto& r : rep->held_out) {
    const double e = std::abs(r.error_percent());
    if (r.unit == "ms") {
      ++a100, a100_within += r.within_tolerance(), a100_sum += e, a100_max = std::max(a100_max, e);
    } else {
      ++ipu, ipu_within += r.within_tolerance(), ipu_max = std::max(ipu_max, e);
    }
  }
  EXPECT_EQ(a100, 36);
  EXPECT_EQ(a100_within, 35);
  EXPECT_NEAR(a100_sum / a100, 6.4, 0.05);
  EXPECT_NEAR(a100_max, 15.6, 0.05);
  EXPECT_EQ(ipu, 3);
  EXPECT_EQ(ipu_within, 3);
  EXPECT_NEAR(ipu_max, 3.2, 0.05);
  const std::string md = validation_report_markdown(*rep);
  EXPECT_NE(md.find("held out, A100 rows (target 15%): 35 of 36 within target; mean |error| 6.4%, max 15.6%"),
            std::string::npos)
      << md;
  const std::string readme = read_text(source_dir() / "README.md");
  EXPECT_NE(readme.find("35 within 15%, mean |error| 6.4%"), std::string::npos);
  EXPECT_NE(readme.find("3 held-out C600 points (within 3.2%)"), std::string::npos);
}

TEST(validation, leave_one_out_refits_every_a100_calibration_row) {
  auto rep = validate_timing_model();
  ASSERT_TRUE(rep);
  ASSERT_EQ(rep->leave_one_out.size(), 4u);
  for (const auto& l : rep->leave_one_out) {
    EXPECT_EQ(l.fit.rows_used, 3) << l.left_out;
    EXPECT_NEAR(l.fit.tensor_core_efficiency, rep->a100_fit.tensor_core_efficiency,
                0.05 * rep->a100_fit.tensor_core_efficiency)
        << l.left_out;
    EXPECT_LT(std::abs(l.left_out_error_percent), 15) << l.left_out;
  }
}

TEST(validation, markdown_says_which_table_is_which) {
  auto rep = validate_timing_model();
  ASSERT_TRUE(rep);
  const std::string md = validation_report_markdown(*rep);
  const auto cal = md.find("## Calibration rows"), held = md.find("## Held-out rows"),
             loo = md.find("## Leave-one-out"), checks = md.find("## Preset checks");
  ASSERT_NE(cal, std::string::npos);
  ASSERT_NE(held, std::string::npos);
  EXPECT_LT(cal, held);
  EXPECT_LT(held, loo);
  EXPECT_LT(loo, checks);
  EXPECT_NE(md.find("a100-trt-bert-large-s384-b64"), std::string::npos);
  for (const auto& r : rep->preset_checks) EXPECT_TRUE(r.within_tolerance()) << r.name;
}

}  // namespace
}  // namespace tessera::timing
