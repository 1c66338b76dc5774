// Fused crop + antialiased bilinear resize + optional horizontal flip, uint8
// HWC (RGB interleaved) in and out, one launch per batch: RandomResizedCrop,
// Resize, CenterCrop and RandomCrop (with zero padding) all run here.
//
// The arithmetic follows the CPU path (fast_image_resize's convolution with
// the bilinear filter, itself Pillow's): for an output pixel x the source
// centre is crop_x + (x + 0.5) * scale, the filter is a triangle widened by
// max(scale, 1) when shrinking, its window is clamped to the image (not to
// the crop box; to the box when it is padded) and the weights are normalised
// per axis. The CPU runs the
// two axes as separate passes with an 8-bit intermediate; this kernel keeps
// the intermediate in float, which moves a pixel by at most a grey level.
//
// Compiled by NVRTC at run time: no includes, plain C types only.

struct StokerRrcParams {
    unsigned long long src;        // device address of the decoded image
    unsigned long long dst_offset; // byte offset of this image's output
    unsigned int src_w;
    unsigned int src_h;
    unsigned int src_pitch;        // bytes per source row
    unsigned int flip;             // 1: mirror the output horizontally
    float crop_x;
    float crop_y;
    float crop_w;
    float crop_h;
    unsigned int pad;              // 1: the box may reach past the image
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
    // The filter window is clamped to the image, or with `pad` to the box
    // (integral then), whose pixels outside the image count as zeros: the
    // CPU path pads the box with zeros and resizes the padded image.
    const int lo_x = p.pad ? (int)p.crop_x : 0;
    const int lo_y = p.pad ? (int)p.crop_y : 0;
    const int hi_x = p.pad ? (int)(p.crop_x + p.crop_w) : (int)p.src_w;
    const int hi_y = p.pad ? (int)(p.crop_y + p.crop_h) : (int)p.src_h;
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
    float r = 0.0f, g = 0.0f, b = 0.0f;
    for (int y = y0; y < y1; ++y) {
        const float wy = stoker_triangle(((float)y - cy) * inv_y);
        if (wy == 0.0f || y < 0 || y >= (int)p.src_h) {
            continue;
        }
        const unsigned char* row = src + (size_t)y * p.src_pitch;
        float rr = 0.0f, rg = 0.0f, rb = 0.0f;
        for (int x = max(x0, 0); x < min(x1, (int)p.src_w); ++x) {
            const float wx = stoker_triangle(((float)x - cx) * inv_x);
            const unsigned char* px = row + 3 * x;
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
