// The steps after (or before) the crop: bilinear and bicubic affine warps
// and Pillow's resampling (the resizes' other filters) of a batch, one
// launch per step round (a resampling pass per axis); Gaussian blur, one
// image per launch; uint8 HWC.
//
// Each follows the CPU path (worker/image/src/augment/) operation for operation,
// with the rounding intrinsics (__fmul_rn, __fadd_rn...) where the compiler
// would otherwise fuse a multiply and an add: the CPU rounds each one, so
// the same inputs give the same bytes.
//
// Compiled by NVRTC at run time: no includes, plain C types only.

// PIL's affine warp with its bilinear and bicubic filters
// (Image.transform(AFFINE, BILINEAR | BICUBIC), Geometry.c's
// bilinear_filter32RGB / bicubic_filter32RGB), of a batch: output pixel
// (x, y) samples the input at the matrix applied to (x + 0.5, y + 0.5);
// outside the input it takes the fill colour. The arithmetic is the CPU
// path's (worker/image/src/augment/geometry.rs), in double, each multiply
// and add rounded on its own (no fused multiply-add), so the bytes are the
// same. Nearest warps are chains (resize.cu).
// One image's warp: the layout of `WarpParams` in worker.rs.
struct StokerWarpParams {
    unsigned long long src;
    unsigned long long dst;
    unsigned int in_w;
    unsigned int in_h;
    unsigned int out_w;
    unsigned int out_h;
    unsigned int fill;
    unsigned int filter; // 0 bilinear, 1 bicubic
    double a[6];
};

__device__ __forceinline__ double stoker_lerp(double a, double b, double d)
{
    return __dadd_rn(a, __dmul_rn(__dsub_rn(b, a), d));
}

// Pillow's bicubic (a = -1) of four values at d.
__device__ __forceinline__ double stoker_cubic(double v1, double v2, double v3, double v4, double d)
{
    const double p1 = v2;
    const double p2 = __dadd_rn(-v1, v3);
    const double p3 = __dsub_rn(__dadd_rn(__dmul_rn(2.0, __dsub_rn(v1, v2)), v3), v4);
    const double p4 = __dadd_rn(__dsub_rn(__dadd_rn(-v1, v2), v3), v4);
    return __dadd_rn(p1, __dmul_rn(d, __dadd_rn(p2, __dmul_rn(d, __dadd_rn(p3, __dmul_rn(d, p4))))));
}

