// SGD, PyTorch's rule: v = mu * v + g; p -= lr * v (plainly p -= lr * g).

extern "C" __global__ void sgd_update(float* p, const float* g, unsigned int n, float lr) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] -= lr * g[i];
}

extern "C" __global__ void sgd_momentum(float* p, const float* g, float* v, unsigned int n, float lr, float mu) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float vel = mu * v[i] + g[i];
        v[i] = vel;
        p[i] -= lr * vel;
    }
}
