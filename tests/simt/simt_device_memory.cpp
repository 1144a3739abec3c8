// The emulated GPU's device memory (contract: simt_device_memory.h).
#include "simt_device_memory.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace megatron::simt {

namespace {

constexpr size_t kReservedBytes = size_t(1) << 38;  // 256 GiB of addresses, none committed
constexpr size_t kPage = 4096;

// Whether [p, p + bytes) lies inside one block of `blocks` (base -> bytes).
bool inside(const std::map<const char*, size_t>& blocks, const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = blocks.upper_bound(c);
  if (it == blocks.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

struct Heap {
  std::mutex mutex;
  char* base = nullptr;
  size_t used = 0;                       // bytes of the range handed out so far
  std::map<const char*, size_t> blocks;  // live allocations: base -> bytes
  size_t live_bytes = 0;
  int open = 0;  // DeviceAccess depth
};

Heap& heap();

// SIGSEGV inside the range: host code touched device memory.
void on_fault(int sig, siginfo_t* info, void*) {
  Heap& h = heap();
  const char* addr = static_cast<const char*>(info->si_addr);
  if (h.base && addr >= h.base && addr < h.base + kReservedBytes) {
    char text[512];
    const char* block = nullptr;
    size_t bytes = 0;
    auto it = h.blocks.upper_bound(addr);  // read only: the process is about to die
    if (it != h.blocks.begin()) {
      --it;
      block = it->first;
      bytes = it->second;
    }
    const int n = snprintf(text, sizeof text,
                           "\nemulated GPU: host code touched device memory at %p (allocation of "
                           "%zu bytes at %p): on a GPU this is a crash. Copy the tensor to the "
                           "host (Tensor::to(Device::CPU)) or do the work in a kernel. "
                           "Backtrace:\n",
                           static_cast<const void*>(addr), bytes, static_cast<const void*>(block));
    if (n > 0) (void)!write(STDERR_FILENO, text, size_t(n));
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  }
  signal(sig, SIG_DFL);  // returning re-runs the faulting access: the default action
}

Heap& heap() {
  static Heap* h = [] {
    auto* created = new Heap;  // never destroyed: used until exit, and by the fault handler
    void* p = mmap(nullptr, kReservedBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p != MAP_FAILED) created->base = static_cast<char*>(p);
    static char alternate_stack[1 << 16];  // the handler runs even on a fiber's full stack
    stack_t ss{};
    ss.ss_sp = alternate_stack;
    ss.ss_size = sizeof alternate_stack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    return created;
  }();
  return *h;
}

// Opens (open) or closes one level of access; the outermost level changes the protection.
void access(bool open) {
  Heap& h = heap();
  std::lock_guard<std::mutex> lock(h.mutex);
  if (open ? h.open++ != 0 : --h.open != 0) return;
  if (h.used > 0) mprotect(h.base, h.used, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

}  // namespace

void* device_allocate(size_t bytes) {
  Heap& h = heap();
  std::lock_guard<std::mutex> lock(h.mutex);
  const size_t rounded = (bytes + kPage - 1) / kPage * kPage + kPage;  // never empty
  if (!h.base || h.used + rounded > kReservedBytes) return nullptr;
  char* p = h.base + h.used;
  h.used += rounded;
  // Garbage, as cudaMalloc's memory may hold: all-ones bytes are NaN in f32, bf16 and f16, so a
  // kernel that reads what nothing wrote gives NaN instead of a harmless zero.
  mprotect(p, rounded, PROT_READ | PROT_WRITE);
  std::memset(p, 0xFF, rounded);
  if (h.open == 0) mprotect(p, rounded, PROT_NONE);
  h.blocks[p] = bytes;
  h.live_bytes += bytes;
  return p;
}

bool device_free(void* p) {
  Heap& h = heap();
  std::lock_guard<std::mutex> lock(h.mutex);
  auto it = h.blocks.find(static_cast<char*>(p));
  if (it == h.blocks.end()) return false;
  const size_t rounded = (it->second + kPage - 1) / kPage * kPage + kPage;
  madvise(p, rounded, MADV_DONTNEED);  // the pages go back; the addresses are not reused
  h.live_bytes -= it->second;
  h.blocks.erase(it);
  return true;
}

bool is_device_memory(const void* p, size_t bytes) {
  Heap& h = heap();
  std::lock_guard<std::mutex> lock(h.mutex);
  return inside(h.blocks, p, bytes);
}

size_t device_bytes_in_use() {
  Heap& h = heap();
  std::lock_guard<std::mutex> lock(h.mutex);
  return h.live_bytes;
}

namespace {

struct Pinned {
  std::mutex mutex;
  std::map<const char*, size_t> blocks;  // base -> bytes
};

Pinned& pinned() {
  static Pinned p;
  return p;
}

}  // namespace

void* pinned_allocate(size_t bytes) {
  Pinned& m = pinned();
  std::lock_guard<std::mutex> lock(m.mutex);
  void* p = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage + kPage);
  if (p) m.blocks[static_cast<char*>(p)] = bytes;
  return p;
}

bool pinned_free(void* p) {
  Pinned& m = pinned();
  std::lock_guard<std::mutex> lock(m.mutex);
  auto it = m.blocks.find(static_cast<char*>(p));
  if (it == m.blocks.end()) return false;
  m.blocks.erase(it);
  std::free(p);
  return true;
}

bool is_pinned_memory(const void* p, size_t bytes) {
  Pinned& m = pinned();
  std::lock_guard<std::mutex> lock(m.mutex);
  return inside(m.blocks, p, bytes);
}

DeviceAccess::DeviceAccess() {
  access(true);
}

DeviceAccess::~DeviceAccess() {
  access(false);
}

}  // namespace megatron::simt
