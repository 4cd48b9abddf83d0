#!/usr/bin/env python3
# bench/llamacpp_gguf.py MODEL_DIR OUT.gguf [f32|bf16|q8_0] - a day0 gen-model
# llama checkpoint (Hugging Face layout: config.json, safetensors shards)
# written as GGUF with llama.cpp's own gguf-py (PYTHONPATH=<llama.cpp>/gguf-py),
# for bench/llamacpp.sh.  A block-scaled FP8 checkpoint (F8_E4M3 weights,
# weight_scale_inv per block) has no GGUF type: its weights are dequantised
# (code value x block scale, in float64, stored as f32: the same weights
# day0 multiplies, for the greedy check), or then rounded to bf16 (the
# timings: llama.cpp's fastest type for these weights here) or quantised to
# Q8_0 (llama.cpp's 8-bit weights; its Q8_0 kernels died of SIGILL on the
# Sapphire Rapids VM of 2026-12-03).
#
# What convert_hf_to_gguf.py does for LlamaForCausalLM, for the tensors and
# settings gen-model writes: gguf-py's tensor-name map for MODEL_ARCH.LLAMA,
# q_proj/k_proj rows permuted from rotate_half to llama.cpp's interleaved
# rope (LlamaModel.permute), 2-D weights kept in the stored dtype (f32 or
# bf16), 1-D norms as f32, and the hyperparameters from config.json.  The
# vocabulary is a dummy SentencePiece one (<unk>, <s>, </s>, 256 byte
# tokens, then tok_N): the bench feeds token ids, never text.
# Reads safetensors without torch: a JSON header, then raw little-endian data.
import json
import os
import struct
import sys

import numpy as np
import gguf


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "BF16": np.uint16, "F16": np.float16,
              "F8_E4M3": np.uint8}.get(info["dtype"])
        if dt is None:
            sys.exit(f"llamacpp_gguf: {path}: tensor {name} has dtype {info['dtype']}, only F32/BF16/F16/F8_E4M3 are converted")
        a, b = info["data_offsets"]
        arr = mm[base + a:base + b].view(dt).reshape(info["shape"])
        out[name] = (info["dtype"], arr)
    return out


def permute(w, n_head, n_head_kv):
    # convert_hf_to_gguf.py LlamaModel.permute: rotate_half halves -> pairs
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def e4m3_values():
    # the 256 codes of FP8 e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa
    # bits; exponent 0 subnormal; S.1111.111 NaN (never written by gen-model)
    c = np.arange(256)
    s = np.where(c & 0x80, -1.0, 1.0)
    e, m = (c >> 3) & 15, c & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v[(c & 0x7F) == 0x7F] = np.nan
    return s * v


