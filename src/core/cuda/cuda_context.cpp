#include "core/cuda/cuda_context.h"

#include <mutex>

namespace megatron::cuda {

namespace {

struct Context {
  int device = -1;
  cudaStream_t compute = nullptr;
  cudaStream_t communication = nullptr;
  cudaStream_t overlap = nullptr;
  cudaEvent_t compute_done = nullptr;
  cudaEvent_t communication_done = nullptr;
};

Context& context() {
  static Context c;
  return c;
}

std::mutex& bind_mutex() {
  static std::mutex m;
  return m;
}

// Every entry point goes through here. cudaSetDevice is per host thread, so each thread makes
// the process's GPU current once; a thread that never did would run on GPU 0.
Context& bound() {
  Context& c = context();
  if (c.device < 0) bind_device(0);
  thread_local bool current = false;
  if (!current) {
    MT_CUDA_CHECK(cudaSetDevice(c.device));
    current = true;
  }
  return c;
}

// A new event recorded on `stream`; the caller releases it (wait_and_release).
cudaEvent_t record_new_event(cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  MT_CUDA_CHECK(cudaEventRecord(event, stream));
  return event;
}

// `stream` waits for `event`, which is then released: the wait queued before still holds.
void wait_and_release(cudaStream_t stream, cudaEvent_t event) {
  MT_CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0));
  MT_CUDA_CHECK(cudaEventDestroy(event));
}

}  // namespace

int visible_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver / no device" status
    return 0;
  }
  return n;
}

void bind_device(int index) {
  std::lock_guard<std::mutex> lock(bind_mutex());
  Context& c = context();
  if (c.device == index) return;
  MT_CHECK(c.device < 0, "this process already drives GPU ", c.device,
           "; one process drives one GPU (launch one rank per GPU)");
  const int n = visible_device_count();
  MT_CHECK(index >= 0 && index < n, "GPU ", index, " requested, but this process sees ", n,
           " GPU(s); check CUDA_VISIBLE_DEVICES and the number of ranks per node");
  MT_CUDA_CHECK(cudaSetDevice(index));
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&c.compute, cudaStreamNonBlocking));
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&c.communication, cudaStreamNonBlocking));
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&c.overlap, cudaStreamNonBlocking));
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&c.compute_done, cudaEventDisableTiming));
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&c.communication_done, cudaEventDisableTiming));
  c.device = index;
}

int bound_device() {
  return bound().device;
}

cudaStream_t compute_stream() {
  return bound().compute;
}

cudaStream_t communication_stream() {
  return bound().communication;
}

void communication_begins() {
  Context& c = bound();
  MT_CUDA_CHECK(cudaEventRecord(c.compute_done, c.compute));
  MT_CUDA_CHECK(cudaStreamWaitEvent(c.communication, c.compute_done, 0));
}

void communication_ends() {
  Context& c = bound();
  MT_CUDA_CHECK(cudaEventRecord(c.communication_done, c.communication));
  MT_CUDA_CHECK(cudaStreamWaitEvent(c.compute, c.communication_done, 0));
}

cudaEvent_t compute_point() {
  return record_new_event(bound().compute);
}

void communication_waits(cudaEvent_t compute_point) {
  wait_and_release(bound().communication, compute_point);
}

cudaEvent_t timing_point() {
  bound();  // this thread's GPU is current
  cudaEvent_t event = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDefault));
  MT_CUDA_CHECK(cudaEventRecord(event, bound().compute));
  return event;
}

double elapsed_seconds(cudaEvent_t start, cudaEvent_t end) {
  MT_CUDA_CHECK(cudaEventSynchronize(end));
  float ms = 0;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  return double(ms) * 1e-3;
}

void release_event(cudaEvent_t event) {
  MT_CUDA_CHECK(cudaEventDestroy(event));
}

cudaStream_t overlap_stream() {
  return bound().overlap;
}

void overlap_begins() {
  Context& c = bound();
  // A wait takes the event's most recent record at the time of the call, so compute_done can
  // be shared with communication_begins.
  MT_CUDA_CHECK(cudaEventRecord(c.compute_done, c.compute));
  MT_CUDA_CHECK(cudaStreamWaitEvent(c.overlap, c.compute_done, 0));
}

cudaEvent_t overlap_ends() {
  return record_new_event(bound().overlap);
}

void compute_waits(cudaEvent_t overlap_done) {
  wait_and_release(bound().compute, overlap_done);
}

void copy_async(void* dst, const void* src, size_t bytes, bool host_involved) {
  Context& c = bound();
  MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c.compute));
  if (host_involved) MT_CUDA_CHECK(cudaStreamSynchronize(c.compute));
}

void zero_async(void* p, size_t bytes) {
  MT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, bound().compute));
}

void synchronize_compute() {
  MT_CUDA_CHECK(cudaStreamSynchronize(bound().compute));
}

void memory_info(size_t& free_bytes, size_t& total_bytes) {
  bound();  // the bound device's context
  MT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
}

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  MT_CHECK(status == cudaSuccess, "CUDA kernel ", kernel,
           " failed to launch: ", cudaGetErrorString(status));
}

}  // namespace megatron::cuda
