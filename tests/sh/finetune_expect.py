#!/usr/bin/env python3
"""What test_finetune.sh expects the user to see, computed from a session
file's `train` and `checks` tables (sqlite3) by the rules docs/training.md
and docs/reports.md state, independently of the console's C code:

  headless DB               the headless TRAINING table
  checks DB                 item|stage|worst status of the training.* checks
  screen DB T               the Numerics screen at time T (120 columns)
  compare WANT CAPTURE      a tmux capture against screen's output
  report DB JSON MD HTML    checks the three reports; prints a summary
  diff A B DIFF.json RC     checks `day0 diff A B --json`; prints a summary

A run is (node, stage_id); its figures are those of its lowest rank."""
import json
import math
import re
import sqlite3
import sys

COLS = 120
ORDER = ["pass", "skip", "pending", "running", "warn", "not run", "fail"]
PARTS = ["t_fwd_s", "t_bwd_s", "t_opt_s", "t_comm_s"]


def rows(db, t=None):
    c = sqlite3.connect(db)
    c.row_factory = sqlite3.Row
    q = "SELECT * FROM train" + (" WHERE ts <= ?" if t is not None else "")
    q += " ORDER BY ts, node, seq"  # the fold's order (replay: seek)
    r = [dict(x) for x in c.execute(q, (t,) if t is not None else ())]
    c.close()
    return r


def g6(x):
    return "-" if x is None else "%.6g" % x


def runs_of(rs):
    """The runs in order of first appearance, each with its figures."""
    runs = []
    for r in rs:
        k = (r["node"], r["stage_id"])
        run = next((u for u in runs if u["key"] == k), None)
        if run is None:
            runs.append({"key": k, "rank": r["rank"]})
        elif r["rank"] < run["rank"]:
            run["rank"] = r["rank"]
    for u in runs:
        pts = [r for r in rs if (r["node"], r["stage_id"]) == u["key"] and r["rank"] == u["rank"]]
        u["pts"] = pts
        u["node"], u["stage"] = u["key"]
        lay = pts[0]["layout"] or ""
        for p in pts:
            if p["layout"]:
                lay = p["layout"]
        u["layout"] = lay
        u["steps"] = len(pts)
        sk = [p for p in pts if p["skipped"]]
        u["skipped"] = len(sk)
        u["first_skipped"] = sk[0]["step"] if sk else None
        loss = [p["loss"] for p in pts if p["loss"] is not None]
        u["loss_first"] = loss[0] if loss else None
        u["loss_last"] = loss[-1] if loss else None
        gn = [p["grad_norm"] for p in pts if p["grad_norm"] is not None and not p["skipped"]]
        u["grad_norm_last"] = gn[-1] if gn else None
        sc = [p["loss_scale"] for p in pts if p["loss_scale"] is not None]
        u["scale_first"] = sc[0] if sc else None
        u["scale_last"] = sc[-1] if sc else None
        u["scale_min"] = min(sc) if sc else None
        timed = [p for p in pts if all(p[k] is not None for k in PARTS)]
        u["timed"] = len(timed)
        u["means"] = [sum(p[k] for p in timed) / len(timed) if timed else None for k in PARTS]
        u["step_s"] = sum(u["means"]) if timed else None
        st = [sum(p[k] for k in PARTS) for p in timed]
        u["step_min"] = min(st) if st else None
        u["step_max"] = max(st) if st else None
        u["tokens"] = sum(p["tokens"] for p in pts if p["tokens"] and p["tokens"] > 0)
        u["last_ts"] = pts[-1]["ts"]
        u["first_ts"] = pts[0]["ts"]
    return runs


def split(u):
    s = u["step_s"]
    if not u["timed"] or not s or s <= 0:
        return "-"
    f, b, o, c = u["means"]
    return "fwd %.0f%% bwd %.0f%% opt %.0f%% comm %.0f%%" % (100 * f / s, 100 * b / s, 100 * o / s, 100 * c / s)


