// gather: the batch, picked by index from the resident byte images and
// normalised on the way: out = pixel * scale - shift.

extern "C" __global__ void gather_images(const unsigned char* pixels, const unsigned int* indices, float* out,
                                         unsigned int n, unsigned int size, float scale, float shift) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * size) return;
    unsigned int example = i / size, k = i % size;
    out[i] = (float)pixels[(size_t)indices[example] * size + k] * scale - shift;
}

extern "C" __global__ void gather_labels(const unsigned char* labels, const unsigned int* indices, unsigned int* out,
                                         unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = labels[indices[i]];
}
