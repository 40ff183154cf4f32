"""Training loop, benchmark runner and run records (``fusebench.training``)."""