def num(x, fmt):
    return "-" if x is None else fmt % x


def headless(db):
    print("%-28s %-14s %5s %7s %-25s %-10s %-10s %-8s %s" % (
        "TRAINING", "LAYOUT", "STEPS", "SKIPPED", "LOSS FIRST -> LAST",
        "GRAD NORM", "LOSS SCALE", "STEP S", "SPLIT"))
    for u in runs_of(rows(db)):
        who = "%.40s on %.40s" % (u["stage"], u["node"])
        loss = "%s -> %s" % (g6(u["loss_first"]), g6(u["loss_last"]))
        print("%-28s %-14s %5d %7d %-25s %-10s %-10s %-8s %s" % (
            who, u["layout"], u["steps"], u["skipped"], loss, g6(u["grad_norm_last"]),
            g6(u["scale_last"]), num(u["step_s"], "%.4g"), split(u)))


def checks(db):
    c = sqlite3.connect(db)
    worst = {}
    for item, stage, st in c.execute(
            "SELECT item, stage, status FROM checks WHERE item LIKE 'training.%' AND node != 'console'"):
        k = (item, stage)
        if k not in worst or ORDER.index(st) > ORDER.index(worst[k]):
            worst[k] = st
    for (item, stage), st in sorted(worst.items()):
        print("%s|%s|%s" % (item, stage, st))


def screen(db, t):
    runs = runs_of(rows(db, int(t)))
    if not runs:
        sys.exit("no training at t")
    order = sorted(range(len(runs)), key=lambda i: -runs[i]["last_ts"])
    u = runs[order[0]]
    sk = ", %d skipped (first: step %d)" % (u["skipped"], u["first_skipped"]) if u["skipped"] else ""
    print("line\tTRAINING %s on %s rank %d  %s  steps %d..%d (%d%s)" % (
        u["stage"], u["node"], u["rank"], u["layout"], u["pts"][0]["step"], u["pts"][-1]["step"],
        u["steps"], sk))
    sw = max(8, min(64, COLS - 14 - 36))
    pts = u["pts"][-sw:]
    xs = ",".join(str(i) for i, p in enumerate(pts) if p["skipped"])
    n = len(pts)
    # A trailing step without the figure and not skipped draws a blank: the
    # screen's glyphs end before it.
    def count(fig):
        m = n
        while m > 0 and not pts[m - 1]["skipped"] and fig(pts[m - 1]) is None:
            m -= 1
        return m
    print("spark\tloss\t%d\t%s\t%s (first %s)" % (count(lambda p: p["loss"]), xs, g6(u["loss_last"]), g6(u["loss_first"])))
    print("spark\tgrad norm\t%d\t%s\t%s" % (count(lambda p: p["grad_norm"]), xs, g6(u["grad_norm_last"])))
    print("spark\tloss scale\t%d\t%s\t%s (min %s)" % (count(lambda p: p["loss_scale"]), xs, g6(u["scale_last"]), g6(u["scale_min"])))
    tsum = lambda p: None if any(p[k] is None for k in PARTS) else sum(p[k] for k in PARTS)
    print("spark\tstep time\t%d\t%s\t%s s" % (count(tsum), xs, num(u["step_s"], "%.4g")))
    print("line\t  %-11s %s  (mean of %d steps)" % ("split", split(u), u["timed"]))
    for i in order[1:]:
        r = runs[i]
        print("line\t  %s on %s  %s  %d steps, %d skipped  loss %s -> %s  step %s s" % (
            r["stage"], r["node"], r["layout"], r["steps"], r["skipped"], g6(r["loss_first"]),
            g6(r["loss_last"]), num(r["step_s"], "%.4g")))