def dequant_fp8(codes, scale):
    # value x the f32 scale of its block (rows and columns of equal blocks)
    n, k = codes.shape
    br, bc = -(-n // scale.shape[0]), -(-k // scale.shape[1])
    s = np.repeat(np.repeat(scale.astype(np.float64), br, 0), bc, 1)[:n, :k]
    return (e4m3_values()[codes] * s).astype(np.float32)


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] not in ("f32", "bf16", "q8_0")):
        sys.exit("usage: llamacpp_gguf.py MODEL_DIR OUT.gguf [f32|bf16|q8_0]")
    d, out = sys.argv[1], sys.argv[2]
    fp8_as = sys.argv[3] if len(sys.argv) == 4 else "f32"
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "llama":
        sys.exit(f"llamacpp_gguf: {d}: model_type {cfg.get('model_type')!r}, only llama is converted")
    if cfg.get("rope_scaling"):
        sys.exit(f"llamacpp_gguf: {d}: rope_scaling {cfg['rope_scaling']!r} is not converted (plain rope only)")
    tensors = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(d, fn)))
    if not tensors:
        sys.exit(f"llamacpp_gguf: {d}: no .safetensors files")

    # FP8: each weight dequantised with its weight_scale_inv
    for name in [n for n in tensors if n.endswith(".weight_scale_inv")]:
        wname = name[: -len("_scale_inv")]
        sdt, sc = tensors.pop(name)
        wdt_, codes = tensors[wname]
        if wdt_ != "F8_E4M3" or sdt != "F32":
            sys.exit(f"llamacpp_gguf: {d}: {name}: expected F32 scales of an F8_E4M3 weight")
        tensors[wname] = ("FP8", dequant_fp8(np.asarray(codes), np.asarray(sc)))
    if any(t[0] == "F8_E4M3" for t in tensors.values()):
        sys.exit(f"llamacpp_gguf: {d}: an F8_E4M3 tensor without weight_scale_inv")

    L = cfg["num_hidden_layers"]
    n_head = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    hidden = cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or hidden // n_head
    vocab = cfg["vocab_size"]
    # FP8 checkpoints keep the embedding and lm_head unquantised
    dtypes = {t[0] for n, t in tensors.items() if len(t[1].shape) == 2}
    if "FP8" in dtypes:
        dtypes = {"FP8"}
    if len(dtypes) != 1:
        sys.exit(f"llamacpp_gguf: {d}: mixed weight dtypes {sorted(dtypes)}")
    wdt = dtypes.pop()
    if wdt == "FP8":
        wdt = {"q8_0": "Q8_0", "bf16": "BF16"}.get(fp8_as, "F32")
    ftype = {"F32": gguf.LlamaFileType.ALL_F32, "BF16": gguf.LlamaFileType.MOSTLY_BF16,
             "F16": gguf.LlamaFileType.MOSTLY_F16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[wdt]

    arch = gguf.MODEL_ARCH.LLAMA
    w = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[arch])
    w.add_name("day0-gen-model")
    w.add_block_count(L)
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_file_type(ftype)
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(head_dim)
    if head_dim != hidden // n_head:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)

    # dummy SentencePiece vocabulary of exactly vocab_size entries
    if vocab < 259 + 1:
        sys.exit(f"llamacpp_gguf: vocab_size {vocab} < 260 (the dummy vocabulary's fixed tokens)")
    toks, scores, types = [b"<unk>", b"<s>", b"</s>"], [0.0, 0.0, 0.0], [
        gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    for b in range(256):
        toks.append(b"<0x%02X>" % b); scores.append(0.0); types.append(gguf.TokenType.BYTE)
    for i in range(len(toks), vocab):
        toks.append(b"tok_%d" % i); scores.append(-float(i)); types.append(gguf.TokenType.NORMAL)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)

    names = gguf.get_tensor_name_map(arch, L)
    for name in sorted(tensors):
        dt, arr = tensors[name]
        if name.endswith("rotary_emb.inv_freq"):
            continue
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            sys.exit(f"llamacpp_gguf: no GGUF name for tensor {name}")
        if name.endswith("q_proj.weight"):
            arr = permute(arr, n_head, n_head)
        elif name.endswith("k_proj.weight"):
            arr = permute(arr, n_head, n_kv)
        if arr.ndim == 1:  # norms: f32 whatever the checkpoint's dtype
            arr = bf16_to_f32(arr) if dt == "BF16" else arr.astype(np.float32)
            w.add_tensor(new, np.ascontiguousarray(arr))
        elif dt == "BF16":
            w.add_tensor(new, np.ascontiguousarray(arr), raw_dtype=gguf.GGMLQuantizationType.BF16)
        elif dt == "FP8" and fp8_as == "bf16":  # round to nearest even
            u = arr.astype(np.float32).view(np.uint32).astype(np.uint64)
            b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            w.add_tensor(new, np.ascontiguousarray(b), raw_dtype=gguf.GGMLQuantizationType.BF16)
        elif dt == "FP8" and fp8_as == "q8_0":
            q = gguf.quants.quantize(np.ascontiguousarray(arr), gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(new, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(new, np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
