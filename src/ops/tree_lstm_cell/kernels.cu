// tree_lstm_cell: one binary Tree-LSTM node's pointwise part, one thread per
// (node, unit). With children (c_left and c_right non-null) the gates are
// [B, 5H] in the order (i, f_l, f_r, o, u); a leaf's are [B, 3H], (i, o, u).
// Computes in fp32 whatever T is.

__device__ __forceinline__ float tree_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename T>
__device__ void tree_lstm_cell_forward_t(const T* gates, const T* c_left, const T* c_right, T* acts, T* h, T* c,
                                         unsigned int batch, unsigned int hidden) {
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= batch * hidden) return;
    unsigned int b = k / hidden, j = k % hidden;
    bool inner = c_left != nullptr;
    unsigned int gates_n = inner ? 5 : 3;
    size_t row = (size_t)b * gates_n * hidden;
    float i = tree_sigmoid(load(gates[row + j]));
    float cell, o;
    if (inner) {
        float fl = tree_sigmoid(load(gates[row + hidden + j]));
        float fr = tree_sigmoid(load(gates[row + 2 * hidden + j]));
        o = tree_sigmoid(load(gates[row + 3 * hidden + j]));
        float u = tanhf(load(gates[row + 4 * hidden + j]));
        cell = i * u + fl * load(c_left[k]) + fr * load(c_right[k]);
        acts[row + hidden + j] = store<T>(fl);
        acts[row + 2 * hidden + j] = store<T>(fr);
        acts[row + 3 * hidden + j] = store<T>(o);
        acts[row + 4 * hidden + j] = store<T>(u);
    } else {
        o = tree_sigmoid(load(gates[row + hidden + j]));
        float u = tanhf(load(gates[row + 2 * hidden + j]));
        cell = i * u;
        acts[row + hidden + j] = store<T>(o);
        acts[row + 2 * hidden + j] = store<T>(u);
    }
    acts[row + j] = store<T>(i);
    c[k] = store<T>(cell);
    h[k] = store<T>(o * tanhf(cell));
}
extern "C" __global__ void tree_lstm_cell_forward(const float* gates, const float* c_left, const float* c_right,
                                                  float* acts, float* h, float* c, unsigned int batch,
                                                  unsigned int hidden) {
    PDL_WAIT();
    tree_lstm_cell_forward_t(gates, c_left, c_right, acts, h, c, batch, hidden);
}
extern "C" __global__ void tree_lstm_cell_forward_bf16(const bf16* gates, const bf16* c_left, const bf16* c_right,
                                                       bf16* acts, bf16* h, bf16* c, unsigned int batch,
                                                       unsigned int hidden) {
    PDL_WAIT();
    tree_lstm_cell_forward_t(gates, c_left, c_right, acts, h, c, batch, hidden);
}

// d(c) = dc + dh·o·(1 − tanh²c); each gate's gradient through its activation
// (f_l's and f_r's times their child's cell); each child's cell d(c)·f.
// `inner` says which layout the activations have, whether or not the
// children's cells' gradients are wanted.
template <typename T>
__device__ void tree_lstm_cell_backward_t(const T* acts, const T* c, const T* c_left, const T* c_right, const T* dh,
                                          const T* dc, T* g_gates, T* g_left, T* g_right, unsigned int batch,
                                          unsigned int hidden) {
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= batch * hidden) return;
    unsigned int b = k / hidden, j = k % hidden;
    bool inner = c_left != nullptr;
    unsigned int gates_n = inner ? 5 : 3;
    size_t row = (size_t)b * gates_n * hidden;
    float i = load(acts[row + j]);
    float o = load(acts[row + (inner ? 3 : 1) * hidden + j]);
    float u = load(acts[row + (inner ? 4 : 2) * hidden + j]);
    float tc = tanhf(load(c[k]));
    float dhv = dh ? load(dh[k]) : 0.0f;
    float dcell = (dc ? load(dc[k]) : 0.0f) + dhv * o * (1.0f - tc * tc);
    float d_i = dcell * u * i * (1.0f - i), d_o = dhv * tc * o * (1.0f - o), d_u = dcell * i * (1.0f - u * u);
    if (inner) {
        float fl = load(acts[row + hidden + j]), fr = load(acts[row + 2 * hidden + j]);
        if (g_gates) {
            g_gates[row + j] = store<T>(d_i);
            g_gates[row + hidden + j] = store<T>(dcell * load(c_left[k]) * fl * (1.0f - fl));
            g_gates[row + 2 * hidden + j] = store<T>(dcell * load(c_right[k]) * fr * (1.0f - fr));
            g_gates[row + 3 * hidden + j] = store<T>(d_o);
            g_gates[row + 4 * hidden + j] = store<T>(d_u);
        }
        if (g_left) g_left[k] = store<T>(dcell * fl);
        if (g_right) g_right[k] = store<T>(dcell * fr);
    } else if (g_gates) {
        g_gates[row + j] = store<T>(d_i);
        g_gates[row + hidden + j] = store<T>(d_o);
        g_gates[row + 2 * hidden + j] = store<T>(d_u);
    }
}
extern "C" __global__ void tree_lstm_cell_backward(const float* acts, const float* c, const float* c_left,
                                                   const float* c_right, const float* dh, const float* dc,
                                                   float* g_gates, float* g_left, float* g_right, unsigned int batch,
                                                   unsigned int hidden) {
    PDL_WAIT();
    tree_lstm_cell_backward_t(acts, c, c_left, c_right, dh, dc, g_gates, g_left, g_right, batch, hidden);
}
extern "C" __global__ void tree_lstm_cell_backward_bf16(const bf16* acts, const bf16* c, const bf16* c_left,
                                                        const bf16* c_right, const bf16* dh, const bf16* dc,
                                                        bf16* g_gates, bf16* g_left, bf16* g_right,
                                                        unsigned int batch, unsigned int hidden) {
    PDL_WAIT();
    tree_lstm_cell_backward_t(acts, c, c_left, c_right, dh, dc, g_gates, g_left, g_right, batch, hidden);
}
