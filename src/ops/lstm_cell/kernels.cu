// lstm_cell: one LSTM step's pointwise part, gates in PyTorch's order
// (i, f, g, o), one thread per (row, unit). The hidden-state summand and the
// previous cell may be absent (null): zero. Computes in fp32 whatever T is.

__device__ __forceinline__ float lstm_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename T>
__device__ void lstm_cell_forward_t(const T* x, const T* from_h, const T* c_prev, T* acts, T* h, T* c,
                                    unsigned int batch, unsigned int hidden) {
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= batch * hidden) return;
    unsigned int b = k / hidden, j = k % hidden;
    size_t row = (size_t)b * 4 * hidden;
    float pre[4];
    for (unsigned int q = 0; q < 4; ++q) {
        size_t at = row + q * hidden + j;
        pre[q] = load(x[at]) + (from_h ? load(from_h[at]) : 0.0f);
    }
    float i = lstm_sigmoid(pre[0]), f = lstm_sigmoid(pre[1]), g = tanhf(pre[2]), o = lstm_sigmoid(pre[3]);
    float cell = f * (c_prev ? load(c_prev[k]) : 0.0f) + i * g;
    c[k] = store<T>(cell);
    h[k] = store<T>(o * tanhf(cell));
    acts[row + j] = store<T>(i);
    acts[row + hidden + j] = store<T>(f);
    acts[row + 2 * hidden + j] = store<T>(g);
    acts[row + 3 * hidden + j] = store<T>(o);
}
extern "C" __global__ void lstm_cell_forward(const float* x, const float* from_h, const float* c_prev, float* acts,
                                             float* h, float* c, unsigned int batch, unsigned int hidden) {
    PDL_WAIT();
    lstm_cell_forward_t(x, from_h, c_prev, acts, h, c, batch, hidden);
}
extern "C" __global__ void lstm_cell_forward_bf16(const bf16* x, const bf16* from_h, const bf16* c_prev, bf16* acts,
                                                  bf16* h, bf16* c, unsigned int batch, unsigned int hidden) {
    PDL_WAIT();
    lstm_cell_forward_t(x, from_h, c_prev, acts, h, c, batch, hidden);
}

// d(c) = dc + dh·o·(1 − tanh²c); d(gates) = (d(c)·g·i(1−i), d(c)·c_prev·f(1−f),
// d(c)·i·(1−g²), dh·tanh(c)·o(1−o)), written to each summand's gradient that
// is wanted (non-null); d(c_prev) = d(c)·f.
template <typename T>
__device__ void lstm_cell_backward_t(const T* acts, const T* c, const T* c_prev, const T* dh, const T* dc, T* gx,
                                     T* gh, T* gcp, unsigned int batch, unsigned int hidden) {
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= batch * hidden) return;
    unsigned int b = k / hidden, j = k % hidden;
    size_t row = (size_t)b * 4 * hidden;
    float i = load(acts[row + j]), f = load(acts[row + hidden + j]);
    float g = load(acts[row + 2 * hidden + j]), o = load(acts[row + 3 * hidden + j]);
    float tc = tanhf(load(c[k]));
    float dhv = dh ? load(dh[k]) : 0.0f;
    float dcell = (dc ? load(dc[k]) : 0.0f) + dhv * o * (1.0f - tc * tc);
    float cp = c_prev ? load(c_prev[k]) : 0.0f;
    float d[4] = {dcell * g * i * (1.0f - i), dcell * cp * f * (1.0f - f), dcell * i * (1.0f - g * g),
                  dhv * tc * o * (1.0f - o)};
    for (unsigned int q = 0; q < 4; ++q) {
        size_t at = row + q * hidden + j;
        if (gx) gx[at] = store<T>(d[q]);
        if (gh) gh[at] = store<T>(d[q]);
    }
    if (gcp) gcp[k] = store<T>(dcell * f);
}
extern "C" __global__ void lstm_cell_backward(const float* acts, const float* c, const float* c_prev, const float* dh,
                                              const float* dc, float* gx, float* gh, float* gcp, unsigned int batch,
                                              unsigned int hidden) {
    PDL_WAIT();
    lstm_cell_backward_t(acts, c, c_prev, dh, dc, gx, gh, gcp, batch, hidden);
}
extern "C" __global__ void lstm_cell_backward_bf16(const bf16* acts, const bf16* c, const bf16* c_prev, const bf16* dh,
                                                   const bf16* dc, bf16* gx, bf16* gh, bf16* gcp, unsigned int batch,
                                                   unsigned int hidden) {
    PDL_WAIT();
    lstm_cell_backward_t(acts, c, c_prev, dh, dc, gx, gh, gcp, batch, hidden);
}