def compare(wantpath, screenpath):
    """The screen (a tmux capture) against screen's expectations."""
    want = open(wantpath).read().splitlines()
    got = open(screenpath, encoding="utf-8").read().splitlines()
    bad = []
    for w in want:
        kind, text = w.split("\t", 1)
        if kind == "line":  # a whole line, spaces folded
            if not any(" ".join(g.split()) == " ".join(text.split()) for g in got):
                bad.append("no line: " + text)
            continue
        label, n, xs, val = text.split("\t")  # glyphs, positions of 'x', figure
        row = [g for g in got if g.startswith("  " + label + " ")]
        if not row:
            bad.append("no row " + label)
            continue
        g = row[0]
        body = g[14:]
        cut = body.rfind(" " + val)
        if cut < 0:
            bad.append(label + ": value '" + val + "' not in " + repr(g))
            continue
        spark = body[:cut].rstrip()
        wx = [int(i) for i in xs.split(",") if i]
        gx = [i for i, c in enumerate(spark) if c == "x"]
        if len(spark) != int(n) or gx != wx:
            bad.append("%s: %d glyphs, x at %s; want %s, x at %s: %r" % (label, len(spark), gx, n, wx, g))
    if bad:
        print("\n".join(bad))
        sys.exit(1)


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


def report(db, jpath, mdpath, htmlpath):
    bad = []
    # Runs in the order they started: by their lowest rank's first step.
    runs = sorted(runs_of(sorted(rows(db), key=lambda r: (r["node"], r["stage_id"], r["rank"], r["ts"], r["seq"]))),
                  key=lambda u: u["first_ts"])
    doc = json.load(open(jpath))
    tr = doc.get("training") or []
    if len(tr) != len(runs):
        bad.append("json: %d runs, the file has %d" % (len(tr), len(runs)))
    for u, j in zip(runs, tr):
        name = u["stage"]
        want = {"stage_id": u["stage"], "node": u["node"], "rank": u["rank"], "layout": u["layout"],
                "steps": u["steps"], "skipped": u["skipped"], "first_skipped": u["first_skipped"],
                "loss_first": u["loss_first"], "loss_last": u["loss_last"],
                "grad_norm_last": u["grad_norm_last"], "loss_scale_first": u["scale_first"],
                "loss_scale_last": u["scale_last"], "loss_scale_min": u["scale_min"],
                "tokens": u["tokens"], "timed_steps": u["timed"], "step_s": u["step_s"],
                "step_s_min": u["step_min"], "step_s_max": u["step_max"]}
        for k, p in zip(PARTS, u["means"]):
            want[k] = p
        for k, w in want.items():
            g = j.get(k)
            if isinstance(w, float) or isinstance(g, float):
                if not close(w, g):
                    bad.append("json %s %s: %r, want %r" % (name, k, g, w))
            elif g != w:
                bad.append("json %s %s: %r, want %r" % (name, k, g, w))
        if [p["loss"] for p in j["points"]] != [p["loss"] for p in u["pts"]] or \
                [p["step"] for p in j["points"]] != [p["step"] for p in u["pts"]]:
            bad.append("json %s: points differ from the file's steps" % name)
    md = open(mdpath, encoding="utf-8").read()
    for u in runs:
        row = "| %s | %s | %d | %s | %d | %d | %s | %s |" % (
            u["stage"], u["node"], u["rank"], u["layout"], u["steps"], u["skipped"],
            g6(u["loss_first"]), g6(u["loss_last"]))
        if row not in md:
            bad.append("md: no row " + row)
        if ("| %s | %s | %s |" % (u["stage"], u["pts"][-1]["step"], g6(u["pts"][-1]["loss"]))) not in md:
            bad.append("md: no step row for %s's last step" % u["stage"])
    html = open(htmlpath, encoding="utf-8").read()

    def svg(idn):
        m = re.search(r'<svg id="%s".*?</svg>' % idn, html, re.S)
        return m.group(0) if m else ""

    def lines(idn):
        return {m.group(1): len(m.group(2).split()) for m in
                re.finditer(r'data-series="([^"]*)"[^>]*points="([^"]*)"', svg(idn))}
    for idn, ok in (("chart-train-loss", lambda p: p["loss"] is not None),
                    ("chart-train-grad-norm", lambda p: p["grad_norm"] is not None and not p["skipped"]),
                    ("chart-train-loss-scale", lambda p: p["loss_scale"] is not None and p["loss_scale"] > 0)):
        want = {"%s %s" % (u["stage"], u["node"]): sum(1 for p in u["pts"] if ok(p)) for u in runs}
        want = {k: v for k, v in want.items() if v}
        if lines(idn) != want:
            bad.append("html %s: lines %s, want %s" % (idn, lines(idn), want))
    nsk = svg("chart-train-loss").count('class="skipped"')
    if nsk != sum(u["skipped"] for u in runs):
        bad.append("html: %d skipped crosses, want %d" % (nsk, sum(u["skipped"] for u in runs)))
    nsplit = svg("chart-train-split").count('class="split"')
    want = sum(1 for u in runs if u["step_s"] and u["step_s"] > 0 for p in u["means"] if p and p > 0)
    if nsplit != want:
        bad.append("html split bars: %d, want %d" % (nsplit, want))
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print("%d runs, %d points" % (len(runs), sum(len(u["pts"]) for u in runs)))


