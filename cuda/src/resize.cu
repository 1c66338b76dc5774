// The geometry of a batch, uint8 HWC (RGB interleaved), one launch each:
//
// - chains: a run of nearest geometric steps (flips, nearest warps, pads
//   of every mode, nearest crop-resizes) as links that an output pixel
//   walks back to the one source pixel it shows, or to the fill of the
//   step where it fell outside (stoker_image::augment::Chain, which the
//   CPU runs with the same integer arithmetic: the result is the same
//   bytes as the steps one by one, with no intermediate image);
// - the fused crop + antialiased bilinear resize + optional horizontal
//   flip: RandomResizedCrop, Resize, CenterCrop and RandomCrop (with zero
//   padding), reading the decoded image or the crop box of a chain's
//   output that a chain launch rendered (every pixel of the box walks its
//   chain once, not once per filter tap).
//
// The resize's arithmetic follows the CPU path (fast_image_resize's
// convolution with the bilinear filter, itself Pillow's): for an output
// pixel x the source centre is crop_x + (x + 0.5) * scale, the filter is a
// triangle widened by max(scale, 1) when shrinking, its window is clamped to
// the image (not to the crop box; to the box when it is padded) and the
// weights are normalised per axis. The CPU runs the two axes as separate
// passes with an 8-bit intermediate; this kernel keeps the intermediate in
// float, which moves a pixel by at most a grey level.
//
// Compiled by NVRTC at run time: no includes, plain C types only.

// One link of a chain: the layout of `ChainLink` in chain.rs.
struct StokerLink {
    long long a[6];     // kind 0: Pillow's 16.16 matrix, the pixel centre folded in;
                        // kind 1: a[0], a[1] the offsets of the column and row tables
    unsigned int kind;  // 0 fixed point, 1 tables
    unsigned int fill;  // R | G << 8 | B << 16
    unsigned int in_w;  // the step's input size
    unsigned int in_h;
};

// Walks `count` links back from output pixel (*x, *y): 1 with (*x, *y) the
// source pixel, or 0 with *fill the colour of the step where it fell
// outside its input.
__device__ __forceinline__ int stoker_locate(
    const StokerLink* __restrict__ links,
    unsigned int count,
    const int* __restrict__ tables,
    long long* x,
    long long* y,
    unsigned int* fill)
{
    long long cx = *x, cy = *y;
    for (int k = (int)count - 1; k >= 0; --k) {
        const StokerLink& l = links[k];
        long long xi, yi;
        if (l.kind == 0) {
            xi = (l.a[2] + cy * l.a[1] + cx * l.a[0]) >> 16;
            yi = (l.a[5] + cy * l.a[4] + cx * l.a[3]) >> 16;
            if (xi < 0 || yi < 0 || xi >= (long long)l.in_w || yi >= (long long)l.in_h) {
                *fill = l.fill;
                return 0;
            }
        } else {
            xi = tables[l.a[0] + cx];
            yi = tables[l.a[1] + cy];
            if (xi < 0 || yi < 0) {
                *fill = l.fill;
                return 0;
            }
        }
        cx = xi;
        cy = yi;
    }
    *x = cx;
    *y = cy;
    return 1;
}

// One image of stoker_chain_batch_u8_hwc: the layout of `ChainParams` in
// chain.rs.
struct StokerChainParams {
    unsigned long long src; // the source image
    unsigned long long dst; // the output image, out_w x out_h, packed rows
    unsigned int src_w;
    unsigned int src_h;
    unsigned int out_w;
    unsigned int out_h;
    unsigned int first;     // the image's first link in `links`
    unsigned int count;     // its number of links
    unsigned int src_pitch; // bytes per source row
    unsigned int channels;  // 3 (RGB) or 1 (a mask): bytes per pixel
};

// A chain per image of a batch: image blockIdx.y renders its output, each
// pixel read from the one source pixel its links lead to, or filled (byte
// c of the fill for channel c).
extern "C" __global__ void stoker_chain_batch_u8_hwc(
    const StokerChainParams* __restrict__ params,
    const StokerLink* __restrict__ links,
    const int* __restrict__ tables)
{
    const StokerChainParams p = params[blockIdx.y];
    const unsigned int n = p.out_w * p.out_h;
    const unsigned char* src = (const unsigned char*)p.src;
    unsigned char* dst = (unsigned char*)p.dst;
    for (unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        long long y = idx / p.out_w;
        long long x = idx - y * p.out_w;
        unsigned int fill = 0;
        unsigned char* d = dst + (size_t)idx * p.channels;
        if (stoker_locate(links + p.first, p.count, tables, &x, &y, &fill)) {
            const unsigned char* s = src + (size_t)y * p.src_pitch + (size_t)x * p.channels;
            for (unsigned int c = 0; c < p.channels; ++c) {
                d[c] = s[c];
            }
        } else {
            for (unsigned int c = 0; c < p.channels; ++c) {
                d[c] = (unsigned char)((fill >> (8 * c)) & 0xff);
            }
        }
    }
}