__device__ __forceinline__ long long stoker_clampll(long long v, long long lo, long long hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

extern "C" __global__ void stoker_affine_filter_batch_u8_hwc(const StokerWarpParams* __restrict__ params)
{
    const StokerWarpParams p = params[blockIdx.y];
    const unsigned int n = p.out_w * p.out_h;
    const unsigned char* src = (const unsigned char*)p.src;
    unsigned char* dst = (unsigned char*)p.dst;
    const long long iw = p.in_w, ih = p.in_h;
    for (unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        const unsigned int y = idx / p.out_w;
        const unsigned int x = idx - y * p.out_w;
        const double xc = (double)x + 0.5, yc = (double)y + 0.5;
        double xin = __dadd_rn(__dadd_rn(__dmul_rn(p.a[0], xc), __dmul_rn(p.a[1], yc)), p.a[2]);
        double yin = __dadd_rn(__dadd_rn(__dmul_rn(p.a[3], xc), __dmul_rn(p.a[4], yc)), p.a[5]);
        unsigned char* d = dst + (size_t)idx * 3;
        if (!(xin >= 0.0 && xin < (double)iw && yin >= 0.0 && yin < (double)ih)) {
            d[0] = (unsigned char)(p.fill & 0xff);
            d[1] = (unsigned char)((p.fill >> 8) & 0xff);
            d[2] = (unsigned char)((p.fill >> 16) & 0xff);
            continue;
        }
        xin = __dsub_rn(xin, 0.5);
        yin = __dsub_rn(yin, 0.5);
        long long fx = (long long)floor(xin), fy = (long long)floor(yin);
        const double dx = __dsub_rn(xin, (double)fx), dy = __dsub_rn(yin, (double)fy);
#define STOKER_AT(yy, xx, c) ((double)src[((size_t)(yy) * (size_t)iw + (size_t)(xx)) * 3 + (c)])
        if (p.filter == 0) {
            const long long x0 = stoker_clampll(fx, 0, iw - 1), x1 = stoker_clampll(fx + 1, 0, iw - 1);
            const long long yy = stoker_clampll(fy, 0, ih - 1);
            const bool next = fy + 1 >= 0 && fy + 1 < ih;
            for (int c = 0; c < 3; ++c) {
                const double v1 = stoker_lerp(STOKER_AT(yy, x0, c), STOKER_AT(yy, x1, c), dx);
                const double v2 = next ? stoker_lerp(STOKER_AT(fy + 1, x0, c), STOKER_AT(fy + 1, x1, c), dx) : v1;
                d[c] = (unsigned char)stoker_lerp(v1, v2, dy);
            }
        } else {
            fx -= 1;
            fy -= 1;
            long long xs[4];
            for (int k = 0; k < 4; ++k) {
                xs[k] = stoker_clampll(fx + k, 0, iw - 1);
            }
            for (int c = 0; c < 3; ++c) {
#define STOKER_ROW(yy) stoker_cubic(STOKER_AT(yy, xs[0], c), STOKER_AT(yy, xs[1], c), STOKER_AT(yy, xs[2], c), STOKER_AT(yy, xs[3], c), dx)
                const double v1 = STOKER_ROW(stoker_clampll(fy, 0, ih - 1));
                const double v2 = (fy + 1 >= 0 && fy + 1 < ih) ? STOKER_ROW(fy + 1) : v1;
                const double v3 = (fy + 2 >= 0 && fy + 2 < ih) ? STOKER_ROW(fy + 2) : v2;
                const double v4 = (fy + 3 >= 0 && fy + 3 < ih) ? STOKER_ROW(fy + 3) : v3;
#undef STOKER_ROW
                const double v = stoker_cubic(v1, v2, v3, v4, dy);
                d[c] = v <= 0.0 ? 0 : (v >= 255.0 ? 255 : (unsigned char)v);
            }
        }
#undef STOKER_AT
    }
}

// round() then clamp to 0..255, as the CPU path's blur.
__device__ __forceinline__ unsigned char stoker_clamp_u8(float v)
{
    return (unsigned char)fminf(fmaxf(roundf(v), 0.0f), 255.0f);
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

// Pillow's resampling (Resample.c, as worker/image/src/augment/resample.rs
// ports it) of a batch, one pass along one axis per launch: each output
// pixel is the fixed-point sum of its input run times its 8-bit weights
// (22 fractional bits, computed on the host by that port), rounded by
// adding half, shifted and clamped. Integer arithmetic: the bytes are the
// CPU's. The horizontal pass reads rows `row0 ..` of its source; the
// vertical pass reads source row `ymin - row0` for the filter's row `ymin`.
// One image's pass: the layout of `ResampleParams` in resample.rs.
struct StokerResampleParams {
    unsigned long long src;
    unsigned long long dst;   // out_w x out_h, packed rows
    unsigned int src_pitch;   // bytes per source row
    unsigned int out_w;
    unsigned int out_h;
    unsigned int vertical;    // 0: along rows, 1: along columns
    unsigned int ksize;       // weights per output
    unsigned int coeffs;      // offset in `coeffs` of the (first, count)
                              // pairs, then the out x ksize weights
    unsigned int row0;
    unsigned int reserved;    // keeps the struct 8-byte aligned
};

extern "C" __global__ void stoker_resample_batch_u8_hwc(
    const StokerResampleParams* __restrict__ params,
    const int* __restrict__ coeffs)
{
    const StokerResampleParams p = params[blockIdx.y];
    const unsigned int n = p.out_w * p.out_h;
    const unsigned char* src = (const unsigned char*)p.src;
    unsigned char* dst = (unsigned char*)p.dst;
    const unsigned int outs = p.vertical ? p.out_h : p.out_w;
    const int* bounds = coeffs + p.coeffs;
    const int* weights = bounds + 2 * (size_t)outs;
    for (unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        const unsigned int y = idx / p.out_w;
        const unsigned int x = idx - y * p.out_w;
        const unsigned int o = p.vertical ? y : x;
        const int first = bounds[2 * o];
        const int count = bounds[2 * o + 1];
        const int* k = weights + (size_t)o * p.ksize;
        int s0 = 1 << 21, s1 = 1 << 21, s2 = 1 << 21;
        for (int i = 0; i < count; ++i) {
            const unsigned char* s = p.vertical
                ? src + (size_t)(first - (int)p.row0 + i) * p.src_pitch + (size_t)x * 3
                : src + (size_t)(y + p.row0) * p.src_pitch + (size_t)(first + i) * 3;
            s0 += (int)s[0] * k[i];
            s1 += (int)s[1] * k[i];
            s2 += (int)s[2] * k[i];
        }
        unsigned char* d = dst + (size_t)idx * 3;
        d[0] = (unsigned char)min(max(s0 >> 22, 0), 255);
        d[1] = (unsigned char)min(max(s1 >> 22, 0), 255);
        d[2] = (unsigned char)min(max(s2 >> 22, 0), 255);
    }
}
