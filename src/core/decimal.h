// Floats shown as people wrote them: a float holds 0.1 as 0.100000001490116..., which JSON
// writers print in full. as_written(0.1f) is the double 0.1 — the shortest decimal that
// rounds to the same float — so config files say "0.1", as the user typed it.
#pragma once

namespace megatron {

double as_written(float value);

}  // namespace megatron
