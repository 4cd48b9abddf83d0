#!/usr/bin/env python3
"""serve_soak.py - a randomized soak of `day0-engine serve`'s paged KV cache.

    serve_soak.py URL SECONDS CLIENTS VOCAB PIDS OUT.json

CLIENTS threads send completions for SECONDS: random prompt lengths, half
of them after one of a few shared system prompts (prefix reuse), random
max_tokens, streamed or not; some streams are dropped after a few events
(disconnects), some requests are sent with a 1 ms timeout (cancelled before
an answer), a few ask for more than the cache can ever hold (refused with a
400 and a reason).  Every answer is classed; a stream that stays silent for
60 s is a stall (a deadlock).  The resident memory of PIDS (the serve
ranks) is sampled each second.  At the end, once the server is idle, its
/metrics are read.  OUT gets the tallies; the caller judges them.
"""
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

url, seconds, clients, vocab = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
pids = [p for p in sys.argv[5].split(",") if p]
out = sys.argv[6]
host = urllib.parse.urlparse(url)
lock = threading.Lock()
tally = {"ok": 0, "refused": 0, "refused_without_reason": 0, "cancelled": 0,
         "disconnected": 0, "stall": 0, "error": 0, "wrong_length": 0}
errors = []
systems = [[random.Random(s).randrange(1, vocab) for _ in range(48)] for s in range(3)]


def count(k, why=None):
    with lock:
        tally[k] += 1
        if why and len(errors) < 20:
            errors.append(why)


def one(r):
    n = r.randrange(1, 96)
    prompt = [r.randrange(1, vocab) for _ in range(n)]
    if r.random() < 0.5:
        prompt = systems[r.randrange(len(systems))] + prompt
    max_tokens = r.randrange(1, 64)
    kind = r.random()
    if kind < 0.03:
        max_tokens = 100000  # can never fit: a 400 with a reason
    stream = r.random() < 0.5
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": stream})
    timeout = 0.001 if 0.03 <= kind < 0.08 else 60
    c = http.client.HTTPConnection(host.hostname, host.port, timeout=timeout)
    try:
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = c.getresponse()
        if resp.status != 200:
            doc = json.loads(resp.read() or b"{}")
            msg = doc.get("error", {}).get("message", "")
            if resp.status in (400, 413) and msg:
                count("refused")
            else:
                count("refused_without_reason", "%d %s" % (resp.status, msg))
            return
        if not stream:
            doc = json.loads(resp.read())
            got = len(doc["choices"][0]["token_ids"])
            count("ok" if got == max_tokens else "wrong_length",
                  None if got == max_tokens else "%d of %d tokens" % (got, max_tokens))
            return
        drop = r.random() < 0.15
        events, got, done = 0, 0, False
        while True:
            line = resp.fp.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            if line.strip() == b"data: [DONE]":
                done = True
                break
            events += 1
            got += len(json.loads(line[6:])["choices"][0].get("token_ids", []))
            if drop and events >= 2:
                count("disconnected")
                return
        if done and got == max_tokens:
            count("ok")
        else:
            count("wrong_length", "stream: %d of %d tokens, [DONE] %s" % (got, max_tokens, done))
    except (TimeoutError, OSError) as e:
        if timeout < 1:
            count("cancelled")
        elif "timed out" in str(e):
            count("stall", "no answer within 60 s")
        else:
            count("error", repr(e))
    finally:
        c.close()


def client(seed, end):
    r = random.Random(seed)
    while time.time() < end:
        one(r)


def rss():
    total = 0
    for p in pids:
        try:
            for line in open("/proc/%s/status" % p):
                if line.startswith("VmRSS"):
                    total = max(total, int(line.split()[1]))
        except OSError:
            pass
    return total


end = time.time() + seconds
threads = [threading.Thread(target=client, args=(i, end)) for i in range(clients)]
for t in threads:
    t.start()
samples = []
while any(t.is_alive() for t in threads):
    samples.append(rss())
    time.sleep(1)
for t in threads:
    t.join()


def metrics():
    c = http.client.HTTPConnection(host.hostname, host.port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    m = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    return m


m = metrics()
for _ in range(100):  # the server finishes what the cancels left
    if m.get('vllm:num_requests_running{model_name="m"}', 1) == 0 and \
       m.get('vllm:num_requests_waiting{model_name="m"}', 1) == 0:
        break
    time.sleep(0.1)
    m = metrics()
third = max(1, len(samples) // 3)
json.dump({"tally": tally, "errors": errors, "rss_kib": samples,
           "rss_early": max(samples[:third] or [0]), "rss_late": max(samples[-third:] or [0]),
           "metrics": m}, open(out, "w"), indent=1)
