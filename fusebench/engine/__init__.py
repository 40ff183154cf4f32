"""Layer 3, the engine: data splits and loaders (``data``), optimiser (``optim``), the phase loop (``loop``),
pretraining and evaluation steps, trackers, a cell's folder, lock and checkpoint (``cell``, ``locks``), threads
and speed options."""
