// The per-image steps after (or before) the crop: flips, rotation, colour
// jitter and Gaussian blur, uint8 HWC, one image per launch.
//
// Each follows the CPU path (server/src/augment.rs) operation for operation,
// with the rounding intrinsics (__fmul_rn, __fadd_rn...) where the compiler
// would otherwise fuse a multiply and an add: the CPU rounds each one, so
// the same inputs give the same bytes.
//
// Compiled by NVRTC at run time: no includes, plain C types only.

// Output pixel (x, y) of a flip reads pixel (x', y') of the source.
extern "C" __global__ void stoker_flip_u8_hwc(
    const unsigned char* __restrict__ src,
    unsigned char* __restrict__ dst,
    unsigned int w,
    unsigned int h,
    unsigned int horizontal,
    unsigned int vertical)
{
    const unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= w * h) {
        return;
    }
    const unsigned int y = idx / w;
    const unsigned int x = idx - y * w;
    const unsigned int sx = horizontal ? w - 1 - x : x;
    const unsigned int sy = vertical ? h - 1 - y : y;
    const unsigned char* s = src + ((size_t)sy * w + sx) * 3;
    unsigned char* d = dst + (size_t)idx * 3;
    d[0] = s[0];
    d[1] = s[1];
    d[2] = s[2];
}

// Rotation about the centre, nearest neighbour, zeros outside. `sin_t` and
// `cos_t` are the host's f64 sine and cosine of the angle.
extern "C" __global__ void stoker_rotate_u8_hwc(
    const unsigned char* __restrict__ src,
    unsigned char* __restrict__ dst,
    unsigned int w,
    unsigned int h,
    double sin_t,
    double cos_t)
{
    const unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= w * h) {
        return;
    }
    const unsigned int y = idx / w;
    const unsigned int x = idx - y * w;
    const double cx = (double)w / 2.0;
    const double cy = (double)h / 2.0;
    const double dx = __dsub_rn(__dadd_rn((double)x, 0.5), cx);
    const double dy = __dsub_rn(__dadd_rn((double)y, 0.5), cy);
    const double sx = floor(__dadd_rn(__dsub_rn(__dmul_rn(dx, cos_t), __dmul_rn(dy, sin_t)), cx));
    const double sy = floor(__dadd_rn(__dadd_rn(__dmul_rn(dx, sin_t), __dmul_rn(dy, cos_t)), cy));
    unsigned char* d = dst + (size_t)idx * 3;
    if (sx >= 0.0 && sy >= 0.0 && sx < (double)w && sy < (double)h) {
        const unsigned char* s = src + ((size_t)sy * w + (size_t)sx) * 3;
        d[0] = s[0];
        d[1] = s[1];
        d[2] = s[2];
    } else {
        d[0] = 0;
        d[1] = 0;
        d[2] = 0;
    }
}

// ITU-R 601 luma in 16-bit fixed point, as the CPU path computes it.
__device__ __forceinline__ unsigned int stoker_luma(const unsigned char* p)
{
    return ((unsigned int)p[0] * 19595u + (unsigned int)p[1] * 38470u + (unsigned int)p[2] * 7471u + 0x8000u) >> 16;
}

// round() then clamp to 0..255, as the CPU path's clamp_u8.
__device__ __forceinline__ unsigned char stoker_clamp_u8(float v)
{
    return (unsigned char)fminf(fmaxf(roundf(v), 0.0f), 255.0f);
}

// Adds the luma of `n` pixels into `*sum` (zeroed by the caller): the
// contrast step's mean.
extern "C" __global__ void stoker_luma_sum_u8_hwc(
    const unsigned char* __restrict__ img,
    unsigned int n,
    unsigned long long* __restrict__ sum)
{
    __shared__ unsigned long long block_sum;
    if (threadIdx.x == 0) {
        block_sum = 0;
    }
    __syncthreads();
    const unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        atomicAdd(&block_sum, (unsigned long long)stoker_luma(img + (size_t)idx * 3));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicAdd(sum, block_sum);
    }
}

