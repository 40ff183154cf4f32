"""Layer 3, the probes on frozen embeddings: linear / few-shot / kNN probes (``embedding_eval``), k-means
(``kmeans``) and missing-view evaluation (``missing_views``)."""
