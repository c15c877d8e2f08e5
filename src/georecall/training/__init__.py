"""The autograd-free NumPy trainer: the loop (:mod:`.train`), the loss and its dense reference gradient
(:mod:`.backward`), the initialisation (:mod:`.parameters`), the optimizers (:mod:`.optimizers`) and the
structure-aware step (:mod:`.train_structured`), tested against the dense one."""
