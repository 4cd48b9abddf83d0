#!/usr/bin/python3
"""image_ref.py - the reference for day0's image preprocessing
(engine/image/): Debian's PIL + numpy doing, step by step, what
transformers' slow image processors do (Qwen2VLImageProcessor,
CLIPImageProcessor, SiglipImageProcessor), written from transformers'
image_processing_qwen2_vl.py / image_processing_clip.py /
image_transforms.py.  transformers itself is not installed here; nothing in
this file shares code with the C.

  image_ref.py corpus DIR
      writes the test corpus: >= 30 images (1x1 to 4000x3000, odd aspect
      ratios, alpha, gray, palette, 1/2/4/16-bit and interlaced PNG,
      baseline, progressive, gray and CMYK JPEG) and DIR/bad/ with malformed
      files (truncated, corrupt Huffman table, 0x0, bombs, wrong magic, ...)
  image_ref.py prep --preprocessor CFG --out DIR IMAGE...
      STEM.pixel_values.npy and STEM.resized.npy per image, and
      DIR/summary.json (grid, shape, tokens) as day0-engine image-prep
      writes them
  image_ref.py compare --preprocessor CFG C_DIR PY_DIR [--json C.json]
      resized bytes equal (else the share of differing pixels and by how
      much), pixel values within 1e-6 of the reference computed from the C
      side's own bytes, shapes/grids/tokens equal; exit 1 on a failure
  image_ref.py time --preprocessor CFG --repeat N IMAGE...
      the best of N passes over the images: seconds in all and seconds
      decoding (bench/image.sh)
"""
import json
import math
import os
import struct
import sys
import time
import zlib

import numpy as np
from PIL import Image

TOL = 1e-6

# ------------------------------------------------------------ the processors


def load_config(path):
    with open(path) as f:
        c = json.load(f)
    t = c.get("image_processor_type", "")
    if t.startswith("Qwen2VLImageProcessor") or t.startswith("Qwen2_5_VL"):
        kind = "qwen2vl"
    elif t.startswith("CLIPImageProcessor"):
        kind = "clip"
    elif t.startswith("SiglipImageProcessor"):
        kind = "siglip"
    else:
        raise SystemExit("%s: unknown image_processor_type %r" % (path, t))
    c["_kind"] = kind
    return c


def smart_resize(height, width, factor, min_pixels, max_pixels):
    # transformers' current Qwen2-VL smart_resize
    if max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def convert_to_rgb(image):
    # image_transforms.convert_to_rgb: PIL's convert, alpha dropped
    return image if image.mode == "RGB" else image.convert("RGB")


def pil_resize(arr, size, resample):
    # image_transforms.resize: uint8 HWC -> PIL -> Image.resize -> numpy
    height, width = size
    return np.array(Image.fromarray(arr).resize((width, height),
                                                resample=resample,
                                                reducing_gap=None))


def shortest_edge_size(h, w, size):
    # get_resize_output_image_size(default_to_square=False)
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    return (new_long, new_short) if w <= h else (new_short, new_long)


def center_crop(arr, ch, cw):
    # image_transforms.center_crop on HWC
    oh, ow = arr.shape[:2]
    top, left = (oh - ch) // 2, (ow - cw) // 2
    bottom, right = top + ch, left + cw
    if top >= 0 and bottom <= oh and left >= 0 and right <= ow:
        return arr[top:bottom, left:right]
    nh, nw = max(ch, oh), max(cw, ow)
    new = np.zeros((nh, nw) + arr.shape[2:], dtype=arr.dtype)
    tp, lp = math.ceil((nh - oh) / 2), math.ceil((nw - ow) / 2)
    new[tp:tp + oh, lp:lp + ow] = arr
    top, bottom, left, right = top + tp, bottom + tp, left + lp, right + lp
    return new[max(0, top):min(nh, bottom), max(0, left):min(nw, right)]


def hw(v):
    return (v, v) if isinstance(v, int) else (v["height"], v["width"])


