# same_decodes.py C_OUT ORACLE_OUT: the D lines (decoded text as JSON) of
# tok_batch and oracle.mjs are the same strings; prints how many.
import json
import sys

def decodes(path):
    return [json.loads(l[2:]) for l in open(path, encoding="utf-8") if l.startswith("D ")]

a, b = decodes(sys.argv[1]), decodes(sys.argv[2])
bad = [i for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]
if bad or not a:
    i = bad[0] if bad else 0
    print("decode %d: C %r oracle %r" % (i + 1, a[i][:120] if i < len(a) else None,
          b[i][:120] if i < len(b) else None), file=sys.stderr)
    sys.exit(1)
print(len(a))
