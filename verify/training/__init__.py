"""The autograd-free NumPy trainer: the dense reference (:mod:`.train`) and the structure-aware step
(:mod:`.train_structured`), tested against it."""
