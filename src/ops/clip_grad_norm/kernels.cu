// torch.nn.utils.clip_grad_norm_ (the 2-norm) in three kernels that read
// everything they need from device memory, so a captured graph clips on
// every replay with no host synchronisation. See mod.rs.
//
// clip_sum_squares: block k sums the squares of piece k of the run (the
// run cut into gridDim.x = PIECES equal pieces, as the CPU cuts it) in
// double, reduced in a fixed order, into partial k: overwritten by the
// step's first run, added to by the others. Deterministic: no atomics.
extern "C" __global__ void clip_sum_squares(const float* g, unsigned long long n, float* partials,
                                            unsigned int first) {
    PDL_WAIT();
    __shared__ double red[256];
    unsigned long long pieces = gridDim.x;
    unsigned long long start = n * blockIdx.x / pieces;
    unsigned long long end = n * (blockIdx.x + 1) / pieces;
    double sum = 0.0;
    for (unsigned long long i = start + threadIdx.x; i < end; i += blockDim.x) {
        double x = (double)g[i];
        sum = __dadd_rn(sum, __dmul_rn(x, x));
    }
    red[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) red[threadIdx.x] = __dadd_rn(red[threadIdx.x], red[threadIdx.x + half]);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = first ? (float)red[0] : (float)__dadd_rn((double)partials[blockIdx.x], red[0]);
    }
}

// clip_coefficient, one block of 256 threads over the 1024 partial sums:
// figures = [norm, coefficient, sum of norms + norm, steps + 1], the
// coefficient as PyTorch forms it in float: max_norm * (1 / (norm + 1e-6)),
// clamped to 1 with a NaN kept.
extern "C" __global__ void clip_coefficient(const float* partials, float* figures, float max_norm) {
    PDL_WAIT();
    __shared__ double red[256];
    double sum = 0.0;
    for (unsigned int i = threadIdx.x; i < 1024; i += blockDim.x) sum = __dadd_rn(sum, (double)partials[i]);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) red[threadIdx.x] = __dadd_rn(red[threadIdx.x], red[threadIdx.x + half]);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float norm = (float)sqrt(red[0]);
        float c = __fmul_rn(__fdiv_rn(1.0f, __fadd_rn(norm, 1e-6f)), max_norm);
        c = c > 1.0f ? 1.0f : c;
        figures[0] = norm;
        figures[1] = c;
        figures[2] = __fadd_rn(figures[2], norm);
        figures[3] = __fadd_rn(figures[3], 1.0f);
    }
}

// clip_scale: g *= the coefficient; nothing to write where it is 1.
extern "C" __global__ void clip_scale(float* g, unsigned long long n, const float* figures) {
    PDL_WAIT();
    float c = figures[1];
    if (c == 1.0f) return;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        g[i] = __fmul_rn(g[i], c);
    }
}
