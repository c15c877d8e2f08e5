"""Experiments on trained and constructed models: capacity sweeps (:mod:`.sweep`), the mechanism study
(:mod:`.study`), probes (:mod:`.probes`), figures (:mod:`.figures`), the teaching demo (:mod:`.demo`) and the
executors that run trials locally or on Dask (:mod:`.executors`)."""
