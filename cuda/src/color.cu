// The colour steps of a batch, each image with its own parameters
// (blockIdx.y = image, a parameter struct per image in a device array), in
// place on packed uint8 HWC RGB: lookup tables (solarize, posterize,
// invert; equalize and autocontrast through tables built on the device from
// each image's histogram), channel permutations, hue, the ImageEnhance
// blends (brightness, contrast, saturation, sharpness), and erasing.
//
// Each reproduces the CPU path (worker/image/src/augment/color.rs and
// filter.rs, themselves Pillow's C code) operation for operation, with the
// rounding intrinsics (__fmul_rn, __fadd_rn, __dmul_rn...) wherever the
// compiler could otherwise fuse a multiply and an add: the CPU rounds each
// one, so the same inputs give the same bytes.
//
// Compiled by NVRTC at run time: no includes, plain C types only.

// One image's step: the layout of `ColorParams` in color.rs. `op` is one of
// the STOKER_OP_* codes; `arg` is the table or sum slot (LUT, EQUALIZE,
// AUTOCONTRAST, CONTRAST), the packed channel order (PERMUTE: c0 | c1 << 8
// | c2 << 16) or the hue shift (HUE); `aux` is SHARPNESS's smoothed copy.
struct StokerColorParams {
    unsigned long long img;
    unsigned long long aux;
    unsigned int w;
    unsigned int h;
    unsigned int op;
    unsigned int arg;
    float factor;
    unsigned int reserved;
};

#define STOKER_OP_LUT 0u
#define STOKER_OP_PERMUTE 1u
#define STOKER_OP_HUE 2u
#define STOKER_OP_BRIGHTNESS 3u
#define STOKER_OP_CONTRAST 4u
#define STOKER_OP_SATURATION 5u
#define STOKER_OP_SHARPNESS 6u
#define STOKER_OP_EQUALIZE 7u
#define STOKER_OP_AUTOCONTRAST 8u

