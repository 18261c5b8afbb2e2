// The reference backend against models::reference_forward of each sequence alone, for packed and
// padded layouts (padded to the longest and wider), many batch shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <atomic>
#include <future>
#include <thread>

#include "tessera/backends/reference_backend.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/model.hpp"

using namespace tessera;
using namespace tessera::backends;

namespace {

// Batched forwards agree with a forward of the sequence alone to this absolute tolerance.
constexpr float tolerance = 2e-4f;

batch_result run(backend& b, batch_request req) {
  std::promise<batch_result> p;
  auto f = p.get_future();
  b.submit(std::move(req), [&p](batch_result r) { p.set_value(std::move(r)); });
  return f.get();
}

}  // namespace

TEST(ReferenceBackend, BatchedLogitsEqualEachSequenceAlone) {
  auto model = std::make_shared<const models::bert_model>(models::load_model("bert-tiny").value());
  auto backend = make_reference_backend(model, {.name = "ref0", .threads = 1});
  models::splitmix64 rng(7);
  float worst = 0;
  for (int trial = 0; trial < 24; ++trial) {
    batch_request req;
    req.batch_id = static_cast<uint64_t>(trial);
    int n = 1 + static_cast<int>(rng.uniform(0, 40));
    int longest = 0;
    for (int i = 0; i < n; ++i) {
      int len = static_cast<int>(rng.uniform(3, trial % 3 == 0 ? 200 : 60));
      sequence_input s;
      s.token_ids.push_back(101);
      for (int k = 0; k < len - 2; ++k) s.token_ids.push_back(static_cast<int32_t>(rng.uniform(1000, 30000)));
      s.token_ids.push_back(102);
      longest = std::max(longest, len);
      req.sequences.push_back(std::move(s));
    }
    req.layout = trial % 2 ? batch_layout::padded : batch_layout::packed;
    req.padded_length = trial % 4 == 1 ? 256 : longest;
    auto seqs = req.sequences;
    auto r = run(*backend, std::move(req));
    ASSERT_TRUE(r.st.ok()) << r.st.to_string();
    ASSERT_EQ(r.num_labels, 2);
    ASSERT_EQ(r.logits.size(), seqs.size() * 2);
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto want = reference_logits(*model, seqs[i]);
      for (int j = 0; j < 2; ++j) {
        float d = std::fabs(r.logits[i * 2 + j] - want[j]);
        worst = std::max(worst, d);
        EXPECT_LE(d, tolerance) << "trial " << trial << " seq " << i << " of " << seqs.size()
                                << " len " << seqs[i].token_ids.size() << " layout "
                                << (trial % 2 ? "padded" : "packed");
      }
    }
  }
  std::cout << "[ serving ] worst |batched - alone| = " << worst << "\n";
}

