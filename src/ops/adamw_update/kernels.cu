// AdamW over one flat slab, torch.optim.AdamW's rule (not amsgrad), update t:
//   p *= 1 - lr * wd
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
//   p += -(lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The coefficients are formed in double from the double hyper-parameters
// and rounded to float once, as PyTorch forms them from Python floats; the
// per-element arithmetic is float in PyTorch's CPU order, each operation
// rounded on its own (the _rn intrinsics forbid contraction into FMAs), so
// the GPU rounds as the CPU kernel does. lr and t come from device memory
// (the schedule's table at the cursor's step, and that step + 1) so a
// captured graph follows both. Double hyper-parameters arrive as 8-byte
// kernel arguments.

extern "C" __global__ void adamw_update(float* p, const float* g, float* m, float* v, unsigned long long n,
                                        const float* lr_table, unsigned int lr_len, const unsigned int* cursor,
                                        double beta1, double beta2, float eps, double wd) {
    PDL_WAIT();
    double lr = (double)cursor_lr(lr_table, lr_len, cursor);
    double t = (double)(cursor_global_step(cursor) + 1);
    float decay = (float)__dadd_rn(1.0, -__dmul_rn(lr, wd));
    float w1 = (float)(1.0 - beta1);
    float b2 = (float)beta2;
    float w2 = (float)(1.0 - beta2);
    float neg_step = -(float)__ddiv_rn(lr, 1.0 - pow(beta1, t));
    float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, t));
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float gi = g[i];
        float pi = __fmul_rn(p[i], decay);
        float mi = m[i];
        // PyTorch's lerp: from the nearer end, fused.
        mi = w1 < 0.5f ? __fmaf_rn(w1, __fsub_rn(gi, mi), mi) : __fmaf_rn(__fsub_rn(w1, 1.0f), __fsub_rn(gi, mi), gi);
        float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(w2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(neg_step, mi), denom));
    }
}
