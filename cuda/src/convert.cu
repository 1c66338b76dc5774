// The client's last step before training: a batch of uint8 HWC RGB images,
// as the workers sent them, becomes what a training step takes, in one
// launch (per 65535 images) on the training GPU:
//
//   stoker_convert_nchw_{f32,f16,bf16}  [B,H,W,3] uint8 -> [B,3,H,W]
//   stoker_convert_nhwc_{f32,f16,bf16}  [B,H,W,3] uint8 -> [B,H,W,3]
//   stoker_convert_nchw_u8              [B,H,W,3] uint8 -> [B,3,H,W] uint8
//
// The float kernels compute out = fmaf(x, scale[c], bias[c]) in float32,
// where the host folds (x / 255 - mean[c]) / std[c] into
// scale = 1 / (255 std) and bias = -mean / std, then round to the output
// type. float16 and bfloat16 are written as their bit patterns (unsigned
// short), rounded to nearest even here: NVRTC may not find cuda_fp16.h or
// cuda_bf16.h at run time, so no header is used. The uint8 kernel only
// permutes.
//
// Launch: blockIdx.y is the image, counted from `first`; x covers a
// 256-thread block's share of the image. With `vec4` set (the host sets it
// when H x W is a multiple of 4 and both pointers are aligned for it) each
// thread takes four pixels (NCHW) or four elements (NHWC): word loads and
// one vector store per output plane, so a warp reads and writes whole
// contiguous segments. Without it a thread takes one pixel (NCHW: three
// coalesced plane stores) or one element (NHWC).
//
// Compiled by NVRTC at run time: no includes, plain C types only.

struct alignas(16) StokerFloat4 {
    float x, y, z, w;
};

struct alignas(8) StokerUint2 {
    unsigned int x, y;
};

// float32 -> IEEE binary16 bits, round to nearest, ties to even.
__device__ __forceinline__ unsigned short stoker_f16_bits(float f)
{
    const unsigned int x = __float_as_uint(f);
    const unsigned int sign = (x >> 16) & 0x8000u;
    const unsigned int a = x & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return (unsigned short)(sign | 0x7e00u); // NaN stays a (quiet) NaN
    }
    if (a >= 0x477ff000u) {
        return (unsigned short)(sign | 0x7c00u); // 65520 and up round to infinity
    }
    if (a >= 0x38800000u) {
        // Normal in half: rebias the exponent (127 -> 15) and round away the
        // 13 low mantissa bits; a carry moves into the exponent correctly.
        const unsigned int r = a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u);
        return (unsigned short)(sign | (r >> 13));
    }
    // Subnormal in half (or zero): the value in units of 2^-24, rounded.
    const unsigned int e = a >> 23;
    if (e < 102u) {
        return (unsigned short)sign; // under 2^-25: rounds to zero
    }
    const unsigned int m = (a & 0x7fffffu) | 0x800000u;
    const unsigned int shift = 126u - e; // 14..24
    unsigned int q = m >> shift;
    const unsigned int rest = m & ((1u << shift) - 1u);
    const unsigned int half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u))) {
        q += 1u; // 0x400 is the smallest normal, as it should be
    }
    return (unsigned short)(sign | q);
}

// float32 -> bfloat16 bits, round to nearest, ties to even.
__device__ __forceinline__ unsigned short stoker_bf16_bits(float f)
{
    const unsigned int x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((x >> 16) | 0x0040u); // quiet NaN
    }
    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float stoker_affine(unsigned int v, float scale, float bias)
{
    return fmaf((float)v, scale, bias);
}

// Output types: the element type, the conversion of one input byte, and
// stores of one or four consecutive elements.
struct StokerOutF32 {
    typedef float T;
    static __device__ __forceinline__ T conv(unsigned int v, float s, float b)
    {
        return stoker_affine(v, s, b);
    }
    static __device__ __forceinline__ void put4(T* p, T a, T b, T c, T d)
    {
        StokerFloat4 q;
        q.x = a;
        q.y = b;
        q.z = c;
        q.w = d;
        *reinterpret_cast<StokerFloat4*>(p) = q;
    }
};

