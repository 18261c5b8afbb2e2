// The elementary kernels against plain loops, and the int8 linear against a double sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tessera/models/bf16.hpp"
#include "tessera/models/kernels_int8.hpp"
#include "tessera/tile/kernel_registry.hpp"

using namespace tessera;
using namespace tessera::tile;
using exchange::kernel_call;

namespace {
struct fixture {
  tile_memory mem{0, 1 << 20};
  kernel_registry reg = kernel_registry::with_builtins();
  kernel_context ctx;
  float* make(uint32_t id, std::vector<int64_t> shape, std::vector<float> values = {}) {
    auto t = mem.allocate({id, "t" + std::to_string(id), exchange::dtype::f32, shape});
    EXPECT_TRUE(t);
    for (size_t i = 0; i < values.size(); ++i) (*t)->f32()[i] = values[i];
    return (*t)->f32();
  }
};
}  // namespace

TEST(Kernels, CopyAddScaleReduce) {
  fixture f;
  f.make(1, {4}, {1, 2, 3, 4});
  f.make(2, {4}, {10, 20, 30, 40});
  float* o = f.make(3, {4});
  ASSERT_TRUE(f.reg.run({models::kernel_id::add, {1, 2}, {3}, {}, {}}, f.mem, f.ctx).ok());
  EXPECT_EQ(o[3], 44.f);
  ASSERT_TRUE(f.reg.run({models::kernel_id::scale, {1}, {3}, {}, {0.5f}}, f.mem, f.ctx).ok());
  EXPECT_EQ(o[1], 1.f);
  ASSERT_TRUE(f.reg.run({models::kernel_id::reduce_sum, {1, 2, 1}, {3}, {}, {}}, f.mem, f.ctx).ok());
  EXPECT_EQ(o[2], 36.f);
  ASSERT_TRUE(f.reg.run({models::kernel_id::copy, {2}, {3}, {}, {}}, f.mem, f.ctx).ok());
  EXPECT_EQ(o[0], 10.f);
}

TEST(Kernels, MatmulMatchesLoops) {
  fixture f;
  const int M = 37, K = 19, N = 23;
  std::vector<float> a(M * K), b(K * N);
  for (int i = 0; i < M * K; ++i) a[i] = float((i * 7) % 11) - 5;
  for (int i = 0; i < K * N; ++i) b[i] = float((i * 5) % 13) - 6;
  f.make(1, {M, K}, a);
  f.make(2, {K, N}, b);
  float* c = f.make(3, {M, N});
  ASSERT_TRUE(f.reg.run({models::kernel_id::matmul, {1, 2}, {3}, {0}, {}}, f.mem, f.ctx).ok());
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += a[i * K + k] * b[k * N + j];
      ASSERT_NEAR(c[i * N + j], s, 1e-4) << i << "," << j;  // small integers: exact in fp32
    }
}

TEST(Kernels, ShapeMistakesAreStatusesNotCrashes) {
  fixture f;
  f.make(1, {4, 3});
  f.make(2, {4, 3});
  f.make(3, {4, 3});
  f.make(4, {5});
  auto st = f.reg.run({models::kernel_id::matmul, {1, 2}, {3}, {0}, {}}, f.mem, f.ctx);
  EXPECT_EQ(st.code(), errc::invalid_argument);
  EXPECT_NE(st.message().find("matmul"), std::string::npos);
  EXPECT_FALSE(f.reg.run({models::kernel_id::add, {1, 4}, {3}, {}, {}}, f.mem, f.ctx).ok());
  EXPECT_EQ(f.reg.run({models::kernel_id::add, {1, 77}, {3}, {}, {}}, f.mem, f.ctx).code(), errc::not_found);
  EXPECT_EQ(f.reg.run({models::kernel_id::layer_norm, {1}, {3}, {}, {}}, f.mem, f.ctx).code(), errc::not_found);
  EXPECT_FALSE(f.reg.check({models::kernel_id::add, {1}, {3}, {}, {}}).ok());  // arity
  EXPECT_FALSE(f.reg.run({models::kernel_id::scale, {1}, {3}, {}, {}}, f.mem, f.ctx).ok());  // missing factor
}

