// sentences: batch `which[0]` of a bucket of sentences, [T, B] time-major ids
// with each row's class, where its last word's hidden state is in [T*B, H]
// ((length - 1) * B + b) and its weight in the batch's mean loss (B / real for
// a real row, 0 for a padding row of length 0). Row b of batch k is the
// bucket's row order[k * B + b]. A batch or row past its table gives ids and
// classes 0xffffffff: the embedding turns the ids NaN and the loss is NaN,
// which training reports (the gathers' convention).
extern "C" __global__ void gather_sentences(const unsigned int* tokens, const unsigned int* lengths,
                                            const unsigned int* labels, const unsigned int* order,
                                            const unsigned int* which, unsigned int* ids, unsigned int* classes,
                                            unsigned int* last, float* weights, unsigned int steps,
                                            unsigned int batch, unsigned int rows, unsigned int order_len) {
    PDL_WAIT();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= steps * batch) return;
    unsigned int t = i / batch, b = i % batch;
    size_t first = (size_t)which[0] * batch;
    bool batch_ok = first + batch <= order_len;
    unsigned int row = batch_ok ? order[first + b] : 0xffffffffu;
    bool ok = batch_ok && row < rows;
    ids[i] = ok ? tokens[(size_t)row * steps + t] : 0xffffffffu;
    if (t != 0) return;
    unsigned int real = 0;
    for (unsigned int j = 0; batch_ok && j < batch; ++j) {
        unsigned int r = order[first + j];
        real += (r < rows && lengths[r] > 0) ? 1u : 0u;
    }
    unsigned int length = ok ? lengths[row] : 0u;
    classes[b] = ok ? labels[row] : 0xffffffffu;
    last[b] = (length > 0 ? length - 1 : 0) * batch + b;
    weights[b] = (length > 0 && real > 0) ? (float)batch / (float)real : 0.0f;
}