struct StokerOutF16 {
    typedef unsigned short T;
    static __device__ __forceinline__ T conv(unsigned int v, float s, float b)
    {
        return stoker_f16_bits(stoker_affine(v, s, b));
    }
    static __device__ __forceinline__ void put4(T* p, T a, T b, T c, T d)
    {
        StokerUint2 q;
        q.x = (unsigned int)a | ((unsigned int)b << 16);
        q.y = (unsigned int)c | ((unsigned int)d << 16);
        *reinterpret_cast<StokerUint2*>(p) = q;
    }
};

struct StokerOutBf16 {
    typedef unsigned short T;
    static __device__ __forceinline__ T conv(unsigned int v, float s, float b)
    {
        return stoker_bf16_bits(stoker_affine(v, s, b));
    }
    static __device__ __forceinline__ void put4(T* p, T a, T b, T c, T d)
    {
        StokerOutF16::put4(p, a, b, c, d);
    }
};

struct StokerOutU8 {
    typedef unsigned char T;
    static __device__ __forceinline__ T conv(unsigned int v, float, float)
    {
        return (T)v;
    }
    static __device__ __forceinline__ void put4(T* p, T a, T b, T c, T d)
    {
        *reinterpret_cast<unsigned int*>(p) = (unsigned int)a | ((unsigned int)b << 8) |
                                             ((unsigned int)c << 16) | ((unsigned int)d << 24);
    }
};

// Byte k (0 = lowest) of a little-endian word.
__device__ __forceinline__ unsigned int stoker_byte(unsigned int w, unsigned int k)
{
    return (w >> (8u * k)) & 0xffu;
}

// HWC -> CHW of one image per blockIdx.y; hw = H x W pixels per image.
template <typename Out>
__device__ __forceinline__ void stoker_to_nchw(
    const unsigned char* __restrict__ src,
    typename Out::T* __restrict__ dst,
    unsigned int hw,
    unsigned int first,
    unsigned int vec4,
    float s0, float s1, float s2,
    float b0, float b1, float b2)
{
    typedef typename Out::T T;
    const unsigned long long image = (unsigned long long)first + blockIdx.y;
    const unsigned char* in = src + image * hw * 3ull;
    T* r = dst + image * hw * 3ull;
    T* g = r + hw;
    T* b = g + hw;
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (vec4) {
        // Pixels 4t..4t+3: twelve bytes r0 g0 b0 r1 | g1 b1 r2 g2 | b2 r3 g3 b3.
        if (t >= hw / 4u) {
            return;
        }
        const unsigned int* words = reinterpret_cast<const unsigned int*>(in) + 3u * t;
        const unsigned int w0 = words[0];
        const unsigned int w1 = words[1];
        const unsigned int w2 = words[2];
        const unsigned int p = 4u * t;
        Out::put4(r + p,
                  Out::conv(stoker_byte(w0, 0), s0, b0), Out::conv(stoker_byte(w0, 3), s0, b0),
                  Out::conv(stoker_byte(w1, 2), s0, b0), Out::conv(stoker_byte(w2, 1), s0, b0));
        Out::put4(g + p,
                  Out::conv(stoker_byte(w0, 1), s1, b1), Out::conv(stoker_byte(w1, 0), s1, b1),
                  Out::conv(stoker_byte(w1, 3), s1, b1), Out::conv(stoker_byte(w2, 2), s1, b1));
        Out::put4(b + p,
                  Out::conv(stoker_byte(w0, 2), s2, b2), Out::conv(stoker_byte(w1, 1), s2, b2),
                  Out::conv(stoker_byte(w2, 0), s2, b2), Out::conv(stoker_byte(w2, 3), s2, b2));
    } else {
        if (t >= hw) {
            return;
        }
        const unsigned char* px = in + 3u * t;
        r[t] = Out::conv(px[0], s0, b0);
        g[t] = Out::conv(px[1], s1, b1);
        b[t] = Out::conv(px[2], s2, b2);
    }
}

