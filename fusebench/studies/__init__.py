"""Layer 6, studies across benchmark variants: ``kviews`` (accuracy against the number of views)."""
