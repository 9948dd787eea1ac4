// Adagrad over one flat slab, torch.optim.Adagrad's rule (dense, not
// maximize), update t:
//   d = g + wd * p;  clr = lr / (1 + (t - 1) * lr_decay)
//   sum += d * d;  p += (-clr) * d / (sqrt(sum) + eps)
// clr is formed in double and rounded to float once, as PyTorch forms it
// from Python floats; the per-element arithmetic is float in PyTorch's CPU
// order, each operation rounded on its own (the _rn intrinsics forbid
// contraction into FMAs) but the weight decay, fused as PyTorch's vector
// path and our CPU kernel fuse it. lr and t come from device memory (the
// schedule's table at the cursor's step, and that step + 1) so a captured
// graph follows both. lr_decay arrives as an 8-byte kernel argument.

extern "C" __global__ void adagrad_update(float* p, const float* g, float* sum, unsigned long long n,
                                          const float* lr_table, unsigned int lr_len, const unsigned int* cursor,
                                          double lr_decay, float wd, float eps) {
    PDL_WAIT();
    double lr = (double)cursor_lr(lr_table, lr_len, cursor);
    double t = (double)(cursor_global_step(cursor) + 1);
    float neg_clr = -(float)__ddiv_rn(lr, __dadd_rn(1.0, __dmul_rn(t - 1.0, lr_decay)));
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float d = g[i];
        if (wd != 0.0f) d = __fmaf_rn(p[i], wd, d);
        float s = __fadd_rn(sum[i], __fmul_rn(d, d));
        sum[i] = s;
        float std = __fadd_rn(__fsqrt_rn(s), eps);
        p[i] = __fadd_rn(p[i], __fdiv_rn(__fmul_rn(neg_clr, d), std));
    }
}