def resize_and_crop(c, arr):
    """uint8 HWC in, the uint8 HWC the processor rescales."""
    kind = c["_kind"]
    resample = c.get("resample", 2 if kind == "siglip" else 3)
    if not c.get("do_resize", True):
        out = arr
    elif kind == "qwen2vl":
        size = c.get("size") or {}
        mn = size.get("shortest_edge", 56 * 56)
        mx = size.get("longest_edge", 28 * 28 * 1280)
        mn = c.get("min_pixels", mn) or mn
        mx = c.get("max_pixels", mx) or mx
        factor = c.get("patch_size", 14) * c.get("merge_size", 2)
        h, w = smart_resize(arr.shape[0], arr.shape[1], factor, mn, mx)
        out = pil_resize(arr, (h, w), resample)
    else:
        size = c.get("size", {"shortest_edge": 224} if kind == "clip"
                     else {"height": 224, "width": 224})
        if isinstance(size, dict) and "shortest_edge" in size:
            h, w = shortest_edge_size(arr.shape[0], arr.shape[1],
                                      size["shortest_edge"])
        else:
            h, w = hw(size)
        out = pil_resize(arr, (h, w), resample)
    if kind != "qwen2vl" and c.get("do_center_crop", kind == "clip"):
        out = center_crop(out, *hw(c.get("crop_size", 224)))
    return out


def rescale_normalize(c, arr):
    img = arr
    if c.get("do_rescale", True):
        # image_transforms.rescale: float64 product, then float32
        img = (img.astype(np.float64) *
               c.get("rescale_factor", 1 / 255)).astype(np.float32)
    if c.get("do_normalize", True):
        # image_transforms.normalize, channels last, in float32
        if not np.issubdtype(img.dtype, np.floating):
            img = img.astype(np.float32)
        clip_mean = [0.48145466, 0.4578275, 0.40821073]
        clip_std = [0.26862954, 0.26130258, 0.27577711]
        mean, std = c.get("image_mean", clip_mean), c.get("image_std", clip_std)
        if not isinstance(mean, list):
            mean = [mean] * 3
        if not isinstance(std, list):
            std = [std] * 3
        img = (img - np.array(mean, dtype=img.dtype)) / np.array(std,
                                                                 dtype=img.dtype)
    return img.transpose(2, 0, 1)  # channels first