// Serialized forwards from many threads (backend workers and oracles) agree.
TEST(ReferenceBackend, BackendWithSeveralWorkersAgreesWithOracleUnderConcurrency) {
  auto model = std::make_shared<const models::bert_model>(models::load_model("bert-tiny").value());
  auto backend = make_reference_backend(model, {.name = "ref0", .threads = 3});
  models::splitmix64 rng(5);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 6; ++rep) {
        batch_request req;
        std::vector<sequence_input> seqs;
        for (int i = 0; i < 8; ++i) {
          sequence_input s{{101}, {}};
          for (int k = 0; k < 5 + 7 * i + t; ++k) s.token_ids.push_back(1000 + 37 * k + rep + i);
          s.token_ids.push_back(102);
          seqs.push_back(s);
        }
        req.sequences = seqs;
        auto r = run(*backend, std::move(req));
        if (!r.st.ok()) { mismatches++; continue; }
        for (size_t i = 0; i < seqs.size(); ++i) {
          auto want = reference_logits(*model, seqs[i]);
          if (std::fabs(r.logits[2 * i] - want[0]) > tolerance ||
              std::fabs(r.logits[2 * i + 1] - want[1]) > tolerance)
            mismatches++;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ReferenceBackend, InvalidTokenIdFailsTheBatchWithAStatus) {
  auto model = std::make_shared<const models::bert_model>(models::load_model("bert-tiny").value());
  auto backend = make_reference_backend(model);
  batch_request req;
  req.sequences.push_back({{101, 99999999, 102}, {}});
  auto r = run(*backend, std::move(req));
  EXPECT_FALSE(r.st.ok());
}

// Raw models::reference_forward from several threads at once gives the same logits as one at a
// time: the reference backend runs its workers' forwards in parallel on this. (It failed now and
// then before models' runtime-M matmul change; serialize_forwards is the switch if it regresses.)
TEST(ReferenceBackend, RawForwardsAreThreadSafe) {
  auto model = std::make_shared<const models::bert_model>(models::load_model("bert-tiny").value());
  std::vector<sequence_input> seqs;
  models::splitmix64 rng(11);
  for (int i = 0; i < 64; ++i) {
    sequence_input s{{101}, {}};
    int len = static_cast<int>(rng.uniform(3, 80));
    for (int k = 0; k < len - 2; ++k) s.token_ids.push_back(static_cast<int32_t>(rng.uniform(1000, 30000)));
    s.token_ids.push_back(102);
    seqs.push_back(std::move(s));
  }
  std::vector<std::vector<float>> want;
  for (auto& s : seqs) want.push_back(reference_logits(*model, s));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep)
        for (size_t i = static_cast<size_t>(t); i < seqs.size(); i += 2) {
          models::packed_batch b;
          b.append(seqs[i].token_ids, seqs[i].token_type_ids);
          auto got = models::reference_forward(*model, b);
          if (std::fabs(got[0] - want[i][0]) > tolerance || std::fabs(got[1] - want[i][1]) > tolerance)
            mismatches++;
        }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0) << "models::reference_forward is not thread-safe";
}

// A bf16 model answers packed and padded batches (padded to the longest and wider) with bf16
// logits: near fp32's (0.05, tests/models/bf16_test.cpp's bound) and never fp32's exactly.
TEST(ReferenceBackend, Bf16ModelAnswersPackedAndPaddedInBf16) {
  ASSERT_TRUE(models::check_dtype_supported(models::dtype::bf16).code() == tessera::errc::ok) << "the bf16 tests need avx512_bf16";
  auto fp32 = models::load_model("bert-tiny").value();
  auto bf16 = fp32;
  ASSERT_TRUE(models::set_dtype(bf16, models::dtype::bf16).code() == tessera::errc::ok);
  auto backend = make_reference_backend(std::make_shared<const models::bert_model>(bf16), {.name = "bf16"});
  batch_request req;
  for (int len : {5, 40, 130}) {
    sequence_input s;
    s.token_ids.push_back(101);
    for (int k = 0; k < len - 2; ++k) s.token_ids.push_back(2000 + 7 * k);
    s.token_ids.push_back(102);
    req.sequences.push_back(std::move(s));
  }
  for (auto [layout, padded_length] : {std::pair{batch_layout::packed, 0}, std::pair{batch_layout::padded, 130},
                                       std::pair{batch_layout::padded, 160}}) {
    req.layout = layout;
    req.padded_length = padded_length;
    auto r = run(*backend, req);
    ASSERT_TRUE(r.st.ok()) << r.st.to_string();
    ASSERT_EQ(r.logits.size(), 6u);
    bool differs = false;
    for (size_t i = 0; i < req.sequences.size(); ++i) {
      const auto want = reference_logits(fp32, req.sequences[i]);
      for (int j = 0; j < 2; ++j) {
        EXPECT_NEAR(r.logits[i * 2 + j], want[j], 0.05f) << "padded_length " << padded_length;
        differs |= r.logits[i * 2 + j] != want[j];
      }
    }
    EXPECT_TRUE(differs) << "bf16 backend answered fp32's logits exactly, padded_length " << padded_length;
  }
}
