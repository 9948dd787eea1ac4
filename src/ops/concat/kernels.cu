// concat along channels: one part of `channels` channels sits at channels
// first .. first + channels of an output of `total` channels, planes of
// `area` elements, `images` images. One thread per element of the part.
// Pure copies, so a template over the element type (fp32, or bf16 in a
// mixed-precision step) moves each element as it is.

template <typename T>
__device__ void concat_forward_t(const T* part, T* y, unsigned int images, unsigned int channels,
                                 unsigned int first, unsigned int total, unsigned int area) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int run = channels * area;
    if (i >= images * run) return;
    unsigned int n = i / run, within = i % run;
    y[(size_t)n * total * area + (size_t)first * area + within] = part[i];
}
extern "C" __global__ void concat_forward(const float* part, float* y, unsigned int images,
                                          unsigned int channels, unsigned int first, unsigned int total,
                                          unsigned int area) {
    PDL_WAIT();
    concat_forward_t(part, y, images, channels, first, total, area);
}
extern "C" __global__ void concat_forward_bf16(const bf16* part, bf16* y, unsigned int images,
                                               unsigned int channels, unsigned int first, unsigned int total,
                                               unsigned int area) {
    PDL_WAIT();
    concat_forward_t(part, y, images, channels, first, total, area);
}

template <typename T>
__device__ void concat_backward_t(const T* gy, T* gpart, unsigned int images, unsigned int channels,
                                  unsigned int first, unsigned int total, unsigned int area) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int run = channels * area;
    if (i >= images * run) return;
    unsigned int n = i / run, within = i % run;
    gpart[i] = gy[(size_t)n * total * area + (size_t)first * area + within];
}
extern "C" __global__ void concat_backward(const float* gy, float* gpart, unsigned int images,
                                           unsigned int channels, unsigned int first, unsigned int total,
                                           unsigned int area) {
    PDL_WAIT();
    concat_backward_t(gy, gpart, images, channels, first, total, area);
}
extern "C" __global__ void concat_backward_bf16(const bf16* gy, bf16* gpart, unsigned int images,
                                                unsigned int channels, unsigned int first, unsigned int total,
                                                unsigned int area) {
    PDL_WAIT();
    concat_backward_t(gy, gpart, images, channels, first, total, area);
}
