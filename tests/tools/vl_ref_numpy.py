#!/usr/bin/python3
"""vl_ref_numpy.py - an independent NumPy computation of the image channel,
for tests/sh/test_vl_model.sh to hold engine/ref/ref_vision.c (through
tests/tools/vl_ref) against.

Written from transformers' modeling_qwen2_5_vl.py / modeling_qwen2_vl.py
(rot_pos_emb, get_window_index with F.pad and reshape/permute, the blocks,
the PatchMerger, get_rope_index) and modeling_clip.py / modeling_llava.py,
keeping their tensor operations (reshape, permute, argsort), so it shares
no structure with the C reference's loops.

  vl_ref_numpy.py encode DIR VL_REF SEED [T H W]...
      random pixels, both computations, prints the max relative error
  vl_ref_numpy.py rope DIR VL_REF ID,ID,... [T H W]...
      both get_rope_index results, prints "same" or the difference
Exit 0 when they agree (1e-9 relative for encode), 1 otherwise.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        elif t["dtype"] == "F16":
            arr = np.frombuffer(raw, dtype="<f2")
        elif t["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            raise SystemExit("unsupported dtype " + t["dtype"])
        out[name] = arr.astype(np.float64).reshape(t["shape"])
    return out


def act(name, x):
    if name == "silu":
        return x / (1 + np.exp(-x))
    if name == "quick_gelu":
        return x * (1 / (1 + np.exp(-1.702 * x)))
    if name in ("gelu_pytorch_tanh", "gelu_new"):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def ln(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def qwen_forward(cfg, W, pixels, grids):
    vc = cfg["vision_config"]
    q25 = cfg["model_type"] == "qwen2_5_vl"
    D = vc["hidden_size"] if q25 else vc["embed_dim"]
    heads = vc["num_heads"]
    hd = D // heads
    m = vc["spatial_merge_size"]
    # patch_embed: Conv3d over (C, T, P, P) with stride = kernel
    w = W["visual.patch_embed.proj.weight"]
    x = pixels.reshape(-1, *w.shape[1:])
    x = np.einsum("nctij,dctij->nd", x, w)
    # rot_pos_emb
    pos = []
    for t, h, wd in grids:
        hp = np.arange(h)[:, None].repeat(wd, 1)
        hp = hp.reshape(h // m, m, wd // m, m).transpose(0, 2, 1, 3).flatten()
        wp = np.arange(wd)[None, :].repeat(h, 0)
        wp = wp.reshape(h // m, m, wd // m, m).transpose(0, 2, 1, 3).flatten()
        pos.append(np.tile(np.stack([hp, wp], -1), (t, 1)))
    pos = np.concatenate(pos)
    dim = hd // 2
    inv = 1.0 / (10000 ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    maxg = max(max(h, wd) for _, h, wd in grids)
    full = np.outer(np.arange(maxg), inv)
    rpe = full[pos].reshape(pos.shape[0], -1)
    seq = x.shape[0]
    cu = np.concatenate([[0], np.cumsum([h * wd for t, h, wd in grids for _ in range(t)])])
    if q25:
        # get_window_index
        vws = vc["window_size"] // m // vc["patch_size"]
        win, cuw, wid = [], [0], 0
        for t, h, wd in grids:
            lh, lw = h // m, wd // m
            index = np.arange(t * lh * lw).reshape(t, lh, lw)
            ph, pw = vws - lh % vws, vws - lw % vws
            nh, nw = (lh + ph) // vws, (lw + pw) // vws
            ip = np.pad(index, ((0, 0), (0, ph), (0, pw)), constant_values=-100)
            ip = ip.reshape(t, nh, vws, nw, vws).transpose(0, 1, 3, 2, 4)
            ip = ip.reshape(t, nh * nw, vws, vws)
            seqlens = (ip != -100).sum((2, 3)).reshape(-1)
            ip = ip.reshape(-1)
            win.append(ip[ip != -100] + wid)
            cuw.extend((np.cumsum(seqlens) * m * m + cuw[-1]).tolist())
            wid += t * lh * lw
        win = np.concatenate(win)
        cuw = np.array(cuw)
        cuw = cuw[np.concatenate([[True], cuw[1:] != cuw[:-1]])]  # unique_consecutive
        x = x.reshape(seq // (m * m), m * m, -1)[win].reshape(seq, -1)
        rpe = rpe.reshape(seq // (m * m), m * m, -1)[win].reshape(seq, -1)
    emb = np.concatenate([rpe, rpe], -1)
    cos, sin = np.cos(emb), np.sin(emb)
    fullatt = vc.get("fullatt_block_indexes", [])
    for b in range(vc["depth"]):
        p = "visual.blocks.%d." % b
        cus = cu if (not q25 or b in fullatt) else cuw
        h = rms(x, W[p + "norm1.weight"], 1e-6) if q25 else ln(x, W[p + "norm1.weight"], W[p + "norm1.bias"], 1e-6)
        qkv = h @ W[p + "attn.qkv.weight"].T + W[p + "attn.qkv.bias"]
        q, k, v = qkv.reshape(seq, 3, heads, -1).transpose(1, 0, 2, 3)
        q = q * cos[:, None, :] + rotate_half(q) * sin[:, None, :]
        k = k * cos[:, None, :] + rotate_half(k) * sin[:, None, :]
        o = np.zeros_like(q)
        for s0, s1 in zip(cus[:-1], cus[1:]):
            qq, kk, vv = (a[s0:s1].transpose(1, 0, 2) for a in (q, k, v))
            sc = qq @ kk.transpose(0, 2, 1) / math.sqrt(hd)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            o[s0:s1] = (sc @ vv).transpose(1, 0, 2)
        x = x + o.reshape(seq, -1) @ W[p + "attn.proj.weight"].T + W[p + "attn.proj.bias"]
        h = rms(x, W[p + "norm2.weight"], 1e-6) if q25 else ln(x, W[p + "norm2.weight"], W[p + "norm2.bias"], 1e-6)
        if q25:
            g = h @ W[p + "mlp.gate_proj.weight"].T + W[p + "mlp.gate_proj.bias"]
            u = h @ W[p + "mlp.up_proj.weight"].T + W[p + "mlp.up_proj.bias"]
            x = x + (act(vc["hidden_act"], g) * u) @ W[p + "mlp.down_proj.weight"].T + W[p + "mlp.down_proj.bias"]
        else:
            f = act(vc.get("hidden_act", "quick_gelu"), h @ W[p + "mlp.fc1.weight"].T + W[p + "mlp.fc1.bias"])
            x = x + f @ W[p + "mlp.fc2.weight"].T + W[p + "mlp.fc2.bias"]
    h = rms(x, W["visual.merger.ln_q.weight"], 1e-6) if q25 else \
        ln(x, W["visual.merger.ln_q.weight"], W["visual.merger.ln_q.bias"], 1e-6)
    h = h.reshape(-1, D * m * m)
    h = act("gelu", h @ W["visual.merger.mlp.0.weight"].T + W["visual.merger.mlp.0.bias"])
    h = h @ W["visual.merger.mlp.2.weight"].T + W["visual.merger.mlp.2.bias"]
    if q25:
        h = h[np.argsort(win)]
    return h


def llava_forward(cfg, W, pixels):
    vc = cfg["vision_config"]
    D, heads, P, S = vc["hidden_size"], vc["num_attention_heads"], vc["patch_size"], vc["image_size"]
    hd = D // heads
    eps = vc.get("layer_norm_eps", 1e-5)
    pre = "vision_tower.vision_model."
    imgs = pixels.reshape(-1, 3, S, S)
    outs = []
    for img in imgs:
        w = W[pre + "embeddings.patch_embedding.weight"]
        g = S // P
        pt = img.reshape(3, g, P, g, P).transpose(1, 3, 0, 2, 4)  # gy gx c py px
        e = np.einsum("yxcij,dcij->yxd", pt, w).reshape(g * g, D)
        x = np.concatenate([W[pre + "embeddings.class_embedding"][None], e])
        x = x + W[pre + "embeddings.position_embedding.weight"]
        x = ln(x, W[pre + "pre_layrnorm.weight"], W[pre + "pre_layrnorm.bias"], eps)
        states = [x]
        for l in range(vc["num_hidden_layers"]):
            p = pre + "encoder.layers.%d." % l
            h = ln(x, W[p + "layer_norm1.weight"], W[p + "layer_norm1.bias"], eps)
            q = (h @ W[p + "self_attn.q_proj.weight"].T + W[p + "self_attn.q_proj.bias"]) * hd ** -0.5
            k = h @ W[p + "self_attn.k_proj.weight"].T + W[p + "self_attn.k_proj.bias"]
            v = h @ W[p + "self_attn.v_proj.weight"].T + W[p + "self_attn.v_proj.bias"]
            q, k, v = (a.reshape(-1, heads, hd).transpose(1, 0, 2) for a in (q, k, v))
            sc = q @ k.transpose(0, 2, 1)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            o = (sc @ v).transpose(1, 0, 2).reshape(-1, D)
            x = x + o @ W[p + "self_attn.out_proj.weight"].T + W[p + "self_attn.out_proj.bias"]
            h = ln(x, W[p + "layer_norm2.weight"], W[p + "layer_norm2.bias"], eps)
            h = act(vc.get("hidden_act", "quick_gelu"), h @ W[p + "mlp.fc1.weight"].T + W[p + "mlp.fc1.bias"])
            x = x + h @ W[p + "mlp.fc2.weight"].T + W[p + "mlp.fc2.bias"]
            states.append(x)
        sel = states[cfg.get("vision_feature_layer", -2)]
        if cfg.get("vision_feature_select_strategy", "default") == "default":
            sel = sel[1:]
        h = act(cfg.get("projector_hidden_act", "gelu"),
                sel @ W["multi_modal_projector.linear_1.weight"].T + W["multi_modal_projector.linear_1.bias"])
        outs.append(h @ W["multi_modal_projector.linear_2.weight"].T + W["multi_modal_projector.linear_2.bias"])
    return np.concatenate(outs)


def get_rope_index(cfg, ids, grids):
    m = cfg["vision_config"]["spatial_merge_size"]
    q25 = cfg["model_type"] == "qwen2_5_vl"
    img_tok, vs = cfg["image_token_id"], cfg["vision_start_token_id"]
    ids = list(ids)
    starts = [i for i, t in enumerate(ids) if t == vs]
    image_nums = sum(1 for i in starts if i + 1 < len(ids) and ids[i + 1] == img_tok)
    parts, st = [], 0
    for k in range(image_nums):
        ed = ids.index(img_tok, st)
        t, h, w = grids[k]
        lt, lh, lw = t, h // m, w // m
        text_len = ed - st
        st_idx = parts[-1].max() + 1 if parts else 0
        parts.append(np.tile(np.arange(text_len), (3, 1)) + st_idx)
        if q25:
            t_index = (np.arange(lt)[:, None].repeat(lh * lw, 1) * 0 * cfg["vision_config"].get("tokens_per_second", 2)).flatten()
        else:
            t_index = np.arange(lt)[:, None].repeat(lh * lw, 1).flatten()
        h_index = np.broadcast_to(np.arange(lh)[None, :, None], (lt, lh, lw)).flatten()
        w_index = np.broadcast_to(np.arange(lw)[None, None, :], (lt, lh, lw)).flatten()
        parts.append(np.stack([t_index, h_index, w_index]) + text_len + st_idx)
        st = ed + lt * lh * lw
    if st < len(ids):
        st_idx = parts[-1].max() + 1 if parts else 0
        parts.append(np.tile(np.arange(len(ids) - st), (3, 1)) + st_idx)
    pos = np.concatenate(parts, 1)
    return pos, int(pos.max() + 1 - len(ids))


def grids_of(args):
    v = [int(a) for a in args]
    return [tuple(v[i:i + 3]) for i in range(0, len(v), 3)]


def main():
    mode, d, tool = sys.argv[1], sys.argv[2], sys.argv[3]
    cfg = json.load(open(os.path.join(d, "config.json")))
    if mode == "rope":
        ids = [int(x) for x in sys.argv[4].split(",")]
        grids = grids_of(sys.argv[5:])
        pos, delta = get_rope_index(cfg, ids, grids)
        got = subprocess.run([tool, "rope", d, sys.argv[4]] + sys.argv[5:],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        cpos = np.array([[int(x) for x in got[a].split()] for a in range(3)])
        same = cpos.shape == pos.shape and (cpos == pos).all() and int(got[3]) == delta
        print("same" if same else "differ: numpy %s delta %d" % (pos.tolist(), delta))
        return 0 if same else 1
    seed = int(sys.argv[4])
    grids = grids_of(sys.argv[5:])
    W = load_safetensors(os.path.join(d, "model.safetensors"))
    rng = np.random.default_rng(seed)
    if cfg["model_type"] == "llava":
        S = cfg["vision_config"]["image_size"]
        n = len(grids) or 1
        pixels = rng.standard_normal((n * 3, S * S))
        want = llava_forward(cfg, W, pixels)
    else:
        vc = cfg["vision_config"]
        cols = 3 * vc["temporal_patch_size"] * vc["patch_size"] ** 2
        rows = sum(t * h * w for t, h, w in grids)
        pixels = rng.standard_normal((rows, cols))
        want = qwen_forward(cfg, W, pixels, grids)
    with tempfile.TemporaryDirectory() as tmp:
        pin, pout = os.path.join(tmp, "p.f64"), os.path.join(tmp, "o.f64")
        pixels.astype("<f8").tofile(pin)
        shape = subprocess.run([tool, "encode", d, pin, str(pixels.shape[0]), str(pixels.shape[1]), pout] + sys.argv[5:],
                               capture_output=True, text=True, check=True).stdout.split()
        got = np.fromfile(pout, dtype="<f8").reshape(int(shape[0]), int(shape[1]))
    if got.shape != want.shape:
        print("shape %s, numpy %s" % (got.shape, want.shape))
        return 1
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-300)
    print("rows %d cols %d max_rel %.3g" % (got.shape[0], got.shape[1], err))
    return 0 if err <= 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
