"""Layer 0, runtime helpers every layer may use: seeds and RNG states, devices, git info (``utils``), progress
bars and log lines (``progress``), DDP (``distributed``), SIGTERM handling (``interrupt``)."""
