// Times the channels-last batch-norm kernels alone, per ResNet shape, against
// a copy of the same bytes: what each pass costs and how far it is from the
// memory's bound. Built by bench/bn_kernels.sh with nvcc on the GPU machine,
// once per variant of kernels.cu (KERNELS) and of the launch sizes below,
// which mirror src/ops/batch_norm2d/geometry.rs.
//
// Each pass is captured REPS times in a CUDA graph and the graph replayed,
// as a training step replays them; the figure is the median replay's time
// per pass. The first call's outputs are written to DUMP (raw fp32, in a
// fixed order) so that two variants can be compared value for value.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <vector>

// The backend's common.cu, or an older one (COMMON, a path from this
// folder) to go with an older KERNELS.
#ifndef COMMON
#define COMMON "../../src/backend/cuda/common.cu"
#endif
#include COMMON
#include KERNELS

#ifndef MIN_RUN
#define MIN_RUN 256
#endif
#ifndef BLOCKS
#define BLOCKS 1024
#endif
// Each sum's own cap on its blocks (their runs times the channel tiles).
#ifndef STATS_BLOCKS
#define STATS_BLOCKS BLOCKS
#endif
#ifndef BSUMS_BLOCKS
#define BSUMS_BLOCKS BLOCKS
#endif
#ifndef ROWS_PER_THREAD
#define ROWS_PER_THREAD 4
#endif
// Caps on the elementwise passes' blocks (0: none, ROWS_PER_THREAD decides).
#ifndef APPLY_BLOCKS
#define APPLY_BLOCKS 0
#endif
#ifndef INPUT_BLOCKS
#define INPUT_BLOCKS 0
#endif
// A finishing kernel gives a channel a warp (8 channels a block) where it
// has at most FINISH_WARP_RUNS runs, else a block of 256 threads (0: always
// a block, as kernels.cu did before it took the channel count; build such
// a kernels.cu with -DFINISH_NO_C -DFINISH_WARP_RUNS=0).
#ifndef FINISH_WARP_RUNS
#define FINISH_WARP_RUNS 128
#endif
// Fixed as geometry.rs fixes them.
#define MAX_RUNS 1024
#define WARP_FINISH_CHANNELS 8

#define REPS 20
#define ROUNDS 15

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

struct Geo {
    unsigned n, c, hw, dsize;
    unsigned rows() const { return n * hw; }
    unsigned vec() const {
        unsigned most = dsize == 2 ? 8 : 4;
        for (unsigned v : {8u, 4u, 2u, 1u})
            if (v <= most && c % v == 0) return v;
        return 1;
    }
    unsigned along() const {
        unsigned widest = 128 / (vec() * dsize), need = (c + vec() - 1) / vec(), a = 1;
        while (a < need) a *= 2;
        return std::min(a, widest);
    }
    dim3 threads() const { return dim3(along(), 256 / along()); }
    unsigned tiles() const {
        unsigned t = along() * vec();
        return (c + t - 1) / t;
    }
    void runs(unsigned cap, unsigned* runs, unsigned* len) const {
        unsigned count = rows();
        unsigned r = std::min((count + MIN_RUN - 1) / MIN_RUN, (cap + tiles() - 1) / tiles());
        r = std::max(1u, std::min(r, (unsigned)MAX_RUNS));
        *len = (count + r - 1) / r;
        *runs = (count + *len - 1) / *len;
    }
    dim3 run_grid(unsigned cap) const {
        unsigned r, l;
        runs(cap, &r, &l);
        return dim3(r, tiles());
    }
    dim3 ew_grid(unsigned cap) const {
        unsigned per_block = (256 / along()) * ROWS_PER_THREAD;
        unsigned cols = (rows() + per_block - 1) / per_block;
        if (cap) cols = std::min(cols, std::max(1u, cap / tiles()));
        return dim3(cols, tiles());
    }
    unsigned finish_channels(unsigned runs) const { return runs <= FINISH_WARP_RUNS ? WARP_FINISH_CHANNELS : 1; }
    dim3 finish_grid(unsigned runs) const {
        unsigned k = finish_channels(runs);
        return dim3((c + k - 1) / k);
    }
    dim3 finish_threads(unsigned runs) const {
        return finish_channels(runs) == 1 ? dim3(256) : dim3(32, finish_channels(runs));
    }
    size_t bytes() const { return (size_t)n * c * hw * dsize; }
};

#ifdef FINISH_NO_C
#define FINISH_C
#else
#define FINISH_C , g.c
#endif

__global__ void copy16(const uint4* a, uint4* b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        b[i] = a[i];
}

struct Bufs {
    void *x, *gy, *y, *gx, *res;
    float *partial, *mean, *invstd, *w, *b, *rm, *rv, *batches, *sdx, *sdy;
};