// ITU-R 601 luma in Pillow's 16-bit fixed point (`L = R * 299/1000 +
// G * 587/1000 + B * 114/1000`), as color.rs's `luma`.
__device__ __forceinline__ unsigned int stoker_c_luma(unsigned int r, unsigned int g, unsigned int b)
{
    return (r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16;
}

// Pillow's ImagingBlend of one value: in1 + alpha * (in2 - in1) in float,
// truncated, clipped when extrapolating (color.rs's `blend`).
__device__ __forceinline__ unsigned char stoker_c_blend(float in1, float in2, float alpha)
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

__device__ __forceinline__ unsigned char stoker_c_clip8(int v)
{
    return (unsigned char)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Pillow's rgb2hsv_row (Convert.c), as color.rs's `rgb_to_hsv`: float
// ratios, the hue's `2.0 + rc - bc` in double, the wrap `fmod(h / 6.0 +
// 1.0, 1.0)` in double, each scaled by 255 and truncated.
__device__ __forceinline__ void stoker_rgb_to_hsv(
    unsigned int r, unsigned int g, unsigned int b,
    unsigned int* hh, unsigned int* ss, unsigned int* vv)
{
    const unsigned int maxc = max(r, max(g, b));
    const unsigned int minc = min(r, min(g, b));
    *vv = maxc;
    if (minc == maxc) {
        *hh = 0;
        *ss = 0;
        return;
    }
    const float cr = (float)(maxc - minc);
    const float s = __fdiv_rn(cr, (float)maxc);
    const float rc = __fdiv_rn((float)(maxc - r), cr);
    const float gc = __fdiv_rn((float)(maxc - g), cr);
    const float bc = __fdiv_rn((float)(maxc - b), cr);
    float h;
    if (r == maxc) {
        h = __fsub_rn(bc, gc);
    } else if (g == maxc) {
        h = __double2float_rn(__dsub_rn(__dadd_rn(2.0, (double)rc), (double)bc));
    } else {
        h = __double2float_rn(__dsub_rn(__dadd_rn(4.0, (double)gc), (double)rc));
    }
    h = __double2float_rn(fmod(__dadd_rn(__ddiv_rn((double)h, 6.0), 1.0), 1.0));
    *hh = stoker_c_clip8((int)__dmul_rn((double)h, 255.0));
    *ss = stoker_c_clip8((int)__dmul_rn((double)s, 255.0));
}

// Pillow's hsv2rgb (Convert.c), as color.rs's `hsv_to_rgb`: the sector
// and fraction in double and float as C mixes them, each channel
// round()ed in double and clipped.
__device__ __forceinline__ void stoker_hsv_to_rgb(unsigned int h, unsigned int s, unsigned int v, unsigned char* out)
{
    if (s == 0) {
        out[0] = (unsigned char)v;
        out[1] = (unsigned char)v;
        out[2] = (unsigned char)v;
        return;
    }
    const double hf = __ddiv_rn(__dmul_rn((double)(float)h, 6.0), 255.0);
    const int i = (int)floor(hf);
    const float f = __double2float_rn(__dsub_rn(hf, (double)(float)i));
    const float fs = __double2float_rn(__ddiv_rn((double)(float)s, 255.0));
    const double vf = (double)(float)v;
    const unsigned char p = stoker_c_clip8((int)round(__dmul_rn(vf, __dsub_rn(1.0, (double)fs))));
    const unsigned char q = stoker_c_clip8((int)round(__dmul_rn(vf, __dsub_rn(1.0, (double)__fmul_rn(fs, f)))));
    const unsigned char t = stoker_c_clip8(
        (int)round(__dmul_rn(vf, __dsub_rn(1.0, __dmul_rn((double)fs, __dsub_rn(1.0, (double)f))))));
    const unsigned char vc = (unsigned char)v;
    switch (i % 6) {
    case 0: out[0] = vc; out[1] = t; out[2] = p; break;
    case 1: out[0] = q; out[1] = vc; out[2] = p; break;
    case 2: out[0] = p; out[1] = vc; out[2] = t; break;
    case 3: out[0] = p; out[1] = q; out[2] = vc; break;
    case 4: out[0] = t; out[1] = p; out[2] = vc; break;
    default: out[0] = vc; out[1] = p; out[2] = q; break;
    }
}

// What the per-pixel kernel needs of an image before it runs: the
// histograms of ImageOps.equalize / autocontrast (256 counts per channel
// into hist[arg * 768 ..], ImageOps' `image.histogram()`), and the luma
// sum of ImageEnhance.Contrast's mean (into sums[arg], ImageStat's sum of
// the "L" image). Both buffers zeroed by the caller; one launch for the
// batch, each block striding over its image.
extern "C" __global__ void stoker_color_stats_batch_u8_hwc(
    const StokerColorParams* __restrict__ params,
    unsigned int* __restrict__ hist,
    unsigned long long* __restrict__ sums)
{
    __shared__ unsigned int local[768];
    __shared__ unsigned long long block_sum;
    const StokerColorParams p = params[blockIdx.y];
    const unsigned int n = p.w * p.h;
    const unsigned char* img = (const unsigned char*)p.img;
    const bool histogram = p.op == STOKER_OP_EQUALIZE || p.op == STOKER_OP_AUTOCONTRAST;
    for (unsigned int i = threadIdx.x; i < 768; i += blockDim.x) {
        local[i] = 0;
    }
    if (threadIdx.x == 0) {
        block_sum = 0;
    }
    __syncthreads();
    unsigned long long sum = 0;
    for (unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        const unsigned char* px = img + (size_t)idx * 3;
        if (histogram) {
            atomicAdd(&local[px[0]], 1u);
            atomicAdd(&local[256 + px[1]], 1u);
            atomicAdd(&local[512 + px[2]], 1u);
        } else {
            sum += stoker_c_luma(px[0], px[1], px[2]);
        }
    }
    if (!histogram && sum != 0) {
        atomicAdd(&block_sum, sum);
    }
    __syncthreads();
    if (histogram) {
        unsigned int* out = hist + (size_t)p.arg * 768;
        for (unsigned int i = threadIdx.x; i < 768; i += blockDim.x) {
            if (local[i] != 0) {
                atomicAdd(&out[i], local[i]);
            }
        }
    } else if (threadIdx.x == 0) {
        atomicAdd(&sums[p.arg], block_sum);
    }
}

// Builds each image's three lookup tables (tables[arg * 768 ..], one of
// 256 per channel) from its histogram: ImageOps.equalize's (`step = (sum
// of the counts - the last non-zero count) // 255`, `lut[i] = (n + step //
// 2) // step` over the running count n, identity when step is 0 or fewer
// than two levels are present) or ImageOps.autocontrast's with cutoff 0
// (`scale = 255 / (hi - lo)`, `offset = -lo * scale`, `lut[i] = int(i *
// scale + offset)` clipped, identity when hi <= lo), as color.rs's
// `equalize` and `autocontrast`. One block per image, a thread per channel.
extern "C" __global__ void stoker_color_luts_batch(
    const StokerColorParams* __restrict__ params,
    const unsigned int* __restrict__ hist,
    unsigned char* __restrict__ tables)
{
    const StokerColorParams p = params[blockIdx.y];
    const unsigned int c = threadIdx.x;
    if (c >= 3) {
        return;
    }
    const unsigned int* h = hist + (size_t)p.arg * 768 + c * 256;
    unsigned char* lut = tables + (size_t)p.arg * 768 + c * 256;
    bool identity = true;
    if (p.op == STOKER_OP_EQUALIZE) {
        unsigned long long total = 0;
        unsigned long long last = 0;
        unsigned int present = 0;
        for (int i = 0; i < 256; ++i) {
            if (h[i] > 0) {
                total += h[i];
                last = h[i];
                present += 1;
            }
        }
        if (present > 1) {
            const unsigned long long step = (total - last) / 255ull;
            if (step != 0) {
                identity = false;
                unsigned long long n = step / 2;
                for (int i = 0; i < 256; ++i) {
                    const unsigned long long v = n / step;
                    lut[i] = (unsigned char)(v < 255ull ? v : 255ull);
                    n += h[i];
                }
            }
        }
    } else {
        int lo = -1;
        int hi = 0;
        for (int i = 0; i < 256; ++i) {
            if (h[i] > 0) {
                if (lo < 0) {
                    lo = i;
                }
                hi = i;
            }
        }
        if (lo < 0) {
            lo = 0;
        }
        if (hi > lo) {
            identity = false;
            const double scale = __ddiv_rn(255.0, (double)(hi - lo));
            const double offset = __dmul_rn(-(double)lo, scale);
            for (int i = 0; i < 256; ++i) {
                const long long v = (long long)__dadd_rn(__dmul_rn((double)i, scale), offset);
                lut[i] = (unsigned char)(v < 0 ? 0 : (v > 255 ? 255 : v));
            }
        }
    }
    if (identity) {
        for (int i = 0; i < 256; ++i) {
            lut[i] = (unsigned char)i;
        }
    }
}

// Pillow's ImageFilter.SMOOTH (3x3, 1 1 1 / 1 5 1 / 1 1 1 over 13) as
// ImagingFilter3x3 computes it, the degenerate image of
// ImageEnhance.Sharpness: float sums from the bottom row up, plus 0.5,
// truncated; the border rows and columns (and images under 3x3) copied
// (filter.rs's `smooth`). Writes image `img` into `aux`, out of place.
extern "C" __global__ void stoker_smooth_batch_u8_hwc(const StokerColorParams* __restrict__ params)
{
    const StokerColorParams p = params[blockIdx.y];
    const unsigned int n = p.w * p.h;
    const unsigned char* src = (const unsigned char*)p.img;
    unsigned char* dst = (unsigned char*)p.aux;
    // The kernel's weights, each rounded to float as Pillow's are.
    const float k1 = __fdiv_rn(1.0f, 13.0f);
    const float k5 = __fdiv_rn(5.0f, 13.0f);
    for (unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        const unsigned int y = idx / p.w;
        const unsigned int x = idx - y * p.w;
        const unsigned char* s = src + (size_t)idx * 3;
        unsigned char* d = dst + (size_t)idx * 3;
        if (p.w < 3 || p.h < 3 || x == 0 || y == 0 || x == p.w - 1 || y == p.h - 1) {
            d[0] = s[0];
            d[1] = s[1];
            d[2] = s[2];
            continue;
        }
        const size_t row = (size_t)p.w * 3;
        for (int c = 0; c < 3; ++c) {
            const unsigned char* below = s + row + c;
            const unsigned char* here = s + c;
            const unsigned char* above = s - row + c;
            // row(yy) = at(x - 1) * k[0] + at(x) * k[1] + at(x + 1) * k[2]
            const float rb = __fadd_rn(__fadd_rn(__fmul_rn((float)below[-3], k1), __fmul_rn((float)below[0], k1)),
                                       __fmul_rn((float)below[3], k1));
            const float rh = __fadd_rn(__fadd_rn(__fmul_rn((float)here[-3], k1), __fmul_rn((float)here[0], k5)),
                                       __fmul_rn((float)here[3], k1));
            const float ra = __fadd_rn(__fadd_rn(__fmul_rn((float)above[-3], k1), __fmul_rn((float)above[0], k1)),
                                       __fmul_rn((float)above[3], k1));
            float ss = 0.5f;
            ss = __fadd_rn(ss, rb);
            ss = __fadd_rn(ss, rh);
            ss = __fadd_rn(ss, ra);
            d[c] = ss <= 0.0f ? 0 : (ss >= 255.0f ? 255 : (unsigned char)ss);
        }
    }
}

// The per-pixel colour steps of a batch, in place, image blockIdx.y with
// its own op:
// - LUT, EQUALIZE, AUTOCONTRAST: each channel through its table of
//   tables[arg * 768 ..] (Image.point; ImageOps' equalize and autocontrast
//   apply their tables so);
// - PERMUTE: output channel c is input channel (arg >> 8c) & 0xff
//   (torchvision's permute_channels);
// - HUE: Pillow's RGB -> HSV, h += arg (uint8 wrap), HSV -> RGB
//   (torchvision's adjust_hue on PIL);
// - BRIGHTNESS, CONTRAST, SATURATION, SHARPNESS: ImageEnhance's blend with
//   black, with int(mean luma + 0.5) of sums[arg], with each pixel's luma,
//   with the SMOOTH copy at aux.
extern "C" __global__ void stoker_color_batch_u8_hwc(
    const StokerColorParams* __restrict__ params,
    const unsigned char* __restrict__ tables,
    const unsigned long long* __restrict__ sums)
{
    const StokerColorParams p = params[blockIdx.y];
    const unsigned int n = p.w * p.h;
    unsigned char* img = (unsigned char*)p.img;
    float centre = 0.0f;
    if (p.op == STOKER_OP_CONTRAST) {
        // int(ImageStat.Stat(L).mean[0] + 0.5)
        const double count = (double)(n > 0 ? n : 1);
        centre = (float)(unsigned int)__dadd_rn(__ddiv_rn((double)sums[p.arg], count), 0.5);
    }
    for (unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        unsigned char* px = img + (size_t)idx * 3;
        const unsigned int r = px[0];
        const unsigned int g = px[1];
        const unsigned int b = px[2];
        switch (p.op) {
        case STOKER_OP_LUT:
        case STOKER_OP_EQUALIZE:
        case STOKER_OP_AUTOCONTRAST: {
            const unsigned char* table = tables + (size_t)p.arg * 768;
            px[0] = table[r];
            px[1] = table[256 + g];
            px[2] = table[512 + b];
            break;
        }
        case STOKER_OP_PERMUTE: {
            const unsigned int src[3] = {r, g, b};
            px[0] = (unsigned char)src[p.arg & 0xff];
            px[1] = (unsigned char)src[(p.arg >> 8) & 0xff];
            px[2] = (unsigned char)src[(p.arg >> 16) & 0xff];
            break;
        }
        case STOKER_OP_HUE: {
            unsigned int h, s, v;
            stoker_rgb_to_hsv(r, g, b, &h, &s, &v);
            stoker_hsv_to_rgb((h + p.arg) & 0xff, s, v, px);
            break;
        }
        case STOKER_OP_BRIGHTNESS:
        case STOKER_OP_CONTRAST:
            px[0] = stoker_c_blend(centre, (float)r, p.factor);
            px[1] = stoker_c_blend(centre, (float)g, p.factor);
            px[2] = stoker_c_blend(centre, (float)b, p.factor);
            break;
        case STOKER_OP_SATURATION: {
            const float l = (float)stoker_c_luma(r, g, b);
            px[0] = stoker_c_blend(l, (float)r, p.factor);
            px[1] = stoker_c_blend(l, (float)g, p.factor);
            px[2] = stoker_c_blend(l, (float)b, p.factor);
            break;
        }
        case STOKER_OP_SHARPNESS: {
            const unsigned char* d = (const unsigned char*)p.aux + (size_t)idx * 3;
            px[0] = stoker_c_blend((float)d[0], (float)r, p.factor);
            px[1] = stoker_c_blend((float)d[1], (float)g, p.factor);
            px[2] = stoker_c_blend((float)d[2], (float)b, p.factor);
            break;
        }
        default:
            break;
        }
    }
}

// One image's RandomErasing: the layout of `EraseParams` in color.rs.
// The box (left, top, bw x bh) lies inside the w x h image; `noise` 0
// writes the colour `fill` (R | G << 8 | B << 16), 1 the noise of `seed`.
struct StokerEraseParams {
    unsigned long long img;
    unsigned int w;
    unsigned int h;
    unsigned int left;
    unsigned int top;
    unsigned int bw;
    unsigned int bh;
    unsigned int noise;
    unsigned int fill;
    unsigned long long seed;
    float scale[3];
    float offset[3];
};

// SplitMix64's finaliser (core's rng::mix64).
__device__ __forceinline__ unsigned long long stoker_mix64(unsigned long long z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// core's erase_noise: Box-Muller in double on two counter-based uniforms.
// The uniforms and the products by powers of two are exact; log and cos
// are CUDA's (1 and 2 ulp at most, where Rust calls the C library's), so
// the double may differ from the CPU's in its last bits; the result is
// rounded to float before use, which absorbs that but for values within a
// few double ulps of a float rounding boundary.
__device__ __forceinline__ double stoker_erase_noise(unsigned long long seed, unsigned long long index)
{
    const unsigned long long a = stoker_mix64(seed ^ stoker_mix64(index * 2ull));
    const unsigned long long b = stoker_mix64(seed ^ stoker_mix64(index * 2ull + 1ull));
    const double unit = 1.0 / 9007199254740992.0; // 2^-53
    const double u1 = __dmul_rn(__dadd_rn((double)(a >> 11), 1.0), unit);
    const double u2 = __dmul_rn((double)(b >> 11), unit);
    const double tau = 6.283185307179586476925286766559;
    return __dmul_rn(sqrt(__dmul_rn(-2.0, log(u1))), cos(__dmul_rn(tau, u2)));
}

// torchvision's RandomErasing as color.rs's `erase`: the box overwritten
// with a colour, or with round(n * scale[c] + offset[c]) clipped to
// 0..255, n the noise at (pixel index in the box) * 3 + channel. One
// launch for the batch, in place.
extern "C" __global__ void stoker_erase_batch_u8_hwc(const StokerEraseParams* __restrict__ params)
{
    const StokerEraseParams p = params[blockIdx.y];
    const unsigned int n = p.bw * p.bh;
    unsigned char* img = (unsigned char*)p.img;
    for (unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        const unsigned int by = idx / p.bw;
        const unsigned int bx = idx - by * p.bw;
        unsigned char* px = img + ((size_t)(p.top + by) * p.w + (p.left + bx)) * 3;
        for (unsigned int c = 0; c < 3; ++c) {
            if (p.noise == 0) {
                px[c] = (unsigned char)((p.fill >> (8 * c)) & 0xff);
            } else {
                const float v = __double2float_rn(stoker_erase_noise(p.seed, (unsigned long long)idx * 3ull + c));
                const float x = roundf(__fadd_rn(__fmul_rn(v, p.scale[c]), p.offset[c]));
                px[c] = (unsigned char)fminf(fmaxf(x, 0.0f), 255.0f);
            }
        }
    }
}