struct StokerRrcParams {
    unsigned long long src;        // device address of the source pixels
    unsigned long long dst_offset; // byte offset of this image's output
    unsigned int src_w;
    unsigned int src_h;
    unsigned int src_pitch;        // bytes per source row
    unsigned int flip;             // 1: mirror the output horizontally
    float crop_x;
    float crop_y;
    float crop_w;
    float crop_h;
    unsigned int pad;              // 1: the box may reach past the source
    int origin_x;                  // where the source's pixel (0, 0) lies in
    int origin_y;                  // the crop's coordinates: (0, 0) for an
                                   // image, the box's corner for a rendered box
    unsigned int reserved;         // keeps the struct 8-byte aligned
};

__device__ __forceinline__ float stoker_triangle(float t)
{
    t = fabsf(t);
    return t < 1.0f ? 1.0f - t : 0.0f;
}

// One thread per output pixel; blockIdx.y is the image in the batch.
extern "C" __global__ void stoker_rrc_flip_u8_hwc(
    const StokerRrcParams* __restrict__ params,
    unsigned char* __restrict__ dst,
    unsigned int out_w,
    unsigned int out_h)
{
    const StokerRrcParams p = params[blockIdx.y];
    const unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= out_w * out_h) {
        return;
    }
    const unsigned int oy = idx / out_w;
    const unsigned int ox = idx - oy * out_w;
    // The flip comes after the resize: output column ox shows resized
    // column out_w - 1 - ox.
    const unsigned int rx = p.flip ? out_w - 1 - ox : ox;

    const float scale_x = p.crop_w / (float)out_w;
    const float scale_y = p.crop_h / (float)out_h;
    const float fs_x = fmaxf(scale_x, 1.0f);
    const float fs_y = fmaxf(scale_y, 1.0f);
    const float inv_x = 1.0f / fs_x;
    const float inv_y = 1.0f / fs_y;
    const float centre_x = p.crop_x + ((float)rx + 0.5f) * scale_x;
    const float centre_y = p.crop_y + ((float)oy + 0.5f) * scale_y;
    // The filter window stays inside the box (integral), as the CPU path
    // crops before it resizes: its edge pixels never mix in what lies past
    // the box. With `pad` the box's pixels outside the source count as
    // zeros: the CPU path pads the box with zeros and resizes the padded
    // image. The weights are computed in the crop's coordinates whatever
    // the origin, so a rendered box gives the bytes the image would.
    const int lo_x = (int)p.crop_x;
    const int lo_y = (int)p.crop_y;
    const int hi_x = (int)(p.crop_x + p.crop_w);
    const int hi_y = (int)(p.crop_y + p.crop_h);
    const int x0 = max((int)floorf(centre_x - fs_x), lo_x);
    const int x1 = min((int)ceilf(centre_x + fs_x), hi_x);
    const int y0 = max((int)floorf(centre_y - fs_y), lo_y);
    const int y1 = min((int)ceilf(centre_y + fs_y), hi_y);
    // Weight of pixel i is triangle((i - (centre - 0.5)) / filter_scale).
    const float cx = centre_x - 0.5f;
    const float cy = centre_y - 0.5f;

    float sum_x = 0.0f;
    for (int x = x0; x < x1; ++x) {
        sum_x += stoker_triangle(((float)x - cx) * inv_x);
    }
    float sum_y = 0.0f;
    for (int y = y0; y < y1; ++y) {
        sum_y += stoker_triangle(((float)y - cy) * inv_y);
    }

    const unsigned char* src = (const unsigned char*)p.src;
    // The source's pixels in the crop's coordinates.
    const int sx0 = max(x0, p.origin_x);
    const int sx1 = min(x1, p.origin_x + (int)p.src_w);
    float r = 0.0f, g = 0.0f, b = 0.0f;
    for (int y = y0; y < y1; ++y) {
        const float wy = stoker_triangle(((float)y - cy) * inv_y);
        const int sy = y - p.origin_y;
        if (wy == 0.0f || sy < 0 || sy >= (int)p.src_h) {
            continue;
        }
        const unsigned char* row = src + (size_t)sy * p.src_pitch;
        float rr = 0.0f, rg = 0.0f, rb = 0.0f;
        for (int x = sx0; x < sx1; ++x) {
            const float wx = stoker_triangle(((float)x - cx) * inv_x);
            const unsigned char* px = row + 3 * (size_t)(x - p.origin_x);
            rr += wx * (float)px[0];
            rg += wx * (float)px[1];
            rb += wx * (float)px[2];
        }
        r += wy * rr;
        g += wy * rg;
        b += wy * rb;
    }
    const float norm = (sum_x > 0.0f && sum_y > 0.0f) ? 1.0f / (sum_x * sum_y) : 0.0f;
    unsigned char* out = dst + p.dst_offset + (size_t)idx * 3;
    out[0] = (unsigned char)fminf(fmaxf(r * norm + 0.5f, 0.0f), 255.0f);
    out[1] = (unsigned char)fminf(fmaxf(g * norm + 0.5f, 0.0f), 255.0f);
    out[2] = (unsigned char)fminf(fmaxf(b * norm + 0.5f, 0.0f), 255.0f);
}
