#include "distributed/agreement.h"

#include <exception>
#include <optional>

#include "core/error.h"

namespace megatron {

void run_on_all_ranks(Communicator& world, const std::string& what,
                      const std::function<void()>& step) {
  std::optional<Error> error;
  try {
    step();
  } catch (const Error& e) {
    error.emplace(e);
  } catch (const std::exception& e) {
    error.emplace(std::string("unexpected error: ") + e.what(), __FILE__, __LINE__);
  }
  // The lowest failing rank reports: MAX over (size - rank) of the failing ranks.
  const int size = world.size();
  const double local = error ? double(size - world.rank()) : 0.0;
  const double max = world.all_reduce_scalar(local, ReduceOp::MAX);
  if (max == 0.0) return;
  const int reporting_rank = size - int(max);
  if (error && world.rank() == reporting_rank) {
    Error out(what.empty() ? error->message() : what + ": " + error->message(), error->file(),
              error->line(), error->failed_check());
    throw out.mark_collective(/*reporting=*/true);
  }
  Error out((what.empty() ? std::string("a step") : what) + " failed on rank " +
                std::to_string(reporting_rank) + " (see its error)",
            __FILE__, __LINE__);
  throw out.mark_collective(/*reporting=*/false);
}

void throw_collective_error(Communicator& world, int reporting_rank, const std::string& message) {
  Error out(message, __FILE__, __LINE__);
  throw out.mark_collective(world.rank() == reporting_rank);
}

}  // namespace megatron
