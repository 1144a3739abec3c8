// Tensor views, slices, selects, transposes, strided copies, clones and their errors.
#include <gtest/gtest.h>

#include <numeric>

#include "core/tensor.h"

namespace megatron {
namespace {

// A contiguous f32 tensor holding 0, 1, 2, ... in row-major order.
Tensor iota(const Shape& shape) {
  std::vector<float> v(size_t(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.f);
  return Tensor::from_vector(v, shape);
}

TEST(Tensor, ContiguousBasics) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::BF16);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.describe(), "bf16[2, 3, 4]");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_FALSE(Tensor().defined());
}

TEST(Tensor, ViewSharesStorageAndInfersDimension) {
  Tensor t = iota({2, 6});
  Tensor v = t.view({3, -1});
  EXPECT_EQ(v.shape(), (Shape{3, 4}));
  v.data<float>()[5] = 100.f;
  EXPECT_EQ(t.data<float>()[5], 100.f);
  EXPECT_THROW(t.view({5, -1}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
  EXPECT_THROW(t.transpose(0, 1).view({12}), Error);  // not contiguous
}

TEST(Tensor, SliceSelectTranspose) {
  Tensor t = iota({3, 4, 5});
  Tensor s = t.slice(1, 1, 3);  // [3, 2, 5]
  EXPECT_EQ(s.shape(), (Shape{3, 2, 5}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.to_vector<float>()[0], 5.f);    // t[0, 1, 0]
  EXPECT_EQ(s.to_vector<float>()[10], 25.f);  // t[1, 1, 0]
  Tensor sel = t.select(2, 3);                // [3, 4], element [i, j] = 20i + 5j + 3
  EXPECT_EQ(sel.shape(), (Shape{3, 4}));
  const auto sv = sel.to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(sv[size_t(i * 4 + j)], float(20 * i + 5 * j + 3));
  Tensor tr = t.transpose(0, 2);  // [5, 4, 3], element [a, b, c] = t[c, b, a]
  const auto tv = tr.to_vector<float>();
  EXPECT_EQ(tv[size_t((2 * 4 + 1) * 3 + 1)], float(1 * 20 + 1 * 5 + 2));
  EXPECT_EQ(t.select(-1, 0).shape(), (Shape{3, 4}));
  EXPECT_THROW(t.slice(1, 3, 2), Error);
  EXPECT_THROW(t.slice(1, 0, 5), Error);
  EXPECT_THROW(t.select(0, 3), Error);
  EXPECT_THROW(t.transpose(0, 3), Error);
  EXPECT_THROW(t.size(3), Error);
}

TEST(Tensor, CopyFromStridedBothWays) {
  Tensor src = iota({4, 6});
  Tensor dst_full = Tensor::zeros({6, 8}, DType::F32);
  // Write the transpose of src into a strided window of dst_full.
  Tensor window = dst_full.slice(1, 2, 6);  // [6, 4], row stride 8
  window.copy_from(src.transpose(0, 1));
  const auto d = dst_full.to_vector<float>();
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 8; ++c) {
      const float expected = (c >= 2 && c < 6) ? float((c - 2) * 6 + r) : 0.f;
      EXPECT_EQ(d[size_t(r * 8 + c)], expected) << r << "," << c;
    }
  Tensor c = window.clone();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector<float>(), window.to_vector<float>());
  EXPECT_NE(c.raw_data(), window.raw_data());
  EXPECT_THROW(window.copy_from(src), Error);                              // shape
  EXPECT_THROW(src.copy_from(Tensor::zeros({4, 6}, DType::BF16)), Error);  // dtype
}

TEST(Tensor, DtypeChecksAndErrorsNameTheTensor) {
  Tensor t = Tensor::zeros({2, 2}, DType::F32);
  EXPECT_THROW(t.data<int32_t>(), Error);
  EXPECT_THROW(Tensor().raw_data(), Error);
  EXPECT_EQ(t.as_dtype(DType::I32).dtype(), DType::I32);
  EXPECT_THROW(t.as_dtype(DType::BF16), Error);
  try {
    check_shape(t, {3}, "my tensor");
    ADD_FAILURE() << "check_shape accepted a wrong shape";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("my tensor has shape [2, 2], expected [3]"), std::string::npos)
        << e.message();
  }
  EXPECT_THROW(check_dtype(t, DType::BF16, "t"), Error);
  EXPECT_THROW(check_contiguous(t.transpose(0, 1), "t"), Error);
  EXPECT_THROW(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}), Error);
}

TEST(Tensor, FromBlobBorrowsMemory) {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::from_blob(buf.data(), {2, 3}, DType::F32);
  t.data<float>()[4] = 50.f;
  EXPECT_EQ(buf[4], 50.f);
}

}  // namespace
}  // namespace megatron
