#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/tensor.h"

using namespace linnet;

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties go to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3·2^-8 is halfway between 1.0078125 (odd mantissa) and 1.015625: goes up to even.
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_EQ(f32_to_bf16(1.0040f), 0x3f81);  // above halfway rounds up
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity()))));
  // The largest finite float rounds up to infinity in bf16 (as torch does).
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::max()))));
}

TEST(DType, F16RoundTripAndRounding) {
  for (float v : {0.0f, 1.0f, -1.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, 0.333251953125f})
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // overflow → inf
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // tie → even
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_EQ(f32_to_f16(2.98023223876953125e-08f), 0x0000);  // half the smallest subnormal: tie → 0
  EXPECT_EQ(f32_to_f16(3.0e-08f), 0x0001);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST(DType, ExhaustiveBf16RoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h);
  }
}

TEST(DType, ExhaustiveF16RoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(DType, NamesParse) {
  for (DType t : {DType::bf16, DType::f16, DType::f32, DType::i32, DType::i64, DType::f8_e4m3})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(parse_dtype("BF16"), DType::bf16);
  EXPECT_EQ(parse_dtype("F8_E4M3"), DType::f8_e4m3);
  EXPECT_THROW(parse_dtype("F8_E5M2"), Error);
}

TEST(Tensor, ConvertAndViews) {
  Tensor t = Tensor::from_floats({2, 3}, {1, 2, 3, 4, 5, 6}, DType::bf16);
  EXPECT_EQ(t.describe(), "Tensor[2, 3; bf16]");
  auto r = t.rows(1, 2).to_floats();
  EXPECT_EQ(r, (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(t.reshape({3, 2}).rows(2, 3).to_floats(), (std::vector<float>{5, 6}));
  EXPECT_THROW(t.rows(1, 3), Error);
  EXPECT_THROW(t.reshape({4}), Error);
  auto i = Tensor::from_ints({2}, {7, -3}, DType::i64).to(DType::i32).to_ints();
  EXPECT_EQ(i, (std::vector<int64_t>{7, -3}));
}
