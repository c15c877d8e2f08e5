import time, sys, json
t=time.time()
from georecall.verify.lm import loader, run, facts as lf
loader.quiet(); loader.set_threads(1)
L = loader.load_model("smollm2")
print("loaded", time.time()-t, flush=True)
F = lf.load_facts(lf.bundled_facts_path())
doc = run.probe_lm(L, F, seed=0, cache="/work/wt/probes/.runs/cache_try.npz", progress=lambda m: print(m, time.time()-t, flush=True))
json.dump(doc, open("/work/wt/probes/.runs/try.json","w"), default=lambda o: o.tolist() if hasattr(o,"tolist") else str(o))
print("\n".join(run.render_text(doc)))
print("total", time.time()-t)
