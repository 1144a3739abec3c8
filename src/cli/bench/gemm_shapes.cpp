// GPT layer GEMM shapes (see gemm_shapes.h).
#include "cli/bench/gemm_shapes.h"

namespace megatron::cli {

std::vector<GemmShape> gpt_layer_gemm_shapes(int64_t tokens, int64_t hidden, int64_t ffn) {
  struct Linear {
    const char* name;
    int64_t in, out;
  };
  const Linear linears[] = {{"qkv", hidden, 3 * hidden},
                            {"proj", hidden, hidden},
                            {"fc1", hidden, ffn},
                            {"fc2", ffn, hidden}};
  std::vector<GemmShape> shapes;
  for (const Linear& l : linears) {
    const std::string n = l.name;
    shapes.push_back({n + ".fwd", tokens, l.out, l.in, false, true});  // X[T,in]·W[out,in]ᵀ
    shapes.push_back({n + ".dX", tokens, l.in, l.out, false, false});  // dY[T,out]·W[out,in]
    shapes.push_back({n + ".dW", l.out, l.in, tokens, true, false});   // dY[T,out]ᵀ·X[T,in]
  }
  return shapes;
}

}  // namespace megatron::cli
