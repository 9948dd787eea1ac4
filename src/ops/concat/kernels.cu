// concat along channels: one part of `channels` channels sits at channels
// first .. first + channels of an output of `total` channels, planes of
// `area` elements, `images` images. One thread per element of the part.

extern "C" __global__ void concat_forward(const float* part, float* y, unsigned int images,
                                          unsigned int channels, unsigned int first, unsigned int total,
                                          unsigned int area) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int run = channels * area;
    if (i >= images * run) return;
    unsigned int n = i / run, within = i % run;
    y[(size_t)n * total * area + (size_t)first * area + within] = part[i];
}

extern "C" __global__ void concat_backward(const float* gy, float* gpart, unsigned int images,
                                           unsigned int channels, unsigned int first, unsigned int total,
                                           unsigned int area) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int run = channels * area;
    if (i >= images * run) return;
    unsigned int n = i / run, within = i % run;
    gpart[i] = gy[(size_t)n * total * area + (size_t)first * area + within];
}
