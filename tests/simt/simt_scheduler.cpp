// The SIMT emulator's scheduler (contract: simt_emulator.h): CUDA threads as fibers on the
// calling OS thread, barriers released when every thread they name has arrived.
//
// Fibers switch by a dozen instructions of assembly (save the callee-saved registers, swap
// stack pointers) rather than ucontext's swapcontext, which makes a system call (the signal
// mask) per switch: a launch runs each CUDA thread as a fiber, a million per 2^20-element
// kernel, and with swapcontext the switches cost more than the kernels' work.
#include <sys/mman.h>

#if !defined(__x86_64__)
#error "the SIMT emulator's context switch (simt_scheduler.cpp) is written for x86-64"
#endif

#include <exception>
#include <string>
#include <vector>

#include "simt_device_memory.h"
#include "simt_emulator.h"

// switch_stack(&from, to): saves the callee-saved registers on the current stack, stores the
// stack pointer in *from, loads `to` and returns into whatever that stack was saved with.
extern "C" void megatron_simt_switch_stack(void** from, void* to);
asm(R"(
  .text
  .globl megatron_simt_switch_stack
  .type megatron_simt_switch_stack, @function
megatron_simt_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size megatron_simt_switch_stack, .-megatron_simt_switch_stack
)");

namespace megatron::simt {

namespace {

// 256 KiB per CUDA thread, committed lazily by the kernel; the lowest page is a guard, so a
// stack overflow faults instead of corrupting the neighbouring fiber.
constexpr size_t kStackBytes = 256 << 10;
constexpr size_t kGuardBytes = 4096;

enum class State { kReady, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  void* sp = nullptr;  // saved stack pointer while the fiber is not running
  char* stack = nullptr;
  State state = State::kDone;
};

// Fibers and their stacks, kept from launch to launch (mapping stacks is the expensive part).
struct Scheduler {
  void* home = nullptr;  // the scheduler's stack pointer while a fiber runs
  std::vector<Fiber> fibers;
  std::vector<uint64_t> exchange;
  std::vector<unsigned char> shared;  // dynamic shared memory, 128 bytes of slack to align
  unsigned current = 0;
  const std::function<void()>* kernel = nullptr;
  std::exception_ptr error;
  bool any = false;  // block_barrier_or's accumulator
  bool running = false;
  // cp.async: each thread's copies not yet waited for, by commit group (the last one open).
  struct Copy {
    void* to;
    const void* from;
    size_t bytes;
  };
  std::vector<std::vector<std::vector<Copy>>> async_groups;
  bool copies_land_at_once = false;  // this block's policy (see async_copy)

  ~Scheduler() {
    for (Fiber& f : fibers)
      if (f.stack) munmap(f.stack, kStackBytes);
  }

  void reserve(unsigned threads) {
    while (fibers.size() < threads) {
      Fiber f;
      void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
      MT_CHECK(p != MAP_FAILED, "simt: cannot map a fiber stack of ", kStackBytes, " bytes");
      MT_CHECK(mprotect(p, kGuardBytes, PROT_NONE) == 0, "simt: cannot protect a guard page");
      f.stack = static_cast<char*>(p);
      fibers.push_back(f);
    }
    exchange.assign(threads, 0);
    async_groups.resize(threads);
  }