// A call whose parameters do not fit the kernel's struct is refused at load (check) and at run,
// naming the field, before the kernel touches a tensor.
TEST(Kernels, ParametersThatDoNotFitTheKernelsStructAreRefused) {
  fixture f;
  f.make(1, {2, 2}, {1, 2, 3, 4});
  f.make(2, {2, 2}, {1, 0, 0, 1});
  f.make(3, {2, 2});
  const exchange::kernel_call missing{models::kernel_id::scale, {1}, {3}, {}, {}};
  EXPECT_FALSE(f.reg.check(missing).ok());
  const exchange::kernel_call not_bool{models::kernel_id::matmul, {1, 2}, {3}, {2}, {}};
  status st = f.reg.check(not_bool);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("accumulate"), std::string::npos) << st.to_string();
  st = f.reg.run(not_bool, f.mem, f.ctx);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("accumulate"), std::string::npos) << st.to_string();
  EXPECT_TRUE(f.reg.check(exchange::make_call<models::kernel_id::scale>({1}, {3}, {0.5f})).ok());
}

// dec_reduce (a decoder's all-reduce): on every row of its micro-batch, the lanes' partial sums
// added in lane order, then the bias, then added to x; rows of other micro-batches untouched. The
// values make the order visible: (1e8 + -1e8) + 1 = 1, while 1e8 + (-1e8 + 1) = 0 in fp32.
TEST(Kernels, DecReduceSumsTheLanesInLaneOrderThenBiasThenResidual) {
  fixture f;
  const int64_t T = 6, H = 5;
  std::vector<float> p0(T * H), p1(T * H), p2(T * H), x(T * H), bias(H);
  for (int64_t i = 0; i < T * H; ++i) {
    p0[i] = 1e8f + float(i % 3);
    p1[i] = -1e8f;
    p2[i] = 1.0f + 0.25f * float(i % 7);
    x[i] = 0.5f * float(i) - 3;
  }
  for (int64_t j = 0; j < H; ++j) bias[j] = 0.125f * float(j) - 0.25f;
  f.make(1, {T, H}, p0);
  f.make(2, {T, H}, p1);
  f.make(3, {T, H}, p2);
  float* out = f.make(4, {T, H}, x);
  f.make(5, {H}, bias);
  exchange::batch_rows rows;
  rows.active_tokens = T;
  rows.seq_offsets = {0, 1, 2, 4, 6};  // 4 sequences: micro-batch 1 of 2 holds the last 2
  f.ctx.rows = &rows;
  const auto micro = rows.micro_rows(1, 2);
  ASSERT_LT(micro.begin, micro.end);
  ASSERT_GT(micro.begin, 0);  // rows of micro-batch 0 stay as they were
  const models::dec_reduce_params prm{{1, 2}, 3};
  ASSERT_TRUE(f.reg.run(exchange::make_call<models::kernel_id::dec_reduce>({1, 2, 3, 4, 5}, {4}, prm), f.mem, f.ctx).ok());
  for (int64_t r = 0; r < T; ++r)
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = r * H + j;
      float s = p0[i] + p1[i];
      s = s + p2[i];
      s = s + bias[j];
      const float want = r >= micro.begin && r < micro.end ? x[i] + s : x[i];
      ASSERT_EQ(out[i], want) << "row " << r << " column " << j;
    }
  // Without a bias; and a call whose inputs do not match its lanes is refused.
  ASSERT_TRUE(f.reg.run(exchange::make_call<models::kernel_id::dec_reduce>({1, 2, 3, 4}, {4}, prm), f.mem, f.ctx).ok());
  EXPECT_EQ(f.reg.run(exchange::make_call<models::kernel_id::dec_reduce>({1, 2, 4}, {4}, prm), f.mem, f.ctx).code(),
            errc::invalid_argument);
}

