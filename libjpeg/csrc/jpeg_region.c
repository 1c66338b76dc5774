/*
 * Region-of-interest JPEG decoding with libjpeg-turbo, for the worker's
 * CPU path (see worker/src/libjpeg.rs).
 *
 * A random-resized crop only needs the pixels inside its box. libjpeg-turbo
 * can skip the inverse DCT and colour conversion of the rows above the box
 * (jpeg_skip_scanlines), of the columns beside it (jpeg_crop_scanline), and
 * stop entirely after the box's last row. This file is the only C in the
 * project; it exposes two functions with plain arguments so the Rust side
 * never needs libjpeg's struct layouts.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

struct stoker_err {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char *msg;
    size_t msg_len;
};

static void stoker_error_exit(j_common_ptr cinfo) {
    struct stoker_err *err = (struct stoker_err *)cinfo->err;
    char buf[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, buf);
    if (err->msg && err->msg_len > 0) {
        strncpy(err->msg, buf, err->msg_len - 1);
        err->msg[err->msg_len - 1] = '\0';
    }
    longjmp(err->jump, 1);
}

/* Warnings (corrupt data, premature end) are not printed: the Rust side
 * checks for truncation itself and reports per sample. */
static void stoker_output_message(j_common_ptr cinfo) { (void)cinfo; }

/*
 * Decodes the box [x, x + w) x [y, y + h) of `data` as 8-bit RGB into `out`
 * (w * h * 3 bytes, rows packed). The box must lie inside the image.
 * Returns 0 on success and -1 on error, with a message in `msg`.
 */
int stoker_jpeg_decode_region(const unsigned char *data, unsigned long len, unsigned int x, unsigned int y,
                              unsigned int w, unsigned int h, unsigned char *out, char *msg, size_t msg_len) {
    struct jpeg_decompress_struct cinfo;
    struct stoker_err err;
    /* volatile: modified between setjmp and longjmp. */
    unsigned char *volatile row = NULL;

    memset(&cinfo, 0, sizeof(cinfo));
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = stoker_error_exit;
    err.pub.output_message = stoker_output_message;
    err.msg = msg;
    err.msg_len = msg_len;
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        free(row);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, len);
    jpeg_read_header(&cinfo, TRUE);
    if (w == 0 || h == 0 || x + w > cinfo.image_width || y + h > cinfo.image_height) {
        snprintf(msg, msg_len, "region %ux%u at (%u, %u) outside the %ux%u image", w, h, x, y,
                 cinfo.image_width, cinfo.image_height);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);

    JDIMENSION xoff = x, width = w;
    if (x != 0 || w != cinfo.output_width) {
        jpeg_crop_scanline(&cinfo, &xoff, &width);
    }
    /* jpeg_crop_scanline widens the span to iMCU boundaries. */
    unsigned int skip_left = x - xoff;
    row = malloc((size_t)width * 3);
    if (!row) {
        snprintf(msg, msg_len, "out of memory");
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    if (y > 0) {
        jpeg_skip_scanlines(&cinfo, y);
    }
    for (unsigned int r = 0; r < h; r++) {
        JSAMPROW rows[1] = {row};
        if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) {
            snprintf(msg, msg_len, "ran out of data at row %u", y + r);
            jpeg_destroy_decompress(&cinfo);
            free(row);
            return -1;
        }
        memcpy(out + (size_t)r * w * 3, row + (size_t)skip_left * 3, (size_t)w * 3);
    }
    free(row);
    /* The rows below the box are never decoded. */
    jpeg_abort_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return 0;
}
