// SGD over one flat slab, torch.optim.SGD's rule with dampening 0:
//   d = g + wd * p;  v = mu * v + d;  d = nesterov ? d + mu * v : v;  p -= lr * d
// (no decay term when wd = 0, no velocity when mu = 0: then plainly
// p -= lr * g). The rate is read from the schedule's table at the step the
// cursor is at, so a captured graph follows the schedule. Grid-stride, so
// any grid covers any slab.

extern "C" __global__ void sgd_update(float* p, const float* g, float* v, unsigned long long n,
                                      const float* lr_table, unsigned int lr_len, const unsigned int* cursor,
                                      float mu, unsigned int nesterov, float wd) {
    PDL_WAIT();
    float lr = cursor_lr(lr_table, lr_len, cursor);
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float d = g[i];
        if (wd != 0.0f) d = d + wd * p[i];
        if (mu != 0.0f) {
            float vel = mu * v[i] + d;
            v[i] = vel;
            d = nesterov ? d + mu * vel : vel;
        }
        p[i] -= lr * d;
    }
}
