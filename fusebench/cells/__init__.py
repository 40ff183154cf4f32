"""Layer 5, the cell functions the pipelines name: ``standard`` (pretrain, then the downstream protocol),
``embedding_protocol``, ``gaussian_mi``; ``execute`` is the one way a cell runs."""