template <typename T> void stats(const Geo& g, Bufs& B, cudaStream_t s) {
    unsigned runs, len;
    g.runs(STATS_BLOCKS, &runs, &len);
    if (sizeof(T) == 2)
        bn_stats_partial_nhwc_bf16<<<g.run_grid(STATS_BLOCKS), g.threads(), 0, s>>>((const bf16*)B.x, B.partial,
                                                                                    g.rows(), g.c, len, g.vec());
    else
        bn_stats_partial_nhwc<<<g.run_grid(STATS_BLOCKS), g.threads(), 0, s>>>((const float*)B.x, B.partial,
                                                                               g.rows(), g.c, len, g.vec());
    bn_stats_finish<<<g.finish_grid(runs), g.finish_threads(runs), 0, s>>>(B.partial, B.mean, B.invstd, B.rm, B.rv,
                                                                    B.batches, g.n, g.hw, runs, len, 0.1f,
                                                                    1e-5f FINISH_C);
}

template <typename T> void apply(const Geo& g, Bufs& B, bool residual, cudaStream_t s) {
    if (sizeof(T) == 2)
        bn_apply_nhwc_bf16<<<g.ew_grid(APPLY_BLOCKS), g.threads(), 0, s>>>((const bf16*)B.x, B.mean, B.invstd, B.w, B.b,
                                                               residual ? (const bf16*)B.res : nullptr, (bf16*)B.y,
                                                               g.rows(), g.c, 1, g.vec());
    else
        bn_apply_nhwc<<<g.ew_grid(APPLY_BLOCKS), g.threads(), 0, s>>>((const float*)B.x, B.mean, B.invstd, B.w, B.b,
                                                          residual ? (const float*)B.res : nullptr, (float*)B.y,
                                                          g.rows(), g.c, 1, g.vec());
}

template <typename T> void bsums(const Geo& g, Bufs& B, unsigned mask, cudaStream_t s) {
    unsigned runs, len;
    g.runs(BSUMS_BLOCKS, &runs, &len);
    if (sizeof(T) == 2)
        bn_backward_partial_nhwc_bf16<<<g.run_grid(BSUMS_BLOCKS), g.threads(), 0, s>>>(
            (const bf16*)B.x, (const bf16*)B.gy, (const bf16*)B.y, B.mean, B.invstd, B.w, B.b, B.partial, g.rows(),
            g.c, len, mask, g.vec());
    else
        bn_backward_partial_nhwc<<<g.run_grid(BSUMS_BLOCKS), g.threads(), 0, s>>>(
            (const float*)B.x, (const float*)B.gy, (const float*)B.y, B.mean, B.invstd, B.w, B.b, B.partial,
            g.rows(), g.c, len, mask, g.vec());
    bn_backward_finish<<<g.finish_grid(runs), g.finish_threads(runs), 0, s>>>(B.partial, B.invstd, B.sdx, B.sdy,
                                                                       runs FINISH_C);
}

template <typename T> void binput(const Geo& g, Bufs& B, unsigned mask, bool gres, cudaStream_t s) {
    if (sizeof(T) == 2)
        bn_backward_input_nhwc_bf16<<<g.ew_grid(INPUT_BLOCKS), g.threads(), 0, s>>>(
            (const bf16*)B.x, (const bf16*)B.gy, (const bf16*)B.y, B.mean, B.invstd, B.w, B.b, B.sdx, B.sdy,
            (bf16*)B.gx, gres ? (bf16*)B.res : nullptr, g.rows(), g.c, 1, mask, g.vec());
    else
        bn_backward_input_nhwc<<<g.ew_grid(INPUT_BLOCKS), g.threads(), 0, s>>>(
            (const float*)B.x, (const float*)B.gy, (const float*)B.y, B.mean, B.invstd, B.w, B.b, B.sdx, B.sdy,
            (float*)B.gx, gres ? (float*)B.res : nullptr, g.rows(), g.c, 1, mask, g.vec());
}

// The median over ROUNDS replays of a graph of REPS calls of f, per call.
template <typename F> double time_us(F f, cudaStream_t s) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < REPS; i++) f();
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> t;
    for (int r = 0; r < ROUNDS; r++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0 / REPS);
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static unsigned lcg = 12345;
static float urand() {
    lcg = lcg * 1664525u + 1013904223u;
    return (lcg >> 8) * (1.0f / 16777216.0f);
}

static void fill(void* dev, size_t count, unsigned dsize, float lo, float hi) {
    std::vector<float> v(count);
    for (auto& f : v) f = lo + (hi - lo) * urand();
    if (dsize == 4) {
        CK(cudaMemcpy(dev, v.data(), count * 4, cudaMemcpyHostToDevice));
    } else {
        std::vector<unsigned short> h(count);
        for (size_t i = 0; i < count; i++) {
            unsigned u;
            memcpy(&u, &v[i], 4);
            h[i] = (unsigned short)(u >> 16);
        }
        CK(cudaMemcpy(dev, h.data(), count * 2, cudaMemcpyHostToDevice));
    }
}

