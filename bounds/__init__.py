"""Information-theoretic lower bounds and counting over R-regular edge-coloured graphs."""
