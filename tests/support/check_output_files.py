"""Checks a file an example wrote, with nothing but the Python standard library.

    check_output_files.py png <file> <width> <height>   chunks and CRCs, IHDR, zlib stream, size
    check_output_files.py vtk <file> <points> <cells>   legacy VTK unstructured grid: counts, data
"""

import struct
import sys
import zlib


def check_png(path, width, height):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    at, chunks = 8, []
    while at < len(data):
        (n,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + n]
        (crc,) = struct.unpack(">I", data[at + 8 + n:at + 12 + n])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, "bad CRC in chunk %r" % kind
        chunks.append((kind, body))
        at += 12 + n
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND", "chunks out of order"
    w, h, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    assert (w, h, depth, colour) == (width, height, 8, 2), "IHDR: %r" % ((w, h, depth, colour),)
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    assert len(raw) == height * (1 + 3 * width), "pixel data of %d bytes" % len(raw)
    rows = [raw[r * (1 + 3 * width):(r + 1) * (1 + 3 * width)] for r in range(height)]
    assert all(row[0] == 0 for row in rows), "unknown scanline filter"
    assert len(set(raw)) > 16, "the picture is (nearly) one colour"


def check_vtk(path, points, cells):
    words = open(path).read().split()
    assert words[:2] == ["#", "vtk"], "not a legacy VTK file"
    i = words.index("POINTS")
    assert int(words[i + 1]) == points, "POINTS %s" % words[i + 1]
    i = words.index("CELLS")
    assert int(words[i + 1]) == cells, "CELLS %s" % words[i + 1]
    i = words.index("POINT_DATA")
    assert int(words[i + 1]) == points
    i = words.index("default")
    values = [float(v) for v in words[i + 1:i + 1 + points]]
    assert len(values) == points and all(v == v for v in values), "u: missing or NaN values"


kind, path = sys.argv[1], sys.argv[2]
args = [int(a) for a in sys.argv[3:]]
{"png": check_png, "vtk": check_vtk}[kind](path, *args)
print("%s: ok" % path)