  // Back to the scheduler, the running fiber now in `state`.
  void yield(State state) {
    MT_CHECK(running, "simt: a barrier outside a kernel");
    Fiber& f = fibers[current];
    f.state = state;
    megatron_simt_switch_stack(&f.sp, home);
  }
};

Scheduler& scheduler() {
  static Scheduler s;
  return s;
}

void set_thread_index(unsigned t) {
  thread_index.x = t % block_dim.x;
  thread_index.y = (t / block_dim.x) % block_dim.y;
  thread_index.z = t / (block_dim.x * block_dim.y);
}

// A fiber's first frame: entered by the `ret` of a switch, never returns (it has no caller).
[[noreturn]] void fiber_main() {
  Scheduler& s = scheduler();
  try {
    (*s.kernel)();
  } catch (...) {
    if (!s.error) s.error = std::current_exception();
  }
  Fiber& f = s.fibers[s.current];
  f.state = State::kDone;
  megatron_simt_switch_stack(&f.sp, s.home);
  __builtin_unreachable();
}

// A fresh stack for fiber_main: six zeroed register slots, then fiber_main's address for the
// switch's `ret`, then a null return address for fiber_main itself, 16-byte aligned as after a
// call (the ABI's rsp % 16 == 8 at function entry).
void* fresh_stack(char* stack) {
  auto* top = reinterpret_cast<uintptr_t*>(stack + kStackBytes);
  *--top = 0;
  *--top = reinterpret_cast<uintptr_t>(&fiber_main);
  for (int r = 0; r < 6; ++r) *--top = 0;
  return top;
}

std::string describe_states(const Scheduler& s, unsigned threads) {
  std::string out;
  int counts[4] = {0, 0, 0, 0};
  for (unsigned t = 0; t < threads; ++t) ++counts[int(s.fibers[t].state)];
  return detail::concat(counts[1], " threads at __syncthreads, ", counts[2], " at a warp barrier, ",
                        counts[3], " returned");
}

// Runs one block to completion, one block-barrier interval at a time. Within an interval the
// warps run one after the other, each all the way to its next __syncthreads (or its end) before
// the next starts: the largest skew between warps that a GPU may produce, so that a warp reading
// a tile another warp has not yet written, or overwriting one another warp has not yet read,
// gets a wrong value. A warp's lanes run in turn up to each warp barrier, which opens when all
// 32 have arrived. `descending` runs the warps, and the lanes of each, from the last to the
// first: blocks alternate, so that a race between two threads of one interval shows in one
// order or the other instead of being hidden by a fixed one.
void run_block(Scheduler& s, unsigned threads, bool descending) {
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = s.fibers[t];
    f.sp = fresh_stack(f.stack);
    f.state = State::kReady;
    s.async_groups[t].assign(1, {});
  }
  s.copies_land_at_once = descending;
  const unsigned warps = threads / 32;
  for (;;) {
    for (unsigned wi = 0; wi < warps; ++wi) {
      const unsigned w = descending ? warps - 1 - wi : wi;
      for (;;) {
        for (unsigned i = 0; i < 32; ++i) {
          const unsigned t = w * 32 + (descending ? 31 - i : i);
          if (s.fibers[t].state != State::kReady) continue;
          s.current = t;
          set_thread_index(t);
          megatron_simt_switch_stack(&s.home, s.fibers[t].sp);
        }
        if (s.error) return;  // the fibers' stacks are reused as they are
        int waiting = 0;
        for (unsigned t = w * 32; t < w * 32 + 32; ++t)
          waiting += s.fibers[t].state == State::kAtWarpBarrier;
        if (waiting == 0) break;  // the warp is at __syncthreads or done
        MT_CHECK(waiting == 32, "simt: warp ", w, " of block (", block_index.x, ", ", block_index.y,
                 ", ", block_index.z, "): ", waiting,
                 " lanes wait at a warp barrier (__syncwarp or a shuffle) that the other ",
                 32 - waiting, " never reach (", describe_states(s, threads), ")");
        for (unsigned t = w * 32; t < w * 32 + 32; ++t) s.fibers[t].state = State::kReady;
      }
    }
    int at_block = 0, done = 0;
    for (unsigned t = 0; t < threads; ++t) {
      at_block += s.fibers[t].state == State::kAtBlockBarrier;
      done += s.fibers[t].state == State::kDone;
    }
    if (done == int(threads)) return;
    MT_CHECK(at_block == int(threads), "simt: block (", block_index.x, ", ", block_index.y, ", ",
             block_index.z, "): a __syncthreads that not every thread reaches (",
             describe_states(s, threads), ")");
    for (unsigned t = 0; t < threads; ++t) s.fibers[t].state = State::kReady;
  }
}

}  // namespace

void launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& kernel) {
  Scheduler& s = scheduler();
  MT_CHECK(!s.running, "simt: a kernel launched from inside a kernel");
  const unsigned threads = block.x * block.y * block.z;
  MT_CHECK(threads % 32 == 0 && threads > 0 && threads <= 1024, "simt: a block of ", block.x, " x ",
           block.y, " x ", block.z, " threads (the emulator takes whole warps, <= 1024)");
  MT_CHECK(grid.x > 0 && grid.y > 0 && grid.z > 0, "simt: an empty grid");
  s.reserve(threads);
  s.shared.resize(shared_bytes + 128);
  grid_dim = grid;
  block_dim = block;
  s.kernel = &kernel;
  s.error = nullptr;
  s.running = true;
  DeviceAccess access;  // kernels read and write device memory
  try {
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          block_index = {x, y, z};
          // Garbage, as on a GPU: NaN-like in bf16 and f32.
          std::memset(dynamic_shared_memory(), 0xA5, shared_bytes);
          run_block(s, threads, (x + y + z) % 2 == 1);
          if (s.error) std::rethrow_exception(s.error);
        }
  } catch (...) {
    s.running = false;
    throw;
  }
  s.running = false;
}

bool may_be_shared_memory(const void* p) {
  const Scheduler& s = scheduler();
  const auto* c = static_cast<const char*>(p);
  if (c >= reinterpret_cast<const char*>(s.shared.data()) &&
      c < reinterpret_cast<const char*>(s.shared.data() + s.shared.size()))
    return true;  // the block's dynamic shared memory
  for (const Fiber& f : s.fibers)
    if (c >= f.stack && c < f.stack + kStackBytes) return false;  // a thread's local memory
  return !is_device_memory(p, 1);  // global memory is not; static __shared__ may be
}

unsigned char* dynamic_shared_memory() {
  Scheduler& s = scheduler();
  const uintptr_t p = reinterpret_cast<uintptr_t>(s.shared.data());
  return s.shared.data() + ((128 - p % 128) % 128);
}

void block_barrier() {
  scheduler().yield(State::kAtBlockBarrier);
}

void warp_barrier() {
  scheduler().yield(State::kAtWarpBarrier);
}

uint64_t* exchange_slots() {
  return scheduler().exchange.data();
}

bool block_barrier_or(bool predicate) {
  Scheduler& s = scheduler();
  // Thread 0 resets the accumulator between two barriers (every thread has read the previous
  // result), then every thread contributes, then all read it.
  block_barrier();
  const unsigned t = linear_thread();
  if (t == 0) s.any = false;
  block_barrier();
  if (predicate) s.any = true;
  block_barrier();
  return s.any;
}

// cp.async: an asynchronous copy may land at any moment between its issue and the wait that
// covers it. Blocks alternate between the two extremes — at once (odd blocks, which run their
// threads last to first) and at the wait (even blocks) — so that reading a tile before waiting
// for it, and overwriting a tile other threads still read before a barrier, each give a wrong
// result in one of them.
void async_copy(void* to, const void* from, size_t bytes) {
  MT_CHECK(reinterpret_cast<uintptr_t>(to) % bytes == 0 &&
               reinterpret_cast<uintptr_t>(from) % bytes == 0,
           "cp.async: a ", bytes, "-byte copy from ", from, " to ", to,
           " is not aligned to its size (the hardware faults)");
  MT_CHECK(may_be_shared_memory(to), "cp.async: the destination ", to,
           " is not shared memory (it is a thread's local or the device's global memory)");
  Scheduler& s = scheduler();
  if (s.copies_land_at_once)
    std::memcpy(to, from, bytes);
  else
    s.async_groups[s.current].back().push_back({to, from, bytes});
}

void async_copy_commit() {
  Scheduler& s = scheduler();
  s.async_groups[s.current].emplace_back();
}

void async_copy_wait(int newest_pending) {
  Scheduler& s = scheduler();
  auto& groups = s.async_groups[s.current];
  // The open group (not committed) is not waited for; of the committed ones, all but the
  // newest `newest_pending` land.
  const size_t committed = groups.size() - 1;
  const size_t landing = committed > size_t(newest_pending) ? committed - newest_pending : 0;
  for (size_t g = 0; g < landing; ++g)
    for (const Scheduler::Copy& c : groups[g]) std::memcpy(c.to, c.from, c.bytes);
  groups.erase(groups.begin(), groups.begin() + std::ptrdiff_t(landing));
}

}  // namespace megatron::simt