"""The harness, by concern: :mod:`.checking` (the exhaustive checker and its evaluation paths),
:mod:`.sections` (the rows of ``georecall verify``), :mod:`.training` (the NumPy trainer),
:mod:`.experiments` (sweeps, the mechanism study, probes, figures, demo) and :mod:`.cli` (the ``georecall``
command line). Shared infrastructure lives outside: :mod:`georecall.io` (files), :mod:`georecall.memory` (the
memory budget)."""