// An int8 BERT's linear (an i8 W with its scales tensor [x scale, y scale, w_scale per row]):
// an f32 x quantized with the input scale, fp32 out against a double sum of the same integers
// times the scales plus the bias; an i8 x used as it is and a GELU output requantized to i8 equal
// to models::linear's; the mistakes a program could make refused as statuses; every kernel but
// linear refuses an i8 tensor.
TEST(Kernels, Int8LinearAgainstADoubleSumAndI8RefusedElsewhere) {
  ASSERT_TRUE(models::check_dtype_supported(models::dtype::int8).ok()) << "the int8 kernels need avx512_vnni";
  fixture f;
  const int64_t T = 37, in = 40, out = 24;
  exchange::batch_rows rows;
  rows.active_tokens = T;
  rows.seq_offsets = {0, 20, static_cast<int32_t>(T)};
  f.ctx.rows = &rows;
  f.ctx.seq_offsets = rows.seq_offsets;
  auto i8 = [&](uint32_t id, std::vector<int64_t> shape) {
    auto t = f.mem.allocate({id, "t" + std::to_string(id), exchange::dtype::i8, shape});
    EXPECT_TRUE(t);
    return reinterpret_cast<int8_t*>((*t)->data);
  };
  std::vector<float> x(T * in), scales(2 + out), bias(out);
  for (int64_t i = 0; i < T * in; ++i) x[i] = float((i * 37) % 101 - 50) / 40.0f;
  const float xs = 1.25f / 127, ys = 0.02f;
  scales[0] = xs;
  scales[1] = 0;  // fp32 out
  for (int64_t n = 0; n < out; ++n) scales[2 + n] = 0.001f * float(n + 1), bias[n] = 0.1f * float(n % 5) - 0.2f;
  f.make(1, {T, in}, x);
  int8_t* w = i8(2, {out, in});
  for (int64_t i = 0; i < out * in; ++i) w[i] = static_cast<int8_t>((i * 29) % 255 - 127);
  f.make(3, {2 + out}, scales);
  f.make(4, {out}, bias);
  float* y = f.make(5, {T, out});
  using models::kernel_id;
  ASSERT_TRUE(f.reg.run(exchange::make_call<kernel_id::linear>({1, 2, 3, 4}, {5}, {{0, 1}, models::activation::none}), f.mem,
                        f.ctx).ok());
  std::vector<int8_t> xq(T * in);
  models::quantize(x.data(), T, in, xs, xq.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < out; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < in; ++k) acc += double(xq[t * in + k]) * double(w[n * in + k]);
      const double want = acc * double(xs) * double(scales[2 + n]) + double(bias[n]);
      ASSERT_NEAR(y[t * out + n], want, 1e-5 * std::max(1.0, std::fabs(want))) << t << "," << n;
    }
  // An i8 input (the FFN activation) as it is, and an i8 GELU output requantized with y's scale.
  int8_t* xi = i8(6, {T, in});
  std::copy(xq.begin(), xq.end(), xi);
  int8_t* yq = i8(7, {T, out});
  scales[1] = ys;
  f.make(8, {2 + out}, scales);
  ASSERT_TRUE(f.reg.run(exchange::make_call<kernel_id::linear>({6, 2, 8, 4}, {7}, {{0, 1}, models::activation::gelu_erf}),
                        f.mem, f.ctx).ok());
  std::vector<int8_t> want(T * out);
  models::linear(xq.data(), T, xs, models::int8_weight::view(w, scales.data() + 2, out, in), bias.data(), ys, want.data(),
                 models::activation::gelu_erf);
  EXPECT_EQ(std::vector<int8_t>(yq, yq + T * out), want);
  // Mistakes: an i8 output without its scale, a scales tensor of the wrong length, four inputs
  // beside an f32 W, an i8 tensor given to another kernel.
  f.make(9, {2 + out}, {xs, 0});
  status st = f.reg.run(exchange::make_call<kernel_id::linear>({6, 2, 9}, {7}, {{0, 1}, models::activation::none}), f.mem, f.ctx);
  EXPECT_EQ(st.code(), errc::invalid_argument) << st.to_string();
  EXPECT_NE(st.message().find("an int8 output needs one > 0"), std::string::npos) << st.to_string();
  f.make(10, {out}, {});
  st = f.reg.run(exchange::make_call<kernel_id::linear>({1, 2, 10}, {5}, {{0, 1}, models::activation::none}), f.mem, f.ctx);
  EXPECT_NE(st.message().find("must be f32 [2 + 24]"), std::string::npos) << st.to_string();
  f.make(11, {out, in});
  st = f.reg.run(exchange::make_call<kernel_id::linear>({1, 11, 3, 4}, {5}, {{0, 1}, models::activation::none}), f.mem, f.ctx);
  EXPECT_NE(st.message().find("a scales tensor only beside an int8 W"), std::string::npos) << st.to_string();
  st = f.reg.run({kernel_id::copy, {6}, {1}, {}, {}}, f.mem, f.ctx);
  EXPECT_EQ(st.code(), errc::unsupported) << st.to_string();
  EXPECT_NE(st.message().find("does not take int8 tensors ('t6')"), std::string::npos) << st.to_string();
}
