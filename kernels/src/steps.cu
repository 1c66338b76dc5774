// The steps after (or before) the crop: nearest affine warps (flips
// included) of a batch, one launch per step index; colour enhancement and
// Gaussian blur, one image per launch; uint8 HWC.
//
// Each follows the CPU path (server/image/src/augment/) operation for operation,
// with the rounding intrinsics (__fmul_rn, __fadd_rn...) where the compiler
// would otherwise fuse a multiply and an add: the CPU rounds each one, so
// the same inputs give the same bytes.
//
// Compiled by NVRTC at run time: no includes, plain C types only.

// PIL's affine warp with nearest neighbour (Image.transform(AFFINE,
// NEAREST), its 16.16 fixed-point path): output pixel (x, y) reads input
// pixel ((a2 + y*a1 + x*a0) >> 16, (a5 + y*a4 + x*a3) >> 16), the host's
// fixed-point matrix with the pixel centre folded in; outside the input it
// takes the fill colour. Covers flips (x -> w - 1 - x exactly), rotation
// (any angle, expand, centre), RandomAffine and the policies' shears and
// translations.
// One image's warp of stoker_affine_nearest_batch_u8_hwc: the layout of
// `WarpParams` in worker.rs.
struct StokerWarpParams {
    unsigned long long src;
    unsigned long long dst;
    unsigned int in_w;
    unsigned int in_h;
    unsigned int out_w;
    unsigned int out_h;
    unsigned int fill;
    unsigned int reserved;
    long long a[6];
};

// stoker_affine_nearest_u8_hwc for a batch: image blockIdx.y warps with its
// own parameters (flips are warps too: x -> w - 1 - x exactly), so a round
// of geometric steps over a batch is one launch.
extern "C" __global__ void stoker_affine_nearest_batch_u8_hwc(const StokerWarpParams* __restrict__ params)
{
    const StokerWarpParams p = params[blockIdx.y];
    const unsigned int n = p.out_w * p.out_h;
    const unsigned char* src = (const unsigned char*)p.src;
    unsigned char* dst = (unsigned char*)p.dst;
    for (unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        const long long y = idx / p.out_w;
        const long long x = idx - y * p.out_w;
        const long long xin = (p.a[2] + y * p.a[1] + x * p.a[0]) >> 16;
        const long long yin = (p.a[5] + y * p.a[4] + x * p.a[3]) >> 16;
        unsigned char* d = dst + (size_t)idx * 3;
        if (xin >= 0 && yin >= 0 && xin < (long long)p.in_w && yin < (long long)p.in_h) {
            const unsigned char* s = src + ((size_t)yin * p.in_w + (size_t)xin) * 3;
            d[0] = s[0];
            d[1] = s[1];
            d[2] = s[2];
        } else {
            d[0] = (unsigned char)(p.fill & 0xff);
            d[1] = (unsigned char)((p.fill >> 8) & 0xff);
            d[2] = (unsigned char)((p.fill >> 16) & 0xff);
        }
    }
}

// ITU-R 601 luma in 16-bit fixed point, as the CPU path computes it.
__device__ __forceinline__ unsigned int stoker_luma(const unsigned char* p)
{
    return ((unsigned int)p[0] * 19595u + (unsigned int)p[1] * 38470u + (unsigned int)p[2] * 7471u + 0x8000u) >> 16;
}

// round() then clamp to 0..255, as the CPU path's blur.
__device__ __forceinline__ unsigned char stoker_clamp_u8(float v)
{
    return (unsigned char)fminf(fmaxf(roundf(v), 0.0f), 255.0f);
}

// Pillow's ImagingBlend of one value: in1 + alpha * (in2 - in1) in float,
// truncated, clipped when extrapolating (the CPU path's blend).
__device__ __forceinline__ unsigned char stoker_blend_u8(float in1, float in2, float alpha)
{
    const float v = __fadd_rn(in1, __fmul_rn(alpha, __fsub_rn(in2, in1)));
    if (v <= 0.0f) {
        return 0;
    }
    if (v >= 255.0f) {
        return 255;
    }
    return (unsigned char)v;
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

// One ImageEnhance blend, in place: `which` 0 brightness (with black),
// 1 contrast (with the mean luma of `*luma_sum` over `n` pixels, as
// int(mean + 0.5)), 2 saturation (with each pixel's luma).
extern "C" __global__ void stoker_enhance_u8_hwc(
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
    float centre;
    if (which == 0) {
        centre = 0.0f;
    } else if (which == 1) {
        const double count = (double)(n > 0 ? n : 1);
        centre = (float)(unsigned int)(__dadd_rn(__ddiv_rn((double)*luma_sum, count), 0.5));
    } else {
        centre = (float)stoker_luma(p);
    }
    for (int c = 0; c < 3; ++c) {
        p[c] = stoker_blend_u8(centre, (float)p[c], factor);
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
