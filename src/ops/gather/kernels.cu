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

// The batch the step cursor points at: examples order[cursor[0] * stride + j]
// for j < n, images normalised and labels widened, in one kernel. An index
// past the order or the data set yields NaN pixels and label 0xffffffff, so
// the loss turns NaN and training stops with the step named.
struct GatherDims {
    unsigned int n, size, stride, count, order_len, offset;
};

extern "C" __global__ void gather_batch(const unsigned char* pixels, const unsigned char* labels,
                                        const unsigned int* order, const unsigned int* cursor, float* x,
                                        unsigned int* labels_out, GatherDims d, float scale, float shift) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= d.n * d.size) return;
    unsigned int example = i / d.size, k = i % d.size;
    unsigned long long pos = (unsigned long long)cursor[0] * d.stride + d.offset + example;
    unsigned int idx = pos < d.order_len ? order[pos] : 0xffffffffu;
    if (idx >= d.count) {
        x[i] = __int_as_float(0x7fc00000);
        if (k == 0) labels_out[example] = 0xffffffffu;
        return;
    }
    x[i] = (float)pixels[(size_t)idx * d.size + k] * scale - shift;
    if (k == 0) labels_out[example] = labels[idx];
}