def patchify(c, chw):
    """Qwen2VLImageProcessor._preprocess's tail; CLIP keeps [3, H, W]."""
    if c["_kind"] != "qwen2vl":
        return chw, None
    P, T, M = (c.get("patch_size", 14), c.get("temporal_patch_size", 2),
               c.get("merge_size", 2))
    patches = np.array([chw])
    if patches.shape[0] % T != 0:
        repeats = np.repeat(patches[-1][np.newaxis], T - 1, axis=0)
        patches = np.concatenate([patches, repeats], axis=0)
    channel = patches.shape[1]
    grid_t = patches.shape[0] // T
    grid_h, grid_w = chw.shape[1] // P, chw.shape[2] // P
    patches = patches.reshape(grid_t, T, channel, grid_h // M, M, P,
                              grid_w // M, M, P)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flat = patches.reshape(grid_t * grid_h * grid_w, channel * T * P * P)
    return flat, (grid_t, grid_h, grid_w)


def process(c, path):
    with Image.open(path) as im:
        arr = np.array(convert_to_rgb(im))
    resized = np.ascontiguousarray(resize_and_crop(c, arr))
    pv, grid = patchify(c, rescale_normalize(c, resized))
    return resized, pv, grid


def stem(path):
    b = os.path.basename(path)
    return b.rsplit(".", 1)[0] if "." in b[1:] else b


def cmd_prep(args):
    cfg, out, files = None, None, []
    i = 0
    while i < len(args):
        if args[i] == "--preprocessor":
            cfg, i = args[i + 1], i + 2
        elif args[i] == "--out":
            out, i = args[i + 1], i + 2
        else:
            files.append(args[i])
            i += 1
    c = load_config(cfg)
    os.makedirs(out, exist_ok=True)
    summary = {}
    for f in files:
        resized, pv, grid = process(c, f)
        s = stem(f)
        np.save(os.path.join(out, s + ".resized.npy"), resized)
        np.save(os.path.join(out, s + ".pixel_values.npy"),
                np.ascontiguousarray(pv, dtype=np.float32))
        summary[s] = {"shape": list(pv.shape),
                      "grid_thw": list(grid) if grid else None,
                      "resized": [resized.shape[1], resized.shape[0]]}
        if grid:
            M = c.get("merge_size", 2)
            summary[s]["tokens"] = grid[0] * grid[1] * grid[2] // (M * M)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)


def cmd_compare(args):
    cfg, cjson, dirs = None, None, []
    i = 0
    while i < len(args):
        if args[i] == "--preprocessor":
            cfg, i = args[i + 1], i + 2
        elif args[i] == "--json":
            cjson, i = args[i + 1], i + 2
        else:
            dirs.append(args[i])
            i += 1
    c = load_config(cfg)
    cdir, pydir = dirs
    with open(os.path.join(pydir, "summary.json")) as f:
        summary = json.load(f)
    cimages = {}
    if cjson:
        with open(cjson) as f:
            for e in json.load(f)["images"]:
                cimages[stem(e["file"])] = e
    bad, exact, npix, ndiff, maxd, maxnorm = [], 0, 0, 0, 0, 0.0
    for s in sorted(summary):
        ref = summary[s]
        try:
            cr = np.load(os.path.join(cdir, s + ".resized.npy"))
            cp = np.load(os.path.join(cdir, s + ".pixel_values.npy"))
        except OSError as e:
            bad.append("%s: day0's output is missing: %s" % (s, e))
            continue
        pr = np.load(os.path.join(pydir, s + ".resized.npy"))
        pp = np.load(os.path.join(pydir, s + ".pixel_values.npy"))
        if cr.shape != pr.shape or cp.shape != pp.shape:
            bad.append("%s: shapes differ: resized %s vs %s, pixel values "
                       "%s vs %s" % (s, cr.shape, pr.shape, cp.shape,
                                     pp.shape))
            continue
        d = np.abs(cr.astype(np.int16) - pr.astype(np.int16))
        diff_px = int(np.count_nonzero(d.max(axis=2)))
        npix += cr.shape[0] * cr.shape[1]
        ndiff += diff_px
        maxd = max(maxd, int(d.max()))
        if diff_px:
            bad.append("%s: resized bytes differ from PIL's in %d of %d "
                       "pixels (%.4f%%), by at most %d" %
                       (s, diff_px, cr.shape[0] * cr.shape[1],
                        100.0 * diff_px / (cr.shape[0] * cr.shape[1]),
                        int(d.max())))
        else:
            exact += 1
        # normalization given the same bytes: the reference from day0's
        # own resized bytes
        own, _ = patchify(c, rescale_normalize(c, cr))
        err = float(np.max(np.abs(own.astype(np.float64) -
                                  cp.astype(np.float64)))) if cp.size else 0.0
        maxnorm = max(maxnorm, err)
        if not err <= TOL:
            bad.append("%s: pixel values differ from numpy's by %.3g "
                       "(> %g)" % (s, err, TOL))
        if cjson:
            e = cimages.get(s)
            if e is None:
                bad.append("%s: not in day0's --json" % s)
            elif (e["shape"] != ref["shape"] or
                  e.get("grid_thw") != ref["grid_thw"] or
                  [e["resized_width"], e["resized_height"]] != ref["resized"] or
                  ("tokens" in ref and e["tokens"] != ref["tokens"])):
                bad.append("%s: --json says shape %s grid %s resized %sx%s "
                           "tokens %s; the reference %s" %
                           (s, e["shape"], e.get("grid_thw"),
                            e["resized_width"], e["resized_height"],
                            e.get("tokens"), ref))
    print(json.dumps({"images": len(summary), "bytes_exact": exact,
                      "pixels": npix, "pixels_differing": ndiff,
                      "max_byte_diff": maxd, "max_value_err": maxnorm}))
    for b in bad:
        print("MISMATCH " + b)
    return 1 if bad else 0


def cmd_time(args):
    """Best of --repeat passes over the images: total seconds, and the
    share spent decoding (Image.open + convert + np.array)."""
    cfg, rep, files = None, 1, []
    i = 0
    while i < len(args):
        if args[i] == "--preprocessor":
            cfg, i = args[i + 1], i + 2
        elif args[i] == "--repeat":
            rep, i = int(args[i + 1]), i + 2
        else:
            files.append(args[i])
            i += 1
    c = load_config(cfg)
    best, best_dec = None, None
    for _ in range(rep):
        total = dec = 0.0
        for f in files:
            t0 = time.perf_counter()
            with Image.open(f) as im:
                arr = np.array(convert_to_rgb(im))
            t1 = time.perf_counter()
            resized = np.ascontiguousarray(resize_and_crop(c, arr))
            patchify(c, rescale_normalize(c, resized))
            t2 = time.perf_counter()
            total += t2 - t0
            dec += t1 - t0
        if best is None or total < best:
            best, best_dec = total, dec
    print("%.6f %.6f" % (best, best_dec))


# ---------------------------------------------------------------- the corpus


def chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))


