// The step cursor: [step in epoch, global step (low), global step (high), 0],
// in the arena so that a replayed graph reads which step it is.

__device__ __forceinline__ unsigned long long cursor_global_step(const unsigned int* cursor) {
    return (unsigned long long)cursor[1] | ((unsigned long long)cursor[2] << 32);
}

// The learning rate of the step the cursor is at (`ops::lr::LrAt`): a
// schedule's table holds one rate per global step, its last one holding for
// every step past its end (a constant rate is a table of one).
__device__ __forceinline__ float cursor_lr(const float* table, unsigned int len, const unsigned int* cursor) {
    unsigned long long step = cursor_global_step(cursor);
    return table[step < len ? step : len - 1];
}

// The dropout seed of a step: SplitMix64 seeded with base ^ step * C, as
// `cursor::step_seed` on the host.
__device__ __forceinline__ unsigned long long cursor_step_seed(unsigned long long base, const unsigned int* cursor) {
    unsigned long long z = (base ^ (cursor_global_step(cursor) * 0xD6E8FEB86659FD93ULL)) + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Records the step's loss at its slot and moves the cursor on. One thread.
extern "C" __global__ void finish_step(const float* loss, float* losses, unsigned int slots, unsigned int* cursor) {
    PDL_WAIT();
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    unsigned int step = cursor[0];
    if (step < slots) losses[step] = loss[0];
    cursor[0] = step + 1;
    unsigned long long global = cursor_global_step(cursor) + 1;
    cursor[1] = (unsigned int)global;
    cursor[2] = (unsigned int)(global >> 32);
}
