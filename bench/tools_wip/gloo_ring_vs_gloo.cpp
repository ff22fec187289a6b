#include <gloo/allreduce.h>
#include <gloo/allgather.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <chrono>
#include <cstring>
#include <iostream>
#include <vector>
using clk = std::chrono::steady_clock;
void ring_rs(gloo::Context& ctx, const char* in, char* out, size_t count, std::vector<char>& scratch) {
  const int n = ctx.size, r = ctx.rank;
  const size_t bytes = count * 4;
  if (scratch.size() < 2 * bytes) scratch.resize(2 * bytes);
  const auto chunk = [&](int i) { return static_cast<size_t>(((i % n) + n) % n) * bytes; };
  const uint64_t slot = gloo::Slot::build(0x40, 0);
  auto input = ctx.createUnboundBuffer(const_cast<char*>(in), bytes * n);
  std::unique_ptr<gloo::transport::UnboundBuffer> partial[2] = {ctx.createUnboundBuffer(scratch.data(), bytes), ctx.createUnboundBuffer(scratch.data() + bytes, bytes)};
  gloo::transport::UnboundBuffer* sending = input.get();
  size_t send_offset = chunk(r - 1);
  for (int step = 0; step + 1 < n; ++step) {
    auto& receiving = *partial[step % 2];
    receiving.recv((r + n - 1) % n, slot, 0, bytes);
    sending->send((r + 1) % n, slot, send_offset, bytes);
    receiving.waitRecv(std::chrono::milliseconds(60000));
    float* dst = (float*)(step + 2 == n ? out : (char*)receiving.ptr);
    const float* a = (const float*)receiving.ptr; const float* b = (const float*)(in + chunk(r - step - 2));
    for (size_t i = 0; i < count; ++i) dst[i] = a[i] + b[i];
    sending->waitSend(std::chrono::milliseconds(60000));
    sending = &receiving; send_offset = 0;
  }
}
void ring_ag(gloo::Context& ctx, const char* in, char* out, size_t count) {
  const int n = ctx.size, r = ctx.rank;
  const size_t bytes = count * 4;
  std::memcpy(out + r * bytes, in, bytes);
  const uint64_t slot = gloo::Slot::build(0x41, 0);
  auto buf = ctx.createUnboundBuffer(out, bytes * n);
  auto sbuf = ctx.createUnboundBuffer(out, bytes * n);
  for (int step = 0; step + 1 < n; ++step) {
    const int send_chunk = ((r - step) % n + n) % n, recv_chunk = ((r - step - 1) % n + n) % n;
    buf->recv((r + n - 1) % n, slot, recv_chunk * bytes, bytes);
    sbuf->send((r + 1) % n, slot, send_chunk * bytes, bytes);
    buf->waitRecv(std::chrono::milliseconds(60000));
    sbuf->waitSend(std::chrono::milliseconds(60000));
  }
}
int main(int argc, char** argv) {
  int rank = atoi(argv[1]), size = atoi(argv[2]);
  size_t total = atol(argv[3]);
  gloo::transport::tcp::attr attr; attr.hostname = argv[4];
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store("/tmp/gb/store");
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->connectFullMesh(store, dev);
  std::vector<float> in(total, rank + 1.0f), out(total / size), work(total);
  std::vector<char> scratch;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = clk::now();
    ring_rs(*ctx, (const char*)in.data(), (char*)out.data(), total / size, scratch);
    auto t1 = clk::now();
    gloo::AllreduceOptions o(ctx);
    o.setInput(in.data(), total); o.setOutput(work.data(), total);
    o.setReduceFunction([](void* c, const void* a, const void* b, size_t n) { float* C=(float*)c; const float* A=(const float*)a; const float* B=(const float*)b; for (size_t i=0;i<n;++i) C[i]=A[i]+B[i]; });
    gloo::allreduce(o);
    auto t2 = clk::now();
    auto t3 = clk::now();
    gloo::AllgatherOptions g(ctx);
    g.setInput(out.data(), total / size); g.setOutput(work.data(), total);
    gloo::allgather(g);
    auto t4 = clk::now();
    if (rank == 0) std::cout << "allgather " << std::chrono::duration<double>(t4 - t3).count() * 1e3 << " ms; ";
    auto t5 = clk::now();
    ring_ag(*ctx, (const char*)out.data(), (char*)work.data(), total / size);
    auto t6 = clk::now();
    if (rank == 0) std::cout << "ring_ag " << std::chrono::duration<double>(t6 - t5).count() * 1e3 << " ms (" << work[0] << "," << work[total-1] << "); ";
    if (rank == 0) std::cout << "ring_rs " << std::chrono::duration<double>(t1 - t0).count() * 1e3 << " ms, allreduce " << std::chrono::duration<double>(t2 - t1).count() * 1e3 << " ms, out " << out[0] << " " << work[0] << "\n";
  }
}
