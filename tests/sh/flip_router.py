# flip_router.py MODEL.safetensors LAYER: make router experts 0 and 1 of a
# mixtral layer identical in bf16 (expert 1 = expert 0 x (1 + 2^-20)), so a
# bf16 run picks expert 0 (a tie, lower index) where float64 picks expert 1:
# a routing flip the compute dtype cannot resolve (test_validate_local.sh).
import json
import struct
import sys

path, layer = sys.argv[1], int(sys.argv[2])
with open(path, 'r+b') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    hdr = json.loads(f.read(n))
    t = hdr['model.layers.%d.block_sparse_moe.gate.weight' % layer]
    assert t['dtype'] == 'F32', t['dtype']
    E, H = t['shape']
    off = 8 + n + t['data_offsets'][0]
    f.seek(off)
    w = list(struct.unpack('<%df' % (E * H), f.read(E * H * 4)))
    for j in range(H):
        w[H + j] = w[j] * (1 + 2 ** -20)
    f.seek(off)
    f.write(struct.pack('<%df' % (E * H), *w))
