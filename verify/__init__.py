"""The harness, by concern, in layers imported only downward (CONTRIBUTING.md, "Layers inside verify/"):
:mod:`.checking` (the exhaustive checker, its evaluation paths, and :mod:`.checking.run`: build a construction
on a task and check it) ← :mod:`.training` (the NumPy trainer) ← :mod:`.experiments` (sweeps, the mechanism
study, probes, figures, demo) ← :mod:`.sections` (the rows of ``georecall verify``) and, beside it,
:mod:`.cli` (the ``georecall`` command line, which finds those rows through their entry point); :mod:`.lm`
(the ``lm`` extra) stands apart. Shared infrastructure lives outside: :mod:`georecall.io` (files),
:mod:`georecall.memory` (the memory budget; each command's estimate in :mod:`georecall.estimates`)."""
