// The decoder step's metadata (models/step_meta.hpp): what the host writes the tile reads back,
// and whatever int32 values arrive, the reader either refuses them or every value it then hands
// out lies inside the tensor (random arrays, seeded; the ASan build checks the reads).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tessera/models/kernel_params.hpp"
#include "tessera/models/step_meta.hpp"

using namespace tessera;
using namespace tessera::models;

TEST(StepMeta, WhatTheHostWritesTheTileReads) {
  step_meta_writer w(4);
  const std::vector<int32_t> a{7, 3}, b{1, 2, 5, 6};
  w.add(17, true, a);
  w.add(0, false, b);
  auto m = step_meta_view::parse(w.data(), 2);
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(m->start(0), 17);
  EXPECT_TRUE(m->want(0));
  EXPECT_EQ(m->blocks(0), 2);
  EXPECT_EQ(m->table(0)[1], 3);
  EXPECT_EQ(m->start(1), 0);
  EXPECT_FALSE(m->want(1));
  EXPECT_EQ(m->blocks(1), 4);
  EXPECT_EQ(m->table(1)[3], 6);
  EXPECT_FALSE(step_meta_view::parse(w.data(), 3));  // the batch has another count of sequences
  std::vector<int32_t> cut(w.data().begin(), w.data().end() - 1);
  EXPECT_FALSE(step_meta_view::parse(cut, 2));  // one value short
}

TEST(StepMeta, RandomValuesAreRefusedOrReadInsideTheTensor) {
  std::mt19937_64 rng(20261205);
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const size_t n = rng() % 40;
    std::vector<int32_t> d(n);
    for (auto& x : d) {
      // Mostly small values (so some arrays parse), sometimes anything.
      x = rng() % 4 == 0 ? static_cast<int32_t>(rng()) : static_cast<int32_t>(rng() % 7) - 1;
    }
    if (n >= 2 && rng() % 2) d[0] = static_cast<int32_t>(rng() % 3);
    const int64_t seqs = n >= 1 ? d[0] : 0;
    auto m = step_meta_view::parse(d, seqs);
    if (!m) continue;
    ++accepted;
    int64_t sum = 0;
    for (int64_t s = 0; s < seqs; ++s) {
      sum += m->start(s) + (m->want(s) ? 1 : 0);
      for (int32_t b = 0; b < m->blocks(s); ++b) sum += m->table(s)[b];
    }
    (void)sum;
  }
  EXPECT_GT(accepted, 100);  // the test reached the accepting path, not only refusals
}

TEST(KernelParams, EveryKernelsStructReadsBackWhatItWrote) {
  dec_attention_params a{{2, 3}};
  a.q1 = 5, a.k1 = 1, a.window = 7, a.rotary = true, a.rope.theta = 1e6f;
  auto w = to_wire(a);
  EXPECT_EQ(w.ints.size(), 12u);  // ... and the rope kind
  EXPECT_EQ(w.reals.size(), 8u);
  dec_attention_params b;
  ASSERT_FALSE(from_wire(b, w.ints, w.reals).has_value());
  EXPECT_EQ(b.micro, 2u);
  EXPECT_EQ(b.window, 7u);
  EXPECT_FLOAT_EQ(b.rope.theta, 1e6f);
  EXPECT_FALSE(check_params(kernel_id::dec_attention, w.ints, w.reals).has_value());
  EXPECT_TRUE(check_params(kernel_id::dec_norm, w.ints, w.reals).has_value());  // another kernel's struct
  // Ranges: an unsigned field refuses a negative value, a boolean anything but 0 and 1.
  w.ints[2] = -1;
  EXPECT_TRUE(from_wire(b, w.ints, w.reals).has_value());
  w.ints[2] = 0;
  w.ints[9] = 2;
  auto err = from_wire(b, w.ints, w.reals);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("rotary"), std::string::npos) << *err;
  // Kernels without parameters take none.
  EXPECT_FALSE(check_params(kernel_id::add, {}, {}).has_value());
  const std::vector<int64_t> one{1};
  EXPECT_TRUE(check_params(kernel_id::add, one, {}).has_value());
}
