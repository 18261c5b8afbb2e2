// An in-process server for the HTTP tests: router + backends + http_server on a free port.
// It serves bert-tiny with the reference backend, or the toy model (test_server_options::toy).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tessera/backends/reference_backend.hpp"
#include "tessera/common/check.hpp"
#include "tessera/models/model.hpp"
#include "tessera/serving/http_server.hpp"
#include "tessera/serving/model_adapters.hpp"
#include "tessera/toys/toy_model.hpp"
#include "tessera/test/http_client.hpp"

namespace tessera::serving::test_support {
using namespace tessera::toys;

struct test_server_options {
  bool toy = false;                       ///< force the toy model
  batching_config batching{.kind = policy_kind::dynamic_padded, .max_batch_size = 32,
                           .max_queue_delay = std::chrono::milliseconds(1)};
  service_config api{};
  int replicas = 1;
  int backend_threads = 1;
  std::chrono::nanoseconds toy_per_token{0};
  int32_t toy_labels = 2;                 ///< labels of the toy model
  /// A preset or a folder, any encoder task (models::load_encoder): a classifier, a reranker or
  /// an embedding model.
  std::string model = "bert-tiny";
  models::dtype dtype = models::dtype::fp32;  ///< what the reference forward computes in
};

class test_server {
 public:
  explicit test_server(test_server_options o = {}) : router_(routing_config{}, default_clock(), &metrics_) {
    if (!o.toy) {
      auto loaded = models::load_encoder(o.model).value();
      TESSERA_CHECK(models::set_dtype(loaded, o.dtype).ok());
      model_ = std::make_shared<const models::bert_model>(std::move(loaded));
      tok_ = make_model_tokenizer(*model_).value();
      info_ = model_info_of(*model_, std::filesystem::path(o.model).filename().string());
      for (int i = 0; i < o.replicas; ++i)
        backends_.push_back(backends::make_reference_backend(
            model_, {.name = "ref" + std::to_string(i), .kind = "gpu", .threads = o.backend_threads}));
    }
    if (!tok_) {
      tok_ = make_toy_tokenizer();
      info_.model_id = "toy";
      for (int i = 0; i < o.replicas; ++i)
        backends_.push_back(make_toy_backend(
            {.name = "toy" + std::to_string(i), .kind = "gpu", .num_labels = o.toy_labels},
            o.backend_threads, o.toy_per_token));
    }
    for (auto& b : backends_)
      if (auto st = router_.add_backend(b, o.batching); !st.ok()) throw std::runtime_error("test server: " + st.to_string());
    router_.start();
    server_config sc;
    sc.port = 0;
    sc.api = o.api;
    server_ = std::make_unique<http_server>(sc, router_, tok_, info_, metrics_);
    status st = server_->start();
    TESSERA_CHECK(st.ok()) << st.to_string();
  }
  ~test_server() { stop(); }
  void stop() {
    if (server_) server_->stop();
    router_.stop();
  }

  uint16_t port() const { return server_->port(); }
  const tokenizer& tok() const { return *tok_; }
  const model_info& info() const { return info_; }
  backends::thread_pool_backend& backend(size_t i = 0) { return *backends_.at(i); }
  serving_metrics& metrics() { return metrics_; }
  http_server& server() { return *server_; }
  bool is_toy() const { return info_.model_id == "toy"; }

  /// The expected logits of a sequence computed alone (reference forward or toy model).
  std::vector<float> expected_logits(const backends::sequence_input& s) const {
    if (model_) return backends::reference_logits(*model_, s);
    return toy_logits(s, router_.num_labels());
  }

 private:
  serving_metrics metrics_;
  router router_;
  std::shared_ptr<const tokenizer> tok_;
  model_info info_;
  std::vector<std::shared_ptr<backends::thread_pool_backend>> backends_;
  std::unique_ptr<http_server> server_;
  std::shared_ptr<const models::bert_model> model_;
};

/// Batched forwards agree with a forward of the sequence alone to this absolute tolerance
/// (float32 GEMMs blocked differently for different batch shapes).
constexpr float logits_tolerance = 2e-4f;

/// A test suite around one test_server that the suite's SetUpTestSuite starts (start_server);
/// every test talks to it over a keep-alive connection of its own.
class server_suite : public ::testing::Test {
 protected:
  using http_response = ::tessera::test_support::http_response;

  static void start_server(const test_server_options& o) { server_ = new test_server(o); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  http_response post(const std::string& target, const std::string& body) { return conn_.request("POST", target, body); }
  http_response get(const std::string& target) { return conn_.request("GET", target); }

  static inline test_server* server_ = nullptr;
  ::tessera::test_support::http_connection conn_{"127.0.0.1", server_->port()};
};

}  // namespace tessera::serving::test_support
