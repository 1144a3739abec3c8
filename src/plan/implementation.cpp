#include "plan/implementation.h"

#include "core/error.h"

namespace megatron::plan {

const char* implementation_name(Implementation impl) {
  switch (impl) {
    case Implementation::kMegatronCpp:
      return "megatron-cpp";
    case Implementation::kMegatronLm:
      return "megatron-lm";
    case Implementation::kMegatronLm2019:
      return "megatron-lm-2019";
  }
  return "?";
}

Implementation implementation_from_name(const std::string& name) {
  for (Implementation impl :
       {Implementation::kMegatronCpp, Implementation::kMegatronLm, Implementation::kMegatronLm2019})
    if (name == implementation_name(impl)) return impl;
  MT_THROW("--implementation '", name,
           "' is not known: expected megatron-cpp (this project), megatron-lm (NVIDIA "
           "Megatron-LM today) or megatron-lm-2019 (the 2019 paper's code)");
}

}  // namespace megatron::plan