__device__ __forceinline__ float stoker_pick(unsigned int c, float v0, float v1, float v2)
{
    return c == 0u ? v0 : (c == 1u ? v1 : v2);
}

// HWC -> HWC with conversion, element by element; hw = H x W per image.
template <typename Out>
__device__ __forceinline__ void stoker_to_nhwc(
    const unsigned char* __restrict__ src,
    typename Out::T* __restrict__ dst,
    unsigned int hw,
    unsigned int first,
    unsigned int vec4,
    float s0, float s1, float s2,
    float b0, float b1, float b2)
{
    typedef typename Out::T T;
    const unsigned int n = hw * 3u;
    const unsigned long long base = ((unsigned long long)first + blockIdx.y) * n;
    const unsigned char* in = src + base;
    T* out = dst + base;
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (vec4) {
        // Elements 4t..4t+3, of channels c, c+1, c+2, c (mod 3), c = 4t mod 3.
        if (t >= n / 4u) {
            return;
        }
        const unsigned int w = reinterpret_cast<const unsigned int*>(in)[t];
        const unsigned int c0 = t % 3u;
        const unsigned int c1 = c0 == 2u ? 0u : c0 + 1u;
        const unsigned int c2 = c1 == 2u ? 0u : c1 + 1u;
        Out::put4(out + 4u * t,
                  Out::conv(stoker_byte(w, 0), stoker_pick(c0, s0, s1, s2), stoker_pick(c0, b0, b1, b2)),
                  Out::conv(stoker_byte(w, 1), stoker_pick(c1, s0, s1, s2), stoker_pick(c1, b0, b1, b2)),
                  Out::conv(stoker_byte(w, 2), stoker_pick(c2, s0, s1, s2), stoker_pick(c2, b0, b1, b2)),
                  Out::conv(stoker_byte(w, 3), stoker_pick(c0, s0, s1, s2), stoker_pick(c0, b0, b1, b2)));
    } else {
        if (t >= n) {
            return;
        }
        const unsigned int c = t % 3u;
        out[t] = Out::conv(in[t], stoker_pick(c, s0, s1, s2), stoker_pick(c, b0, b1, b2));
    }
}

// The kernels' common parameters; the output pointer's type varies.
#define STOKER_CONVERT_ARGS(OUT_T)                                            \
    const unsigned char* __restrict__ src, OUT_T* __restrict__ dst,           \
        unsigned int hw, unsigned int first, unsigned int vec4,                \
        float s0, float s1, float s2, float b0, float b1, float b2
#define STOKER_CONVERT_PASS src, dst, hw, first, vec4, s0, s1, s2, b0, b1, b2

extern "C" __global__ void stoker_convert_nchw_f32(STOKER_CONVERT_ARGS(float))
{
    stoker_to_nchw<StokerOutF32>(STOKER_CONVERT_PASS);
}

extern "C" __global__ void stoker_convert_nhwc_f32(STOKER_CONVERT_ARGS(float))
{
    stoker_to_nhwc<StokerOutF32>(STOKER_CONVERT_PASS);
}

extern "C" __global__ void stoker_convert_nchw_f16(STOKER_CONVERT_ARGS(unsigned short))
{
    stoker_to_nchw<StokerOutF16>(STOKER_CONVERT_PASS);
}

extern "C" __global__ void stoker_convert_nhwc_f16(STOKER_CONVERT_ARGS(unsigned short))
{
    stoker_to_nhwc<StokerOutF16>(STOKER_CONVERT_PASS);
}

extern "C" __global__ void stoker_convert_nchw_bf16(STOKER_CONVERT_ARGS(unsigned short))
{
    stoker_to_nchw<StokerOutBf16>(STOKER_CONVERT_PASS);
}

extern "C" __global__ void stoker_convert_nhwc_bf16(STOKER_CONVERT_ARGS(unsigned short))
{
    stoker_to_nhwc<StokerOutBf16>(STOKER_CONVERT_PASS);
}

extern "C" __global__ void stoker_convert_nchw_u8(STOKER_CONVERT_ARGS(unsigned char))
{
    stoker_to_nchw<StokerOutU8>(STOKER_CONVERT_PASS);
}
