// Presets: the shipped files load and carry sources; mistakes give errors naming file and field.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tessera/timing/preset.hpp"

namespace tessera::timing {
namespace {

const char* good_ipu = R"({
  "kind": "ipu", "tiles": 8, "memory_bytes_per_tile": 1024, "clock_hz": 1e9,
  "fp16_flops_per_cycle_per_tile": 128, "fp32_flops_per_cycle_per_tile": 32,
  "exchange_bytes_per_cycle": 4, "global_sync_cycles": 100, "worker_contexts": 6,
  "calibration": {"compute_set_overhead_cycles": 10, "amp_efficiency": 0.5,
                  "exchange_efficiency": 1, "vector_bytes_per_cycle": 8}
})";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return s.replace(pos, from.size(), to);
}

TEST(preset, every_shipped_preset_loads_and_names_a_source_for_every_field) {
  auto names = list_presets();
  for (const char* want : {"ipu-mk2", "ipu-c600", "ipu-bow", "a100-40gb", "a100-80gb", "h100-sxm"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  const std::vector<std::string> ipu_fields = {
      "tiles", "memory_bytes_per_tile", "clock_hz", "fp16_flops_per_cycle_per_tile", "fp32_flops_per_cycle_per_tile",
      "exchange_bytes_per_cycle", "global_sync_cycles", "worker_contexts", "calibration.compute_set_overhead_cycles",
      "calibration.amp_efficiency", "calibration.exchange_efficiency", "calibration.vector_bytes_per_cycle"};
  const std::vector<std::string> gpu_fields = {
      "sms", "clock_hz", "fp16_tensor_flops_per_s", "fp32_flops_per_s", "hbm_bytes_per_s", "l2_bytes",
      "launch_overhead_s", "fusion", "calibration.tensor_core_efficiency", "calibration.fp32_efficiency",
      "calibration.hbm_efficiency"};
  for (const auto& name : names) {
    auto p = load_preset(name);
    ASSERT_TRUE(p) << p.error().to_string();
    if (auto* ipu = std::get_if<ipu_preset>(&*p)) {
      EXPECT_EQ(ipu->name, name);
      for (const auto& f : ipu_fields) EXPECT_TRUE(ipu->sources.count(f)) << name << " has no source for " << f;
    } else {
      const auto& gpu = std::get<gpu_preset>(*p);
      EXPECT_EQ(gpu.name, name);
      for (const auto& f : gpu_fields) EXPECT_TRUE(gpu.sources.count(f)) << name << " has no source for " << f;
    }
  }
}

TEST(preset, missing_field_names_file_and_field) {
  auto p = parse_preset(replace(good_ipu, R"("clock_hz": 1e9,)", ""), "mine.json");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code(), errc::invalid_argument);
  EXPECT_NE(p.error().message().find("mine.json"), std::string::npos) << p.error().message();
  EXPECT_NE(p.error().message().find("'clock_hz' is missing"), std::string::npos) << p.error().message();
}

TEST(preset, missing_calibration_field_names_its_path) {
  auto p = parse_preset(replace(good_ipu, R"("amp_efficiency": 0.5,)", ""), "mine.json");
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message().find("'calibration.amp_efficiency'"), std::string::npos) << p.error().message();
}

TEST(preset, wrong_type_names_file_field_and_types) {
  auto p = parse_preset(replace(good_ipu, R"("tiles": 8)", R"("tiles": "many")"), "mine.json");
  ASSERT_FALSE(p);
  const std::string& m = p.error().message();
  EXPECT_NE(m.find("mine.json"), std::string::npos) << m;
  EXPECT_NE(m.find("'tiles' has the wrong type (string"), std::string::npos) << m;
  EXPECT_NE(m.find("expected an integer"), std::string::npos) << m;
}

TEST(preset, non_positive_value_and_bad_kind_are_errors) {
  EXPECT_FALSE(parse_preset(replace(good_ipu, R"("clock_hz": 1e9)", R"("clock_hz": 0)"), "x.json"));
  auto k = parse_preset(replace(good_ipu, R"("kind": "ipu")", R"("kind": "tpu")"), "x.json");
  ASSERT_FALSE(k);
  EXPECT_NE(k.error().message().find("'kind'"), std::string::npos);
  EXPECT_FALSE(parse_preset("{ not json", "x.json"));
}

TEST(preset, good_text_parses) {
  auto p = parse_preset(good_ipu, "mine.json");
  ASSERT_TRUE(p) << p.error().to_string();
  const auto& ipu = std::get<ipu_preset>(*p);
  EXPECT_EQ(ipu.name, "mine");  // no "name": the file stem
  EXPECT_EQ(ipu.tiles, 8);
  EXPECT_DOUBLE_EQ(ipu.calibration.amp_efficiency, 0.5);
}

TEST(preset, unknown_name_lists_known_presets) {
  auto p = load_preset("ipu-mk9");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code(), errc::not_found);
  EXPECT_NE(p.error().message().find("ipu-mk2"), std::string::npos) << p.error().message();
  EXPECT_NE(p.error().message().find("a100-40gb"), std::string::npos) << p.error().message();
}

