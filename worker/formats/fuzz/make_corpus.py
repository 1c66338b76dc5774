#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (corpus/<target>/), from the
images in ../testdata, tars written with Python's tarfile (GNU, pax and
ustar formats), TFRecord records framed here (CRC32C by hand; a unit
test of stoker-formats reads them back), and JPEGs and PNGs of extreme
shapes written here (baseline JPEG with hand-made Huffman tables, PNG
through zlib). Standard library only. The seeds are committed; run this
again only to change them."""

import io
import pathlib
import shutil
import struct
import tarfile
import zlib

HERE = pathlib.Path(__file__).resolve().parent
JPEG = (HERE.parent / "testdata" / "tiny.jpg").read_bytes()
PNG = (HERE.parent / "testdata" / "tiny.png").read_bytes()


def tar(fmt, members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    # tarfile pads to a 10 KiB record; keep the two end blocks only.
    data = buf.getvalue().rstrip(b"\0")
    return data + bytes(-len(data) % 512 + 1024)


def jpeg_bomb():
    out = bytearray(JPEG)
    sof = out.index(b"\xff\xc0")
    out[sof + 5 : sof + 9] = (60000).to_bytes(2, "big") * 2
    return bytes(out)


def png_bomb():
    out = bytearray(PNG)
    out[16:24] = (60000).to_bytes(4, "big") * 2
    return bytes(out)


def base256_size_header(name, size, kind):
    """A header whose size field is GNU base-256 (sizes past 8 GiB)."""
    block = bytearray(tar(tarfile.GNU_FORMAT, [(name, b"")])[:512])
    block[124:136] = b"\x80" + size.to_bytes(11, "big")
    block[156:157] = kind
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


long_dir = "d" * 120
tars = {
    "gnu_samples": tar(
        tarfile.GNU_FORMAT,
        [("s/a.jpg", JPEG), ("s/a.cls", b"3\n"), ("s/b.png", PNG), ("s/b.cls", b"1"), ("s/c.txt", b"x")],
    ),
    "gnu_long_name": tar(tarfile.GNU_FORMAT, [(f"{long_dir}/a.jpg", b"\xff\xd8\xff"), (f"{long_dir}/a.cls", b"")]),
    "pax_long_name": tar(tarfile.PAX_FORMAT, [(f"{long_dir}/a.png", PNG[:40]), (f"{long_dir}/a.cls", b"-1")]),
    "ustar_prefix": tar(tarfile.USTAR_FORMAT, [("dir/", None), (f"{'p' * 90}/{'n' * 60}.jpg", b"jpg")]),
    "oversized": tar(tarfile.GNU_FORMAT, [("o/a.jpg", bytes(800)), ("o/a.cls", b"2"), ("o/b.jpg", b"ok")]),
}
tars["truncated"] = tars["gnu_samples"][:1700]
tars["base256_size"] = base256_size_header("x/a.jpg", 1 << 40, b"5") + tars["gnu_samples"]
# Regression: this size plus its padding overflowed u64 in the reader.
tars["base256_u64_max"] = base256_size_header("x/a.jpg", 2**64 - 1, b"0") + bytes(1024)

def crc32c(data):
    """CRC32C (Castagnoli), bit by bit: the seeds are small."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def record(data):
    """One TFRecord record: length, its checksum, data, its checksum."""
    length = len(data).to_bytes(8, "little")
    return length + masked(length).to_bytes(4, "little") + data + masked(data).to_bytes(4, "little")