// One colour-jitter factor, in place: `which` 0 brightness, 1 contrast
// (around the mean luma of `*luma_sum` over `n` pixels), 2 saturation.
extern "C" __global__ void stoker_jitter_u8_hwc(
    unsigned char* __restrict__ img,
    unsigned int n,
    unsigned int which,
    float factor,
    const unsigned long long* __restrict__ luma_sum)
{
    const unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) {
        return;
    }
    unsigned char* p = img + (size_t)idx * 3;
    if (which == 0) {
        for (int c = 0; c < 3; ++c) {
            p[c] = stoker_clamp_u8(__fmul_rn((float)p[c], factor));
        }
        return;
    }
    float centre;
    if (which == 1) {
        const float count = (float)(n > 0 ? n : 1);
        centre = floorf(__fadd_rn(__fdiv_rn((float)*luma_sum, count), 0.5f));
    } else {
        centre = (float)stoker_luma(p);
    }
    for (int c = 0; c < 3; ++c) {
        p[c] = stoker_clamp_u8(__fadd_rn(centre, __fmul_rn(__fsub_rn((float)p[c], centre), factor)));
    }
}

// Reflect-101 border (as the CPU path's blur): ... 2 1 | 0 1 2 ... n-1 | n-2 ...
__device__ __forceinline__ int stoker_reflect(int i, int n)
{
    if (n == 1) {
        return 0;
    }
    const int period = 2 * (n - 1);
    int m = i % period;
    if (m < 0) {
        m += period;
    }
    return m >= n ? period - m : m;
}

// Gaussian blur, horizontal pass: uint8 in, float out. `kernel` holds the
// `k` normalised weights the host computed.
extern "C" __global__ void stoker_blur_rows_u8_hwc(
    const unsigned char* __restrict__ src,
    float* __restrict__ tmp,
    unsigned int w,
    unsigned int h,
    const float* __restrict__ kernel,
    unsigned int k)
{
    const unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= w * h) {
        return;
    }
    const int y = idx / w;
    const int x = idx - y * w;
    const int half = (int)k / 2;
    float acc[3] = {0.0f, 0.0f, 0.0f};
    for (int t = 0; t < (int)k; ++t) {
        const int sx = stoker_reflect(x + t - half, (int)w);
        const unsigned char* s = src + ((size_t)y * w + sx) * 3;
        for (int c = 0; c < 3; ++c) {
            acc[c] = __fadd_rn(acc[c], __fmul_rn(kernel[t], (float)s[c]));
        }
    }
    float* d = tmp + (size_t)idx * 3;
    d[0] = acc[0];
    d[1] = acc[1];
    d[2] = acc[2];
}

// Gaussian blur, vertical pass: float in, uint8 out.
extern "C" __global__ void stoker_blur_cols_u8_hwc(
    const float* __restrict__ tmp,
    unsigned char* __restrict__ dst,
    unsigned int w,
    unsigned int h,
    const float* __restrict__ kernel,
    unsigned int k)
{
    const unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= w * h) {
        return;
    }
    const int y = idx / w;
    const int x = idx - y * w;
    const int half = (int)k / 2;
    float acc[3] = {0.0f, 0.0f, 0.0f};
    for (int t = 0; t < (int)k; ++t) {
        const int sy = stoker_reflect(y + t - half, (int)h);
        const float* s = tmp + ((size_t)sy * w + x) * 3;
        for (int c = 0; c < 3; ++c) {
            acc[c] = __fadd_rn(acc[c], __fmul_rn(kernel[t], s[c]));
        }
    }
    unsigned char* d = dst + (size_t)idx * 3;
    for (int c = 0; c < 3; ++c) {
        d[c] = stoker_clamp_u8(acc[c]);
    }
}
