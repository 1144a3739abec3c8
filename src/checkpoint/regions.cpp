#include "checkpoint/regions.h"

#include <algorithm>
#include <cstring>

namespace megatron {
namespace {

// A box in slice coordinates.
struct Box {
  Shape start, extent;
};

// Appends the boxes of elements [lo, hi) of the sub-array shape[dim:] at fixed leading
// indices `prefix` (size dim) of a row-major slice.
void split_range(const Shape& shape, Shape prefix, int64_t lo, int64_t hi, std::vector<Box>& out) {
  if (lo >= hi) return;
  const size_t dim = prefix.size(), nd = shape.size();
  auto box = [&](Shape start, int64_t first, int64_t count) {
    start.push_back(first);
    Shape extent(start.size() - 1, 1);
    extent.push_back(count);
    for (size_t k = dim + 1; k < nd; ++k) {
      start.push_back(0);
      extent.push_back(shape[k]);
    }
    out.push_back({std::move(start), std::move(extent)});
  };
  if (dim + 1 == nd) return box(prefix, lo, hi - lo);
  int64_t inner = 1;
  for (size_t k = dim + 1; k < nd; ++k) inner *= shape[k];
  int64_t a = lo / inner;
  const int64_t b = hi / inner;
  auto at = [&](int64_t i) {
    Shape p = prefix;
    p.push_back(i);
    return p;
  };
  if (a == b) return split_range(shape, at(a), lo % inner, hi % inner, out);
  if (lo % inner != 0) split_range(shape, at(a++), lo % inner, inner, out);
  if (b > a) box(prefix, a, b - a);
  split_range(shape, at(b), 0, hi % inner, out);
}

// dst = src (same shape); rows along the last dimension are contiguous in both (slices of
// contiguous tensors), so copy them whole instead of element by element.
void copy_rows(Tensor& dst, const Tensor& src) {
  const int64_t nd = dst.dim();
  if (nd == 0 || dst.stride(nd - 1) != 1 || src.stride(nd - 1) != 1 ||
      (dst.is_contiguous() && src.is_contiguous())) {
    dst.copy_from(src);
    return;
  }
  const int64_t row = dst.size(nd - 1), rows = dst.numel() / std::max<int64_t>(row, 1);
  const size_t bytes = size_t(row) * dtype_size(dst.dtype());
  char* d = static_cast<char*>(dst.raw_data());
  const char* s = static_cast<const char*>(src.raw_data());
  const int64_t esize = int64_t(dtype_size(dst.dtype()));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t od = 0, os = 0;
    for (int64_t k = nd - 2, rem = r; k >= 0; --k) {
      const int64_t i = rem % dst.size(k);
      rem /= dst.size(k);
      od += i * dst.stride(k);
      os += i * src.stride(k);
    }
    std::memcpy(d + od * esize, s + os * esize, bytes);
  }
}

}  // namespace

std::vector<PlacedBox> part_boxes(const Shape& origin, const SlicePart& part, const Tensor& data) {
  MT_CHECK(origin.size() == part.shape.size() && 0 <= part.begin && part.begin <= part.end &&
               part.end <= shape_numel(part.shape),
           "part_boxes: elements [", part.begin, ", ", part.end, ") of a slice ",
           shape_str(part.shape), " at an origin of ", origin.size(), " dimensions");
  if (part.begin == part.end) return {};
  if (data.shape() == part.shape) {
    MT_CHECK(part.is_whole(), "part_boxes: data shaped like the slice for a part of it");
    return {{origin, data}};
  }
  MT_CHECK(data.dim() == 1 && data.numel() == part.end - part.begin && data.is_contiguous(),
           "part_boxes: data ", data.describe(), " for elements [", part.begin, ", ", part.end,
           ") of a slice ", shape_str(part.shape));
  std::vector<Box> boxes;
  if (part.shape.empty()) {
    boxes.push_back({{}, {}});  // a scalar: its one element
  } else {
    split_range(part.shape, {}, part.begin, part.end, boxes);
  }
  const Shape strides = contiguous_strides(part.shape);
  std::vector<PlacedBox> out;
  for (const Box& b : boxes) {
    int64_t first = 0;  // row-major index of the box's first element in the slice
    Shape at = origin;
    for (size_t k = 0; k < b.start.size(); ++k) {
      first += b.start[k] * strides[k];
      at[k] += b.start[k];
    }
    out.push_back({std::move(at), Tensor(data.storage(), data.offset() + first - part.begin,
                                         b.extent, strides, data.dtype())});
  }
  return out;
}

bool overlaps(const PlacedBox& a, const PlacedBox& b) {
  for (size_t k = 0; k < a.origin.size(); ++k)
    if (std::max(a.origin[k], b.origin[k]) >=
        std::min(a.origin[k] + a.view.size(k), b.origin[k] + b.view.size(k)))
      return false;
  return true;
}

int64_t copy_overlap(const PlacedBox& src, const PlacedBox& dst) {
  Tensor s = src.view, d = dst.view;
  for (size_t k = 0; k < src.origin.size(); ++k) {
    const int64_t lo = std::max(src.origin[k], dst.origin[k]);
    const int64_t hi = std::min(src.origin[k] + s.size(k), dst.origin[k] + d.size(k));
    if (hi <= lo) return 0;
    s = s.slice(k, lo - src.origin[k], hi - src.origin[k]);
    d = d.slice(k, lo - dst.origin[k], hi - dst.origin[k]);
  }
  copy_rows(d, s);
  return d.numel();
}

}  // namespace megatron
