// Full (unsplit) tensors <-> a ParameterStore's local slices: how importers and tests move
// whole weights into a tensor-parallel rank without knowing how each parameter is split.
#pragma once

#include <map>
#include <string>

#include "parallel/parameter.h"

namespace megatron {

// This rank's slice of `full` (a view): `full` has p.spec.full_shape. For an expert parameter
// its experts' rows of dim 0 too (ParameterStore::set_expert_grid).
Tensor local_slice(const Parameter& p, const Tensor& full);

// Copies each parameter's slice out of `full` (name -> f32 tensor of the full shape), and each
// persistent buffer `full` names (the routers' expert_bias; one it does not name keeps its
// value). Throws one Error listing every parameter that is missing or has another shape, every
// buffer of another shape, and every tensor in `full` that is neither. `full` may live on the host
// while the store lives on a GPU.
void assign_from_full_tensors(const std::map<std::string, Tensor>& full, ParameterStore& store);

}  // namespace megatron
