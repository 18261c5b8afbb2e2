// Loading errors: every corrupt, truncated or inconsistent folder gets a clear message naming the
// file, the tensor and the expected shape.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "tessera/models/model.hpp"
#include "tessera/models/safetensors.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {
namespace fs = std::filesystem;
using testing::data_dir;

class checkpoint_errors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("ckpt");
    for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"})
      fs::copy_file(data_dir() + "/tiny-odd/" + f, dir_ + "/" + f);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const char* name) const { return dir_ + "/" + name; }
  void edit_config(const std::function<void(nlohmann::json&)>& f) {
    auto j = nlohmann::json::parse(testing::read_file(file("config.json")));
    f(j);
    testing::write_file(file("config.json"), j.dump());
  }
  status load_error() {
    auto m = load_model(dir_);
    EXPECT_FALSE(m) << "loaded although broken";
    return m ? status{} : m.error();
  }
  std::string dir_;
};

void expect_mentions(const status& st, std::initializer_list<const char*> words) {
  for (const char* w : words) EXPECT_NE(st.message().find(w), std::string::npos) << "'" << w << "' not in: " << st.to_string();
}

TEST_F(checkpoint_errors, intact_copy_loads) {
  auto m = load_model(dir_);
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_TRUE(m->lower_case);
  ASSERT_NE(m->vocab, nullptr);
}

TEST_F(checkpoint_errors, truncated_safetensors) {
  const std::string bytes = testing::read_file(file("model.safetensors"));
  testing::write_file(file("model.safetensors"), bytes.substr(0, bytes.size() / 2));
  expect_mentions(load_error(), {"model.safetensors", "truncated", "tensor \""});
  testing::write_file(file("model.safetensors"), bytes.substr(0, 5));
  expect_mentions(load_error(), {"model.safetensors", "truncated"});
  testing::write_file(file("model.safetensors"), bytes.substr(0, 100));
  expect_mentions(load_error(), {"model.safetensors", "truncated"});
}

TEST_F(checkpoint_errors, corrupt_header) {
  std::string bytes = testing::read_file(file("model.safetensors"));
  bytes[9] = '#';
  testing::write_file(file("model.safetensors"), bytes);
  expect_mentions(load_error(), {"model.safetensors", "header"});
}

TEST_F(checkpoint_errors, wrong_shape_names_tensor_and_expected_shape) {
  edit_config([](nlohmann::json& j) { j["intermediate_size"] = 256; });
  expect_mentions(load_error(), {"model.safetensors", "encoder.layer.0.intermediate.dense.weight", "[200, 96]",
                                 "expected [256, 96]"});
}

TEST_F(checkpoint_errors, missing_tensor) {
  const std::string other = dir_ + "/other.safetensors";
  {
    auto st = map_safetensors(file("model.safetensors"));
    ASSERT_TRUE(st.ok());
    auto tensors = st->tensors;
    tensors.erase("bert.encoder.layer.1.attention.self.key.bias");
    ASSERT_TRUE(write_safetensors(other, tensors).ok());
  }  // unmapped before replacing the file
  fs::rename(other, file("model.safetensors"));
  expect_mentions(load_error(), {"model.safetensors", "missing tensor", "encoder.layer.1.attention.self.key.bias", "[96]"});
}

TEST_F(checkpoint_errors, missing_safetensors_file) {
  fs::remove(file("model.safetensors"));
  auto st = load_error();
  EXPECT_EQ(st.code(), errc::not_found);
  expect_mentions(st, {"model.safetensors"});
}

TEST_F(checkpoint_errors, bad_configs) {
  testing::write_file(file("config.json"), "{not json");
  expect_mentions(load_error(), {"config.json", "JSON"});
  fs::copy_file(data_dir() + "/tiny-odd/config.json", file("config.json"), fs::copy_options::overwrite_existing);
  edit_config([](nlohmann::json& j) { j.erase("hidden_size"); });
  expect_mentions(load_error(), {"config.json", "hidden_size"});
  edit_config([](nlohmann::json& j) { j["hidden_size"] = 96; j["num_attention_heads"] = 7; });
  expect_mentions(load_error(), {"config.json", "num_attention_heads 7"});
  edit_config([](nlohmann::json& j) { j["num_attention_heads"] = 6; j["num_labels"] = 2; });
  expect_mentions(load_error(), {"config.json", "num_labels 2", "id2label"});
  edit_config([](nlohmann::json& j) { j.erase("num_labels"); j["hidden_act"] = "swish"; });
  expect_mentions(load_error(), {"config.json", "swish"});
  edit_config([](nlohmann::json& j) { j["hidden_act"] = "gelu"; j["num_hidden_layers"] = "3"; });
  expect_mentions(load_error(), {"config.json", "num_hidden_layers", "integer"});
}

TEST_F(checkpoint_errors, bad_vocab) {
  testing::write_file(file("vocab.txt"), "[PAD]\n\xff\xfe\n");
  expect_mentions(load_error(), {"vocab.txt", "line 2", "UTF-8"});
}

TEST(checkpoint, not_a_folder_nor_preset) {
  auto m = load_model("/nonexistent/folder");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code(), errc::not_found);
  expect_mentions(m.error(), {"/nonexistent/folder", "bert-tiny"});
}

}  // namespace
}  // namespace tessera::models
