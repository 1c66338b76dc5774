#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (corpus/<target>/), from the
images in ../testdata, tars written with Python's tarfile (GNU, pax and
ustar formats) and TFRecord records framed here (CRC32C by hand; a unit
test of stoker-formats reads them back). Standard library only. The seeds
are committed; run this again only to change them."""

import io
import pathlib
import shutil
import struct
import tarfile

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

seeds = {"tar_stream": {}, "tar_header": {}, "image_header": {}, "tfrecord_stream": {}, "recordio_stream": {}}
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

for target, files in seeds.items():
    folder = HERE / "corpus" / target
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
