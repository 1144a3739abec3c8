// Where stored and requested pieces of a tensor lie in the full (unsplit) tensor, and the copy
// of their overlap: the geometry of resharding on read (checkpoint/shards.h).
//
// A piece is a region of a tensor-parallel slice: the slice of shape `shape` whose first
// element sits at `origin` in the full tensor, or only elements [begin, end) of that slice in
// row-major order. The second kind is what the distributed optimizer stores: its data-parallel
// shards cut the flat parameter space anywhere, so one DP rank may hold a slice's tail and the
// next its head. Such a range is the union of at most 2·ndim − 1 boxes (a partial row, whole
// rows, a partial row, recursively over the dimensions), so every overlap — between pieces cut
// for any TP size, PP size and DP size — is a box intersection.
//
//   slice [4, 6], elements [3, 20):  row 0 [3, 6) | rows 1-2 whole | row 3 [0, 2)
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace megatron {

// Elements [begin, end), row-major, of a slice of shape `shape`.
struct SlicePart {
  Shape shape;
  int64_t begin = 0, end = 0;

  static SlicePart whole(const Shape& shape) { return {shape, 0, shape_numel(shape)}; }
  bool is_whole() const { return begin == 0 && end == shape_numel(shape); }
};

// A box of the full tensor and a view of its elements.
struct PlacedBox {
  Shape origin;  // in full-tensor coordinates
  Tensor view;   // [box extent], any strides
};

// The boxes of `part` of the slice at `origin`, as views of `data`, which holds the part's
// elements: either shaped like the whole slice (any strides; then the part is whole) or 1-D
// contiguous [end - begin]. Empty parts have no boxes.
std::vector<PlacedBox> part_boxes(const Shape& origin, const SlicePart& part, const Tensor& data);

// Whether the boxes share an element.
bool overlaps(const PlacedBox& a, const PlacedBox& b);
// Copies the elements of `src` that lie in `dst` (same dtype) into `dst`; returns how many.
int64_t copy_overlap(const PlacedBox& src, const PlacedBox& dst);

}  // namespace megatron
