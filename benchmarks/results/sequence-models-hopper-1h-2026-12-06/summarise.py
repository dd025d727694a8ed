# python summarise.py RUN [RUN ...] > summary.json  (per-evaluation curve, updates/s, last losses)
import json, sys, statistics as st
out = {}
for name in sys.argv[1:]:
    rows = [json.loads(l) for l in open(f"{name}/metrics.jsonl")]
    ev = [m for m in rows if "eval/normalized_score" in m]
    tr = [m for m in rows if "eval/normalized_score" not in m]
    steps = sorted({m["step"] for m in ev})
    curve = []
    for s in steps:
        ms = sorted([m for m in ev if m["step"] == s], key=lambda m: m["seed"])
        sc = [m["eval/normalized_score"] for m in ms]
        curve.append({"step": s, "per_seed": [round(x, 1) for x in sc], "mean": round(st.mean(sc), 1),
                      "std": round(st.pstdev(sc), 1), "length": [round(m["eval/length"], 0) for m in ms],
                      "planning_ms_per_action": round(ms[0].get("eval/planning_ms_per_action", float("nan")), 2),
                      "planning_ms_per_step": round(ms[0].get("eval/planning_ms_per_step", float("nan")), 1)})
    ups = [m["steps_per_s"] for m in tr]
    last = {k: round(v, 4) for k, v in tr[-1].items() if "loss" in k}
    out[name] = {"curve": curve, "updates_per_s_median": round(st.median(ups), 1), "last_losses": last}
json.dump(out, sys.stdout, indent=1)
