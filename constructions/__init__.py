"""Hand-built weights for every construction, all run by the one forward pass in `model.py`."""
