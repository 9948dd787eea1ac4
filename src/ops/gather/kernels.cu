// gather: the batch, picked by index from the resident byte images and
// normalised on the way, channel by channel: out = pixel * scale[c] - shift[c].

// Per-channel scale and shift (up to 4 channels), passed by value.
struct GatherNorm {
    float scale[4], shift[4];
};

__device__ __forceinline__ float gather_normalize(unsigned char p, unsigned int c, GatherNorm norm) {
    c = c < 4u ? c : 3u;
    return (float)p * norm.scale[c] - norm.shift[c];
}

extern "C" __global__ void gather_images(const unsigned char* pixels, const unsigned int* indices, float* out,
                                         unsigned int n, unsigned int size, unsigned int plane, GatherNorm norm) {
    PDL_WAIT();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * size) return;
    unsigned int example = i / size, k = i % size;
    out[i] = gather_normalize(pixels[(size_t)indices[example] * size + k], k / plane, norm);
}

extern "C" __global__ void gather_labels(const unsigned char* labels, const unsigned int* indices, unsigned int* out,
                                         unsigned int n) {
    PDL_WAIT();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = labels[indices[i]];
}

// The batch the step cursor points at: examples order[cursor[0] * stride + j]
// for j < n, images normalised and labels widened, in one kernel. An index
// past the order or the data set yields NaN pixels and label 0xffffffff, so
// the loss turns NaN and training stops with the step named.
//
// With crop or flip, image j is padded with `crop` zero pixels, cropped at
// (dy, dx) and mirrored as drawn by `gather_draw` from the step's seed
// (`cursor_step_seed(base, cursor)`) and j's place in the step's whole
// batch (offset + j): the same draw as `Augment::draw` on the CPU.
struct GatherDims {
    unsigned int n, size, stride, count, order_len, offset, rows, cols, crop, flip;
};

__device__ __forceinline__ void gather_draw(unsigned long long seed, unsigned long long image, unsigned int crop,
                                            unsigned int flip, unsigned int* dy, unsigned int* dx, bool* mirror) {
    unsigned long long z = seed ^ (image * 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    unsigned int span = 2u * crop + 1u;
    *dy = (unsigned int)(z & 0xffffULL) % span;
    *dx = (unsigned int)((z >> 16) & 0xffffULL) % span;
    *mirror = flip != 0u && (z >> 63) == 1ULL;
}

extern "C" __global__ void gather_batch(const unsigned char* pixels, const unsigned char* labels,
                                        const unsigned int* order, const unsigned int* cursor, float* x,
                                        unsigned int* labels_out, GatherDims d, GatherNorm norm,
                                        unsigned long long base) {
    PDL_WAIT();
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
    unsigned int plane = d.rows * d.cols;
    unsigned int c = k / plane;
    if (d.crop == 0u && d.flip == 0u) {
        x[i] = gather_normalize(pixels[(size_t)idx * d.size + k], c, norm);
    } else {
        unsigned int dy, dx;
        bool mirror;
        gather_draw(cursor_step_seed(base, cursor), (unsigned long long)d.offset + example, d.crop, d.flip, &dy,
                    &dx, &mirror);
        unsigned int y = (k % plane) / d.cols, col = k % d.cols;
        unsigned int py = y + dy, px = (mirror ? d.cols - 1u - col : col) + dx;
        bool inside = py >= d.crop && py < d.crop + d.rows && px >= d.crop && px < d.crop + d.cols;
        unsigned char p = inside ? pixels[(size_t)idx * d.size + c * plane + (py - d.crop) * d.cols + (px - d.crop)] : 0;
        x[i] = gather_normalize(p, c, norm);
    }
    if (k == 0) labels_out[example] = labels[idx];
}

// gather_batch without crop or flip, where an image's planes are whole
// multiples of four pixels: four pixels a thread, loaded as one word and
// stored as one float4, the same values gather_batch writes (MNIST's batch
// of 1000 is 784,000 pixels, each thread dividing its index three times).
extern "C" __global__ void gather_batch_quads(const unsigned char* pixels, const unsigned char* labels,
                                              const unsigned int* order, const unsigned int* cursor, float* x,
                                              unsigned int* labels_out, GatherDims d, GatherNorm norm) {
    PDL_WAIT();
    unsigned int q = blockIdx.x * blockDim.x + threadIdx.x, quads = d.size / 4u;
    if (q >= d.n * quads) return;
    unsigned int example = q / quads, k = (q - example * quads) * 4u;
    unsigned long long pos = (unsigned long long)cursor[0] * d.stride + d.offset + example;
    unsigned int idx = pos < d.order_len ? order[pos] : 0xffffffffu;
    float4* to = (float4*)(x + (size_t)example * d.size + k);
    if (idx >= d.count) {
        float nan = __int_as_float(0x7fc00000);
        *to = make_float4(nan, nan, nan, nan);
        if (k == 0) labels_out[example] = 0xffffffffu;
        return;
    }
    unsigned int c = k / (d.rows * d.cols);
    unsigned int p = *(const unsigned int*)(pixels + (size_t)idx * d.size + k);
    *to = make_float4(gather_normalize(p & 0xffu, c, norm), gather_normalize((p >> 8) & 0xffu, c, norm),
                      gather_normalize((p >> 16) & 0xffu, c, norm), gather_normalize(p >> 24, c, norm));
    if (k == 0) labels_out[example] = labels[idx];
}
