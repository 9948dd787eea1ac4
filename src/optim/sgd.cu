// SGD, PyTorch's rule: v = mu * v + g; p -= lr * v (plainly p -= lr * g).

// Every parameter of a step in one launch: a table of up to 8 tensors,
// `start` their prefix sums (start[count] = elements in all), the learning
// rate read from device memory so that a captured graph follows its changes.
struct Tensors8 {
    float* t[8];
};
struct Starts {
    unsigned int at[10];
};

extern "C" __global__ void sgd_multi(Tensors8 params, Tensors8 grads, Tensors8 velocity, Starts start,
                                     unsigned int count, const float* lr_at, float mu) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= start.at[count]) return;
    unsigned int k = 0;
    while (i >= start.at[k + 1]) ++k;
    unsigned int j = i - start.at[k];
    float lr = lr_at[0];
    float g = grads.t[k][j];
    if (mu != 0.0f) {
        float vel = mu * velocity.t[k][j] + g;
        velocity.t[k][j] = vel;
        g = vel;
    }
    params.t[k][j] -= lr * g;
}