def field(number, payload):
    """A length-delimited protobuf field."""
    key, n, size = bytes([number << 3 | 2]), len(payload), b""
    while True:
        size += bytes([n & 0x7F | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return key + size + payload


def example(features):
    """A tf.train.Example: name -> ("bytes", value) or ("int64", value)."""
    entries = b""
    for name, (kind, value) in features.items():
        if kind == "bytes":
            feature = field(1, field(1, value))
        else:
            varint, v = b"", value & 0xFFFFFFFFFFFFFFFF
            while True:
                varint += bytes([v & 0x7F | (0x80 if v > 0x7F else 0)])
                v >>= 7
                if not v:
                    break
            feature = field(3, field(1, varint))
        entries += field(1, field(1, name.encode()) + field(2, feature))
    return field(1, entries)


good = record(example({"image/encoded": ("bytes", JPEG), "image/class/label": ("int64", 3), "image/filename": ("bytes", b"n0/a.JPEG")}))
png = record(example({"image/encoded": ("bytes", PNG), "image/class/label": ("int64", 1)}))
text = record(example({"image/encoded": ("bytes", b"not an image")}))
bad_data = bytearray(good)
bad_data[20] ^= 1
tfrecords = {
    "examples": good + png + text,
    "bad_data_checksum": bytes(bad_data) + png,
    "bad_length_checksum": good[:9] + b"\0" + good[10:],
    "truncated": (good + png)[: len(good) + 20],
    "not_protobuf": record(b"\xff\xff\xff"),
}

MAGIC = (0xCED7230A).to_bytes(4, "little")


def rec_part(cflag, data):
    """One RecordIO part: magic, flag and length, data padded to 4 bytes."""
    lrec = (cflag << 29 | len(data)).to_bytes(4, "little")
    return MAGIC + lrec + data + b"\0" * (-len(data) % 4)


def ir_header(flag, label, image_id=0):
    """MXNet's IRHeader: flag, float label, id, id2."""
    return struct.pack("<IfQQ", flag, label, image_id, 0)


recordios = {
    "records": rec_part(0, ir_header(0, 3.0) + JPEG) + rec_part(0, ir_header(2, 0.0) + struct.pack("<ff", 1, 2) + PNG),
    # A record split where its data held the magic: first and last parts.
    "split": rec_part(1, ir_header(0, 1.0) + JPEG[:4]) + rec_part(3, JPEG[4:]),
    "short_and_fraction": rec_part(0, b"short") + rec_part(0, ir_header(0, 1.5) + JPEG),
    "orphan_continuation": rec_part(2, b"abcd"),
    "truncated": rec_part(0, ir_header(0, 3.0) + JPEG)[:30],
}



def segment(marker, body):
    return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body


# JPEG's standard luminance DC table: code lengths (counts per length 1..16)
# and symbols (the size category of a DC difference).
DC_BITS = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
DC_VALS = list(range(12))


def canonical(bits, vals):
    """Huffman codes from JPEG's counts per length: symbol -> (code, length)."""
    codes, code, k = {}, 0, 0
    for length, count in enumerate(bits, 1):
        for _ in range(count):
            codes[vals[k]] = (code, length)
            code, k = code + 1, k + 1
        code <<= 1
    return codes


def write_jpeg(width, height, h_samp=1):
    """A baseline JPEG, 3 components, luma sampled h_samp x h_samp (1: 4:4:4,
    2: 4:2:0), every block DC only (the AC table's one code is an EOB): a
    smooth gradient of 8x8 squares."""
    dc = canonical(DC_BITS, DC_VALS)
    ac = {0x00: (0, 1)}
    mcu = 8 * h_samp
    mcus_x, mcus_y = -(-width // mcu), -(-height // mcu)
    out, acc, nacc = [], 0, 0

    def put(code, length):
        nonlocal acc, nacc
        acc, nacc = acc << length | code, nacc + length
        while nacc >= 8:
            byte = acc >> (nacc - 8) & 0xFF
            nacc -= 8
            out.append(byte)
            if byte == 0xFF:
                out.append(0)

    def block(diff):
        size = abs(diff).bit_length()
        put(*dc[size])
        if size:
            put(diff if diff > 0 else diff + (1 << size) - 1, size)
        put(*ac[0])

    pred = [0, 0, 0]
    for my in range(mcus_y):
        for mx in range(mcus_x):
            for c, n in enumerate([h_samp * h_samp, 1, 1]):
                for i in range(n):
                    value = ((mx * 37 + my * 23 + i * 11 + c * 50) % 200 - 100) * 4
                    block(value - pred[c])
                    pred[c] = value
    if nacc:
        put((1 << (8 - nacc)) - 1, 8 - nacc)
    dqt = bytes([0]) + bytes([1] * 64)
    sof = bytes([8]) + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes([3])
    sof += bytes([1, h_samp << 4 | h_samp, 0, 2, 0x11, 0, 3, 0x11, 0])
    dht = bytes([0x00]) + bytes(DC_BITS) + bytes(DC_VALS)
    dht += bytes([0x10]) + bytes([1] + [0] * 15) + bytes([0x00])
    sos = bytes([3, 1, 0x00, 2, 0x00, 3, 0x00, 0, 63, 0])
    return (b"\xff\xd8" + segment(0xDB, dqt) + segment(0xC0, sof) + segment(0xC4, dht)
            + segment(0xDA, sos) + bytes(out) + b"\xff\xd9")


def write_png(width, height, color_type=2, depth=8, palette=None):
    """A PNG of a gradient: colour type 0 (grey), 2 (RGB), 3 (palette),
    4 (grey + alpha) or 6 (RGBA), at 8 or 16 bits (palette: 8)."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]
    rows = b""
    for y in range(height):
        row = bytearray([y % 5])  # each of the five filters in turn
        for x in range(width):
            for c in range(channels):
                v = (x * 7 + y * 13 + c * 60) % (16 if color_type == 3 else 256)
                row += bytes([v, v ^ 0x5A]) if depth == 16 else bytes([v])
        rows += row
    def chunk(name, body):
        return len(body).to_bytes(4, "big") + name + body + zlib.crc32(name + body).to_bytes(4, "big")
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([depth, color_type, 0, 0, 0])
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if color_type == 3:
        out += chunk(b"PLTE", bytes(c for i in range(16) for c in (i * 16, 255 - i * 16, i * 8)))
    return out + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


seeds = {"tar_stream": {}, "tar_header": {}, "image_header": {}, "tfrecord_stream": {}, "recordio_stream": {}, "image_transform": {}}
for name, data in recordios.items():
    seeds["recordio_stream"][name] = bytes([0xFF]) + data
seeds["recordio_stream"]["recordio_index"] = bytes([0xFF]) + b"0\t0\n2\t96\n1\t48\n"
seeds["recordio_stream"]["tfrecord_index"] = bytes([0xFF]) + b"0 120\n120 98\n"
seeds["recordio_stream"]["oversized_small_reads"] = bytes([0x80 | 0x10 | 3]) + recordios["split"]
for name, data in tfrecords.items():
    seeds["tfrecord_stream"][name] = bytes([0xFF]) + data
seeds["tfrecord_stream"]["oversized_small_reads"] = bytes([0x80 | 0x10 | 3]) + good + png
for name, data in tars.items():
    # The first byte picks the member size limit and the read size.
    seeds["tar_stream"][name] = bytes([0xFF]) + data
    if name != "truncated":
        seeds["tar_header"][name] = data[:512]
seeds["tar_stream"]["oversized_small_reads"] = bytes([0x80 | 0x10 | 3]) + tars["oversized"]
seeds["image_header"] = {"tiny.jpg": JPEG, "tiny.png": PNG, "bomb.jpg": jpeg_bomb(), "bomb.png": png_bomb()}
# Decode and transforms: ordinary images, and the shapes whose resize
# under eval is a bomb (refused from the header), in every PNG layout.
seeds["image_transform"] = {
    "tiny.jpg": JPEG,
    "tiny.png": PNG,
    "bomb.jpg": jpeg_bomb(),
    "bomb.png": png_bomb(),
    "40x30_444.jpg": write_jpeg(40, 30),
    "37x21_420.jpg": write_jpeg(37, 21, 2),
    "1x3000.jpg": write_jpeg(1, 3000),
    "3000x1.jpg": write_jpeg(3000, 1),
    "1x500_420.jpg": write_jpeg(1, 500, 2),
    "500x1_420.jpg": write_jpeg(500, 1, 2),
    # Regression: eval(17) upscales it to 209000x19, whose resize weights
    # (megabytes) the footprint did not count.
    "11000x1.jpg": write_jpeg(11000, 1),
    "1x3000.png": write_png(1, 3000),
    "3000x1.png": write_png(3000, 1),
    "grey_9x7.png": write_png(9, 7, color_type=0),
    "grey_alpha16_12x10.png": write_png(12, 10, color_type=4, depth=16),
    "rgba_11x5.png": write_png(11, 5, color_type=6),
    "rgb16_6x6.png": write_png(6, 6, depth=16),
    "palette_8x8.png": write_png(8, 8, color_type=3),
}

for target, files in seeds.items():
    folder = HERE / "corpus" / target
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
