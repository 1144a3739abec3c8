// The geometry of resharding on read (checkpoint/regions.h), on hand-built cases whose
// expected values come from index arithmetic written out here: a row-major range of a slice
// is the boxes it should be, and pieces cut by TP and DP boundaries fill a request cut by
// other boundaries exactly once.
#include <gtest/gtest.h>

#include <vector>

#include "checkpoint/regions.h"

namespace megatron {
namespace {

// Elements [3, 20) of a [4, 6] slice sitting at columns 6-11 of a [4, 12] tensor:
// row 0 columns [3, 6), rows 1-2 whole, row 3 columns [0, 2).
TEST(CheckpointRegions, RowMajorRangeOfASliceIsAPartialRowWholeRowsAndAPartialRow) {
  std::vector<float> data;
  for (int q = 3; q < 20; ++q) data.push_back(float(q));  // each element: its slice index
  const std::vector<PlacedBox> boxes =
      part_boxes({0, 6}, {{4, 6}, 3, 20}, Tensor::from_vector(data, {17}));
  ASSERT_EQ(boxes.size(), 3u);
  EXPECT_EQ(boxes[0].origin, (Shape{0, 9}));
  EXPECT_EQ(boxes[0].view.shape(), (Shape{1, 3}));
  EXPECT_EQ(boxes[1].origin, (Shape{1, 6}));
  EXPECT_EQ(boxes[1].view.shape(), (Shape{2, 6}));
  EXPECT_EQ(boxes[2].origin, (Shape{3, 6}));
  EXPECT_EQ(boxes[2].view.shape(), (Shape{1, 2}));
  for (const PlacedBox& b : boxes) {
    const std::vector<float> got = b.view.clone().to_vector<float>();
    for (int64_t i = 0; i < b.view.size(0); ++i)
      for (int64_t j = 0; j < b.view.size(1); ++j)
        EXPECT_EQ(got[size_t(i * b.view.size(1) + j)],
                  float((b.origin[0] + i) * 6 + (b.origin[1] + j - 6)))
            << "box at [" << b.origin[0] << ", " << b.origin[1] << "] element " << i << ", " << j;
  }
}

TEST(CheckpointRegions, WholeAndEmptyParts) {
  Tensor slice = Tensor::zeros({3, 4}, DType::F32);
  const std::vector<PlacedBox> whole = part_boxes({2, 0}, SlicePart::whole({3, 4}), slice);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].origin, (Shape{2, 0}));
  EXPECT_EQ(whole[0].view.shape(), (Shape{3, 4}));
  // A whole slice as 1-D data is one box too; an empty part has none.
  EXPECT_EQ(part_boxes({0, 0}, SlicePart::whole({3, 4}), slice.flatten()).size(), 1u);
  EXPECT_TRUE(part_boxes({0, 0}, {{3, 4}, 5, 5}, Tensor::zeros({0}, DType::F32)).empty());
}

// f(i, j, k) of a full [3, 4, 5] tensor.
float value(int64_t i, int64_t j, int64_t k) {
  return float(100 * i + 10 * j + k);
}

// Stored: two TP slices along dim 1 ([3, 2, 5] at columns 0 and 2), each cut by a DP boundary
// at its element 13 into two 1-D pieces. Requested: rows 1-2 ([2, 4, 5], a TP slice along
// dim 0 of another TP size), elements [7, 33) of them. Every requested element is filled from
// the one stored piece that holds it.
TEST(CheckpointRegions, PiecesCutByTensorAndDataParallelBoundariesFillAnotherCut) {
  struct Stored {
    int64_t column;  // the slice's first column
    int64_t begin, end;
  };
  std::vector<PlacedBox> from;
  std::vector<Tensor> keep;
  for (const Stored s :
       {Stored{0, 0, 13}, Stored{0, 13, 30}, Stored{2, 0, 13}, Stored{2, 13, 30}}) {
    std::vector<float> data;
    for (int64_t q = s.begin; q < s.end; ++q)  // slice [3, 2, 5]: q = i·10 + j·5 + k
      data.push_back(value(q / 10, s.column + (q / 5) % 2, q % 5));
    keep.push_back(Tensor::from_vector(data, {s.end - s.begin}));
    for (const PlacedBox& b :
         part_boxes({0, s.column, 0}, {{3, 2, 5}, s.begin, s.end}, keep.back()))
      from.push_back(b);
  }
  Tensor dst = Tensor::zeros({26}, DType::F32);
  int64_t covered = 0;
  for (const PlacedBox& to : part_boxes({1, 0, 0}, {{2, 4, 5}, 7, 33}, dst))
    for (const PlacedBox& f : from)
      if (overlaps(f, to)) covered += copy_overlap(f, to);
  EXPECT_EQ(covered, 26);
  const std::vector<float> got = dst.to_vector<float>();
  for (int64_t t = 0; t < 26; ++t) {
    const int64_t q = 7 + t;  // request [2, 4, 5]: q = i·20 + j·5 + k, rows from 1
    EXPECT_EQ(got[size_t(t)], value(1 + q / 20, (q / 5) % 4, q % 5)) << "element " << t;
  }
}

}  // namespace
}  // namespace megatron
