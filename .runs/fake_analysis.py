import time, numpy as np, sys
from georecall.verify.lm import run, facts as lf
from georecall.verify.lm.run import _Prepared
import georecall.verify.lm.run as R
F = lf.load_facts(lf.bundled_facts_path())
class Tok:
    pass
# fake prep without tokenizer: emulate classes by candidate index
prep = object.__new__(_Prepared)
prep.facts=F; prep.fact_list=F.facts()
nR=len(F.relations); n=len(F.subjects)
prep.classes=[np.arange(len(r.candidates)) for r in F.relations]
prep.cand_class=[{c:i for i,c in enumerate(r.candidates)} for r in F.relations]
prep.present=np.zeros((n,nR),bool); prep.label=np.zeros((nR,n),np.int64); prep.fact_row=-np.ones((nR,n),np.int64)
prep.fact_rel=np.array([r for _i,r,_a in prep.fact_list]); prep.fact_subj=np.array([i for i,_r,_a in prep.fact_list]); prep.fact_token=np.zeros(len(prep.fact_list),np.int64)
for k,(i,r,a) in enumerate(prep.fact_list):
    prep.present[i,r]=True; prep.label[r,i]=prep.cand_class[r][a]; prep.fact_row[r,i]=k; prep.fact_token[k]=prep.label[r,i]
prep.distinct=[np.ones(nR,bool)]*2
rng=np.random.default_rng(0)
nl=int(sys.argv[1])
m={"L":30,"width":576,"layers":list(range(nl)),"templates":[0,1],"lre_layers":[],"intervene_layers":[]}
m["alone"]=rng.standard_normal((n,nl,576)).astype(np.float32); m["alone_random"]=m["alone"]
for r in range(nR): m[f"U{r}"]=rng.standard_normal((len(F.relations[r].candidates),576))
nf=len(prep.fact_list)
for t in range(2):
    m[f"answers{t}"]=np.zeros(nf,np.int64); m[f"known{t}"]=np.zeros(nf,bool); m[f"lens{t}"]=np.zeros((nf,nl),np.int64)
    m[f"patch_src{t}"]=np.zeros(0,np.int64); m[f"patch_dst{t}"]=np.zeros(0,np.int64); m[f"patched{t}"]=np.zeros((0,nl),np.int64)
m["answers_random"]=m["answers0"]
t=time.process_time(); w=time.time()
doc=run.analyse(m,F,seed=0,prep=prep)
print("cpu",time.process_time()-t,"wall",time.time()-w)