def diff(a, b, dpath, rc):
    d = json.load(open(dpath))
    ra = {"%s %s" % (u["stage"], u["layout"]): u for u in runs_of(rows(a))}
    rb = {"%s %s" % (u["stage"], u["layout"]): u for u in runs_of(rows(b))}
    got = {(r["key"], r["metric"]): r for r in d["training"] + d["training_grad"]}
    bad, nreg = [], 0
    for name in list(ra) + [k for k in rb if k not in ra]:
        ua, ub = ra.get(name), rb.get(name)
        if not ua or not ub:
            continue
        pa = {p["step"]: p for p in ua["pts"]}
        pb = {p["step"]: p for p in ub["pts"]}
        common = [s for s in pa if s in pb and pa[s]["loss"] is not None and pb[s]["loss"] is not None]
        k = max(common)
        x, y = pa[k]["loss"], pb[k]["loss"]
        want = [("%s @%d" % (name, k), "loss", x, y, (y - x) / abs(x) > 0.02 and y - x > 0)]
        noise = (ua["step_max"] - ua["step_min"]) + (ub["step_max"] - ub["step_min"])
        x, y = ua["step_s"], ub["step_s"]
        want.append((name, "step_s", x, y, (y - x) / abs(x) > 0.10 and y - x > noise))
        want.append((name, "skipped", ua["skipped"], ub["skipped"], ub["skipped"] > ua["skipped"]))
        cg = [s for s in pa if s in pb and not pa[s]["skipped"] and not pb[s]["skipped"]
              and pa[s]["grad_norm"] is not None and pb[s]["grad_norm"] is not None]
        kg = max(cg)
        x, y = pa[kg]["grad_norm"], pb[kg]["grad_norm"]
        want.append(("%s @%d" % (name, kg), "grad_norm", x, y, abs(y) / max(abs(x), 1e-12) > 2.0))
        for key, metric, x, y, reg in want:
            r = got.get((key, metric))
            if not r:
                bad.append("no row %s %s" % (key, metric))
                continue
            ok = (close(r["a"], x) and close(r["b"], y)) if isinstance(x, float) else (r["a"] == x and r["b"] == y)
            if not ok or r["regression"] != reg:
                bad.append("%s %s: %r -> %r regression %s; want %r -> %r %s" % (
                    key, metric, r["a"], r["b"], r["regression"], x, y, reg))
            nreg += reg
    if int(rc) != (1 if d["regressions"] else 0) or d["regressions"] < nreg:
        bad.append("exit %s with %d regressions (%d in fine-tuning)" % (rc, d["regressions"], nreg))
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print("%d rows, %d fine-tuning regressions, exit %s" % (len(got), nreg, rc))


if __name__ == "__main__":
    cmd = sys.argv[1]
    {"headless": headless, "checks": checks, "screen": screen, "report": report,
     "diff": diff, "compare": compare}[cmd](*sys.argv[2:])