static void dump(FILE* f, const void* dev, size_t count, unsigned dsize) {
    std::vector<float> v(count);
    if (dsize == 4) {
        CK(cudaMemcpy(v.data(), dev, count * 4, cudaMemcpyDeviceToHost));
    } else {
        std::vector<unsigned short> h(count);
        CK(cudaMemcpy(h.data(), dev, count * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < count; i++) {
            unsigned u = (unsigned)h[i] << 16;
            memcpy(&v[i], &u, 4);
        }
    }
    fwrite(v.data(), 4, count, f);
}

template <typename T> void shape(const Geo& g, FILE* out) {
    size_t count = (size_t)g.n * g.c * g.hw, bytes = g.bytes();
    Bufs B;
    CK(cudaMalloc(&B.x, bytes));
    CK(cudaMalloc(&B.gy, bytes));
    CK(cudaMalloc(&B.y, bytes));
    CK(cudaMalloc(&B.gx, bytes));
    CK(cudaMalloc(&B.res, bytes));
    float** per_channel[] = {&B.mean, &B.invstd, &B.w, &B.b, &B.rm, &B.rv, &B.sdx, &B.sdy};
    for (float** p : per_channel) CK(cudaMalloc(p, g.c * 4));
    CK(cudaMalloc(&B.batches, 4));
    CK(cudaMalloc(&B.partial, (size_t)g.c * MAX_RUNS * 2 * 4));
    fill(B.x, count, g.dsize, -1.5f, 2.5f);
    fill(B.gy, count, g.dsize, -1.0f, 1.0f);
    fill(B.res, count, g.dsize, -1.0f, 1.0f);
    fill(B.w, g.c, 4, 0.5f, 1.5f);
    fill(B.b, g.c, 4, -0.2f, 0.2f);
    fill(B.rm, g.c, 4, 0.0f, 0.0f);
    fill(B.rv, g.c, 4, 1.0f, 1.0f);
    CK(cudaMemset(B.batches, 0, 4));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // Once for the values: statistics, the relu'd output, the sums and the
    // input's gradient through the output's mask.
    stats<T>(g, B, s);
    apply<T>(g, B, false, s);
    bsums<T>(g, B, 2, s);
    binput<T>(g, B, 2, false, s);
    CK(cudaStreamSynchronize(s));
    if (out) {
        for (float* p : {B.mean, B.invstd, B.sdx, B.sdy}) dump(out, p, g.c, 4);
        dump(out, B.y, count, g.dsize);
        dump(out, B.gx, count, g.dsize);
    }

    double mb = bytes / 1e6;
    double copy = time_us([&] { copy16<<<1056, 256, 0, s>>>((const uint4*)B.x, (uint4*)B.gx, bytes / 16); }, s);
    double st = time_us([&] { stats<T>(g, B, s); }, s);
    double ap = time_us([&] { apply<T>(g, B, false, s); }, s);
    double apr = time_us([&] { apply<T>(g, B, true, s); }, s);
    double bs = time_us([&] { bsums<T>(g, B, 2, s); }, s);
    double bs1 = time_us([&] { bsums<T>(g, B, 1, s); }, s);
    double bi = time_us([&] { binput<T>(g, B, 1, false, s); }, s);
    double bir = time_us([&] { binput<T>(g, B, 2, true, s); }, s);
    unsigned runs, len;
    g.runs(BSUMS_BLOCKS, &runs, &len);
    printf("%-5s n %4u c %4u hw %4u  %6.1f MB  runs %4u  | copy %6.2f | stats %6.2f | apply %6.2f +res %6.2f | "
           "bsums y %6.2f x %6.2f | binput %6.2f +res %6.2f | sum %7.2f\n",
           g.dsize == 2 ? "bf16" : "fp32", g.n, g.c, g.hw, mb, runs, copy, st, ap, apr, bs, bs1, bi, bir,
           st + ap + bs + bi);
    CK(cudaStreamDestroy(s));
    for (void* p : {B.x, B.gy, B.y, B.gx, B.res}) CK(cudaFree(p));
    for (float** p : per_channel) CK(cudaFree(*p));
    CK(cudaFree(B.batches));
    CK(cudaFree(B.partial));
}

int main(int argc, char** argv) {
    FILE* out = argc > 1 ? fopen(argv[1], "wb") : nullptr;
    printf("variant: %s MIN_RUN %d STATS_BLOCKS %d BSUMS_BLOCKS %d ROWS_PER_THREAD %d APPLY_BLOCKS %d INPUT_BLOCKS %d "
           "FINISH_WARP_RUNS %d (µs per call, median of %d replays of %d)\n",
           VARIANT, MIN_RUN, STATS_BLOCKS, BSUMS_BLOCKS, ROWS_PER_THREAD, APPLY_BLOCKS, INPUT_BLOCKS, FINISH_WARP_RUNS,
           ROUNDS, REPS);
    // ResNet-18 (CIFAR) stages at batch 128 and 512; ResNet-50's widest.
    unsigned planes[][2] = {{64, 1024}, {128, 256}, {256, 64}, {512, 16}};
    for (unsigned n : {128u, 512u})
        for (auto& p : planes) shape<bf16>(Geo{n, p[0], p[1], 2}, out);
    for (auto& p : planes) shape<float>(Geo{512, p[0], p[1], 4}, out);
    shape<bf16>(Geo{128, 256, 1024, 2}, out);
    shape<bf16>(Geo{128, 2048, 16, 2}, out);
    if (out) fclose(out);
    return 0;
}
