// window: a language model's window of tokens, [T, B] time-major, read at
// the window `which[0]` names (the step cursor's step in the epoch, or an
// index the step uploaded). Stream b's inputs of window k begin at
// (b * count + k) * steps; each target is the token after its input. A
// window past the split gives ids 0xffffffff (the embedding turns them NaN).
extern "C" __global__ void gather_window(const unsigned int* tokens, const unsigned int* which, unsigned int* inputs,
                                         unsigned int* targets, unsigned int steps, unsigned int streams,
                                         unsigned int count) {
    PDL_WAIT();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= steps * streams) return;
    unsigned int k = which[0];
    if (k >= count) {
        inputs[i] = 0xffffffffu;
        targets[i] = 0xffffffffu;
        return;
    }
    unsigned int t = i / streams, b = i % streams;
    size_t at = ((size_t)b * count + k) * steps + t;
    inputs[i] = tokens[at];
    targets[i] = tokens[at + 1];
}
