#include "core/error.h"

namespace megatron {

Error::Error(std::string message, const char* file, int line)
    : std::runtime_error(message), message_(std::move(message)), file_(file), line_(line) {}

}  // namespace megatron