def pack_rows(samples, depth):
    """samples: (h, w*channels) ints -> filtered rows (filter 0)."""
    out = b""
    for row in samples:
        if depth == 16:
            b = row.astype(">u2").tobytes()
        elif depth == 8:
            b = row.astype(np.uint8).tobytes()
        else:
            bits = ((row[:, None] >> np.arange(depth - 1, -1, -1)) & 1)
            b = np.packbits(bits.ravel().astype(np.uint8)).tobytes()
        out += b"\0" + b
    return out


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
         (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png_bytes(samples, depth, ctype, plte=None, trns=None, interlace=0,
              ihdr_size=None):
    """samples: (h, w, channels) ints.  A hand-made PNG for what PIL cannot
    write (2/4/16-bit, interlaced, short palettes, lying headers)."""
    h, w, ch = samples.shape
    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += pack_rows(sub.reshape(sub.shape[0], -1), depth)
    else:
        raw = pack_rows(samples.reshape(h, w * ch), depth)
    iw, ih = ihdr_size or (w, h)
    out = b"\x89PNG\r\n\x1a\n" + chunk(
        b"IHDR", struct.pack(">IIBBBBB", iw, ih, depth, ctype, 0, 0, interlace))
    if plte is not None:
        out += chunk(b"PLTE", bytes(np.asarray(plte, np.uint8).ravel()))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    return out + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def pattern(h, w, seed, channels=3):
    """Edges, gradients and noise: every filter tap matters."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = []
    for c in range(channels):
        v = (127 + 90 * np.sin(x / (3.0 + 7 * c) + y / (5.0 + 3 * c)) +
             30 * ((x // 16 + y // 16 + c) % 2) - 20)
        base.append(v)
    img = np.stack(base, axis=-1) + rng.normal(0, 18, (h, w, channels))
    return np.clip(img, 0, 255).astype(np.uint8)


def cmd_corpus(args):
    d = args[0]
    bad = os.path.join(d, "bad")
    os.makedirs(bad, exist_ok=True)
    n = [0]

    def save(name, im, **kw):
        im.save(os.path.join(d, name), **kw)
        n[0] += 1

    def raw(name, data, where=d):
        with open(os.path.join(where, name), "wb") as f:
            f.write(data)
        if where == d:
            n[0] += 1

    rgb = lambda h, w, s: Image.fromarray(pattern(h, w, s), "RGB")
    # PIL-written images: sizes from 1x1 to 4000x3000, odd aspect ratios
    save("rgb_1x1.png", rgb(1, 1, 1))
    save("rgb_3x2.png", rgb(2, 3, 2))
    save("rgb_odd_999x1001.png", rgb(1001, 999, 3))
    save("rgb_wide_1000x9.png", rgb(9, 1000, 4))   # 111:1 (Qwen allows 200)
    save("rgb_tall_28x2000.png", rgb(2000, 28, 5))
    save("rgb_2000x1500.png", rgb(1500, 2000, 6))
    save("rgb_upscale_20x30.png", rgb(30, 20, 7))
    save("rgba_257x129.png", Image.fromarray(pattern(129, 257, 8, 4), "RGBA"))
    save("la_100x60.png", Image.fromarray(pattern(60, 100, 9, 2), "LA"))
    save("gray_333x222.png", Image.fromarray(pattern(222, 333, 10, 1)[:, :, 0], "L"))
    save("mono_64x64.png", Image.fromarray(pattern(64, 64, 11, 1)[:, :, 0], "L")
         .convert("1"))
    save("palette_300x200.png", rgb(200, 300, 12).quantize(colors=200))
    save("palette_trns_120x80.png", rgb(80, 120, 13).quantize(colors=16),
         transparency=3)
    save("rgb_trns_50x40.png", rgb(40, 50, 14), transparency=(10, 20, 30))
    save("jpeg_baseline_640x480.jpg", rgb(480, 640, 15), quality=90)
    save("jpeg_progressive_641x479.jpg", rgb(479, 641, 16), quality=85,
         progressive=True)
    save("jpeg_4000x3000.jpg", rgb(3000, 4000, 17), quality=80)
    save("jpeg_prog_large_2500x1700.jpg", rgb(1700, 2500, 18), quality=75,
         progressive=True)
    save("jpeg_444_333x500.jpg", rgb(500, 333, 19), quality=95, subsampling=0)
    save("jpeg_422_500x333.jpg", rgb(333, 500, 20), quality=70, subsampling=1)
    save("jpeg_gray_300x301.jpg", Image.fromarray(pattern(301, 300, 21, 1)[:, :, 0],
                                                  "L"), quality=90)
    save("jpeg_cmyk_320x240.jpg", Image.fromarray(pattern(240, 320, 22, 4), "CMYK"),
         quality=90)
    save("jpeg_cmyk_prog_97x203.jpg", Image.fromarray(pattern(203, 97, 23, 4),
                                                      "CMYK"), quality=80,
         progressive=True)
    ex = Image.Exif()
    ex[0x0112] = 6  # orientation: rotate; the processor ignores it
    save("jpeg_exif_rot_200x100.jpg", rgb(100, 200, 24), quality=90, exif=ex)
    save("jpeg_1x1.jpg", rgb(1, 1, 25), quality=90)
    # hand-made PNGs: 2/4/16-bit, interlaced, short palette
    g = pattern(70, 90, 26, 1).astype(np.int64)
    raw("gray2_90x70.png", png_bytes(g >> 6, 2, 0))
    raw("gray4_90x70.png", png_bytes(g >> 4, 4, 0))
    g16 = pattern(50, 60, 27, 1).astype(np.int64) * 257
    raw("gray16_60x50.png", png_bytes(g16, 16, 0))
    raw("gray16_low_60x50.png", png_bytes(g16 // 160, 16, 0))  # 0..408: clip
    raw("rgb16_70x45.png", png_bytes(pattern(45, 70, 28).astype(np.int64) * 257
                                     + 77, 16, 2))
    raw("rgba16_33x77.png", png_bytes(pattern(77, 33, 29, 4).astype(np.int64)
                                      * 251, 16, 6))
    raw("la16_40x40.png", png_bytes(pattern(40, 40, 30, 2).astype(np.int64)
                                    * 255, 16, 4))
    raw("interlaced_rgb_123x77.png", png_bytes(pattern(77, 123, 31).astype(
        np.int64), 8, 2, interlace=1))
    pal = pattern(1, 16, 32)[0]
    raw("interlaced_pal4_61x45.png", png_bytes(
        pattern(45, 61, 33, 1).astype(np.int64) >> 4, 4, 3, plte=pal,
        interlace=1))
    # indices past an 8-entry PLTE read PIL's gray ramp
    raw("palette_short_40x30.png", png_bytes(
        pattern(30, 40, 34, 1).astype(np.int64) >> 4, 8, 3, plte=pal[:8]))
    raw("pal1_64x20.png", png_bytes(pattern(20, 64, 35, 1).astype(np.int64) >> 7,
                                    1, 3, plte=pal[:2]))

    # malformed
    with open(os.path.join(d, "rgba_257x129.png"), "rb") as f:
        png = f.read()
    with open(os.path.join(d, "jpeg_baseline_640x480.jpg"), "rb") as f:
        jpg = f.read()
    raw("truncated.png", png[:len(png) * 6 // 10], bad)
    raw("truncated.jpg", jpg[:len(jpg) * 6 // 10], bad)
    with open(os.path.join(d, "jpeg_progressive_641x479.jpg"), "rb") as f:
        pj = f.read()
    raw("truncated_progressive.jpg", pj[:len(pj) // 2], bad)
    i = jpg.index(b"\xff\xc4")  # DHT: its 16 code counts made impossible
    raw("corrupt_huffman.jpg", jpg[:i + 5] + b"\xff" * 16 + jpg[i + 21:], bad)
    raw("zero_0x0.png", png_bytes(np.zeros((1, 1, 3), np.int64), 8, 2,
                                  ihdr_size=(0, 0)), bad)
    sof = jpg.index(b"\xff\xc0")
    raw("zero_height.jpg", jpg[:sof + 5] + b"\0\0" + jpg[sof + 7:], bad)
    raw("bomb_20000x20000.png", png_bytes(np.zeros((1, 1, 3), np.int64), 8, 2,
                                          ihdr_size=(20000, 20000)), bad)
    raw("bomb_65000x65000.jpg", jpg[:sof + 5] + struct.pack(">HH", 65000, 65000)
        + jpg[sof + 9:], bad)
    raw("wrong_magic.png", b"this is not an image\n", bad)
    raw("empty.jpg", b"", bad)
    raw("gif_not_png.png", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", bad)
    raw("bad_crc.png", png[:29] + bytes([png[29] ^ 0xff]) + png[30:], bad)
    print(n[0])


def main():
    cmds = {"corpus": cmd_corpus, "prep": cmd_prep, "compare": cmd_compare,
            "time": cmd_time}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    sys.exit(cmds[sys.argv[1]](sys.argv[2:]) or 0)


if __name__ == "__main__":
    main()
