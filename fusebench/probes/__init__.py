"""Layer 3, the probes on frozen embeddings: the logistic regression and its L2 search (``logistic``), the few-shot
probes (``fewshot``), the kNN probe (``knn``), k-means (``kmeans``), the linear probe and the evaluation that runs
them all (``embedding_eval``) and missing-view evaluation (``missing_views``)."""