TEST(preset, kind_mismatch_is_invalid) {
  EXPECT_EQ(load_ipu_preset("a100-40gb").error().code(), errc::invalid_argument);
  EXPECT_EQ(load_gpu_preset("ipu-mk2").error().code(), errc::invalid_argument);
}

TEST(preset, user_file_by_path_and_by_presets_dir_override) {
  auto dir = std::filesystem::temp_directory_path() / ("tessera-presets-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tiny-ipu.json") << good_ipu;
  auto by_path = load_ipu_preset((dir / "tiny-ipu.json").string());
  ASSERT_TRUE(by_path) << by_path.error().to_string();
  EXPECT_EQ(by_path->tiles, 8);

  ::setenv("TESSERA_PRESETS_DIR", dir.c_str(), 1);
  EXPECT_EQ(presets_dir(), dir);
  auto by_name = load_ipu_preset("tiny-ipu");
  EXPECT_TRUE(by_name) << by_name.error().to_string();
  ::unsetenv("TESSERA_PRESETS_DIR");
  EXPECT_FALSE(load_ipu_preset("tiny-ipu"));  // back to the built-in folder
  std::filesystem::remove_all(dir);
}

TEST(preset, ipu_peaks_reproduce_published_figures) {
  auto mk2 = load_ipu_preset("ipu-mk2");
  ASSERT_TRUE(mk2);
  EXPECT_DOUBLE_EQ(mk2->peak_flops_per_s(dtype::fp16), 1472.0 * 128 * 1.33e9);
  EXPECT_EQ(mk2->memory_bytes(), 1472LL * 624 * 1024);
  EXPECT_DOUBLE_EQ(mk2->exchange_bytes_per_s(), 1472.0 * 4 * 1.33e9);
  for (const char* name : {"ipu-mk2", "ipu-c600", "ipu-bow"}) {
    auto p = load_ipu_preset(name);
    ASSERT_TRUE(p);
    ASSERT_TRUE(p->published.fp16_flops_per_s) << name;
    EXPECT_NEAR(p->peak_flops_per_s(dtype::fp16) / *p->published.fp16_flops_per_s, 1.0, 0.01) << name;
    ASSERT_TRUE(p->published.memory_bytes) << name;
    EXPECT_NEAR(double(p->memory_bytes()) / *p->published.memory_bytes, 1.0, 0.01) << name;
    if (p->published.fp32_flops_per_s) {
      EXPECT_NEAR(p->peak_flops_per_s(dtype::fp32) / *p->published.fp32_flops_per_s, 1.0, 0.01) << name;
    }
    if (p->published.exchange_bytes_per_s) {
      EXPECT_NEAR(p->exchange_bytes_per_s() / *p->published.exchange_bytes_per_s, 1.0, 0.03) << name;
    }
  }
}

TEST(preset, gpu_peaks_match_datasheets) {
  for (const char* name : {"a100-40gb", "a100-80gb", "h100-sxm"}) {
    auto p = load_gpu_preset(name);
    ASSERT_TRUE(p) << p.error().to_string();
    ASSERT_TRUE(p->published.fp16_flops_per_s);
    EXPECT_DOUBLE_EQ(p->fp16_tensor_flops_per_s, *p->published.fp16_flops_per_s);
    // dense fp16 tensor FLOP/cycle/SM: 2048 on A100, 4096 on H100
    double per_sm = p->fp16_tensor_flops_per_s / (double(p->sms) * p->clock_hz);
    EXPECT_NEAR(per_sm, std::string(name).starts_with("h100") ? 4096 : 2048, 25) << name;
  }
}

TEST(preset, power_and_price_are_optional_published_figures_with_sources) {
  auto text = replace(good_ipu, R"("kind": "ipu",)", R"("kind": "ipu", "published": {"tdp_watts": 185, "list_price_usd": 9000},)");
  auto p = parse_preset(text, "mine.json");
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(*std::get<ipu_preset>(*p).published.tdp_watts, 185);
  EXPECT_EQ(*std::get<ipu_preset>(*p).published.list_price_usd, 9000);
  auto bad = parse_preset(replace(good_ipu, R"("kind": "ipu",)", R"("kind": "ipu", "published": {"tdp_watts": "185 W"},)"),
                          "mine.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("published.tdp_watts"), std::string::npos) << bad.error().message();
  for (const char* name : {"a100-40gb", "a100-80gb", "h100-sxm", "ipu-c600", "ipu-mk2", "ipu-bow"}) {  // each with a source
    auto q = load_preset(name);
    ASSERT_TRUE(q);
    std::visit([&](const auto& x) {
      ASSERT_TRUE(x.published.tdp_watts) << name;
      EXPECT_FALSE(x.sources.at("published.tdp_watts").empty()) << name;
      if (x.published.list_price_usd) EXPECT_FALSE(x.sources.at("published.list_price_usd").empty()) << name;
    }, *q);
  }
}

}  // namespace
}  // namespace tessera::timing
