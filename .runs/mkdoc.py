import json, sys
doc = json.load(open(sys.argv[1]))
T = doc["thresholds"]
k = doc["snrs"].index(T["named_snr"])
out = []
f = lambda x, d=2: "—" if x is None else f"{x:.{d}f}"
best = {}
for row in doc["layers"]:
    for x in row["per_relation"]:
        if x["relation"] not in best or x["accuracy"] > best[x["relation"]][1]["accuracy"]:
            best[x["relation"]] = (row["layer"], x)
lre = {x["relation"]: x for x in doc["lre"]}
out.append("| relation | facts | known (t0 / t1) | classes | unseen / n | chance | best layer | acc (seen / unseen) | controls max | power at SNR 1 (shuffled) | verdict | LRE best (β), vocab / cand., bias | patching max (t0) |")
out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for rel in doc["relations"]:
    layer, x = best[rel["relation"]]
    ctrl = max(x["majority"], x["shuffled"], x.get("random_model", 0.0))
    verdicts = sorted({y["verdict"] for row in doc["layers"] for y in row["per_relation"] if y["relation"] == rel["relation"]})
    L = lre[rel["relation"]]
    if L["told"]:
        b = max(L["layers"], key=lambda y: y["faithful"])
        lre_s = f"{f(b['faithful'])} / {f(b['faithful_candidates'])} at {b['layer']} (β {b['beta']:g}), bias {f(b['bias_only'])}"
    else:
        lre_s = "cannot tell (" + L["reason"].split(";")[0] + ")"
    pr = doc["patching"][0]["per_relation"].get(rel["relation"])
    patch_s = f"{max(pr['moved']):.2f} of {pr['pairs']}" if pr else "—"
    pw = rel["power"]
    out.append(f"| {rel['relation']} | {rel['facts']} | {rel['known'][0]} / {rel['known'][1]}{'' if rel['template_distinct'][1] else '*'} | {rel['classes']} | {x['unseen']}/{x['n']} | {x['chance']:.3f} | {layer} | {f(x['accuracy'])} ({f(x['accuracy_seen'])} / {f(x['accuracy_unseen'])}) | {f(ctrl)} | {f(pw['positive'][k])} ({f(pw['negative'][k])}) | {', '.join(verdicts)} | {lre_s} | {patch_s} |")
out.append("")
out.append("| layer | " + " | ".join(str(r["layer"]) for r in doc["layers"]) + " |")
out.append("|---|" + "---|" * len(doc["layers"]))
out.append("| decoding, mean | " + " | ".join(f(r["decode_mean"]) for r in doc["layers"]) + " |")
out.append("| decodable / told | " + " | ".join(f"{sum(y['verdict']=='decodable' for y in r['per_relation'])}/{sum(y['verdict']!='cannot tell' for y in r['per_relation'])}" for r in doc["layers"]) + " |")
out.append("| superposition R² (shuffled; presence) | " + " | ".join(f"{f(r['superposition']['r2'])} ({f(r['superposition']['shuffled_r2'])}; {f(r['superposition']['presence_r2'])})" for r in doc["layers"]) + " |")
for t, tm in enumerate(doc["templates"]):
    out.append(f"| logit lens, template {tm} | " + " | ".join(f(v) for v in doc["logit_lens"][t]) + " |")
for t, tm in enumerate(doc["templates"]):
    p = doc["patching"][t]
    out.append(f"| patching, template {tm} ({p['pairs']} pairs) | " + " | ".join(f(p["moved"][p["layers"].index(r["layer"])]) if r["layer"] in p["layers"] and p["moved"] else "·" for r in doc["layers"]) + " |")
print("\n".join(out))
print()
sp = doc["superposition_power"]
print("superposition power:", ", ".join(f"SNR {a:g}: {f(b)}" for a, b in zip(sp["snrs"], sp["positive"])), "negative", sp["negative"])
for x in doc["interventions"]:
    if x.get("edits"):
        print(f"interventions layer {x['layer']}: {x['edits']} edits, {x['others']} others, already {f(x['already'])}, fitted ratio {f(x['fitted_ratio_median'],3)}; " + "; ".join(f"dose {d['dose']}: j {f(d['success'])} changed {f(d['changed'])} stay {f(d['stay'])}" for d in x["doses"]))
print()
for l in doc["verdict"]["lines"]: print("- " + l)
print()
print("seconds", doc.get("seconds"), "measure", doc.get("measure_seconds"), "analysis", doc.get("analysis_seconds"), "memory", doc.get("memory", {}).get("total_gib"))
print("power per relation:", {r["relation"]: [f(v) for v in r["power"]["positive"]] for r in doc["relations"]})
