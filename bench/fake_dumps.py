# fake_dumps.py DIR LAYERS T H: layer-NNN.safetensors files of the shape
# run --dump-layers writes (F32 "hidden" [T, H]), finite made-up values:
# for bench/validate_local.sh, which measures memory and time, not error.
import json
import os
import random
import struct
import sys

d, layers, T, H = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(d, exist_ok=True)
rnd = random.Random(7)
for l in range(layers):
    hdr = json.dumps({"hidden": {"dtype": "F32", "shape": [T, H],
                                 "data_offsets": [0, T * H * 4]}}).encode()
    hdr += b' ' * (-len(hdr) % 8)
    with open(os.path.join(d, 'layer-%03d.safetensors' % l), 'wb') as f:
        f.write(struct.pack('<Q', len(hdr)) + hdr)
        f.write(struct.pack('<%df' % (T * H), *[rnd.uniform(-1, 1) for _ in range(T * H)]))
