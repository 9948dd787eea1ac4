// max-pool 2x2, stride 2, over `planes` planes of h x w (an odd last row or
// column is dropped). Forward records which of the four inputs won (0..3,
// row-major); backward routes each gradient back to its winner.

extern "C" __global__ void maxpool_forward(const float* x, float* y, unsigned char* winner, unsigned int planes,
                                           unsigned int h, unsigned int w) {
    unsigned int oh = h / 2, ow = w / 2;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * oh * ow) return;
    unsigned int plane = i / (oh * ow), r = (i / ow) % oh, c = i % ow;
    const float* top = x + (size_t)plane * h * w + (2 * r) * w + 2 * c;
    float v[4] = {top[0], top[1], top[w], top[w + 1]};
    // `>` keeps the first maximum, as PyTorch does; a NaN wins so it propagates.
    float best = v[0];
    unsigned char arg = 0;
    for (unsigned char k = 1; k < 4; ++k) {
        if (v[k] > best || isnan(v[k])) {
            best = v[k];
            arg = k;
        }
    }
    y[i] = best;
    winner[i] = arg;
}

// One thread per input element, so every element of gx is written (zeros
// included) and no two threads touch the same one.
extern "C" __global__ void maxpool_backward(const float* gy, const unsigned char* winner, float* gx,
                                            unsigned int planes, unsigned int h, unsigned int w) {
    unsigned int oh = h / 2, ow = w / 2;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= planes * h * w) return;
    unsigned int plane = i / (h * w), r = (i / w) % h, c = i % w;
    unsigned int orow = r / 2, ocol = c / 2;
    float g = 0.0f;
    if (orow < oh && ocol < ow) {
        unsigned int o = (plane * oh + orow) * ow + ocol;
        if (winner[o] == (r % 2) * 2 + (c % 2)) g = gy[o];
    }
    gx[i] = g;
}
