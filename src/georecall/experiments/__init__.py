"""Experiments on trained and constructed models: capacity sweeps (:mod:`.sweep`, with its parts in
``sweep_*``), the mechanism study (:mod:`.study`, with ``study_design`` and ``study_report``), probes
(:mod:`.probes`, with ``probes_mechanism`` and ``probes_hidden``), figures (:mod:`.figures`), the teaching
demo (:mod:`.demo`), the job driver (:mod:`.driver`) and the executors that run trials locally or on Dask
(:mod:`.executors`)."""
