"""Layer 2, the pieces a cell is assembled from beside the objectives, datasets, encoders and metrics, and the spec
checked against them before any training: ``spec_check`` (``load_spec``), ``compat`` (which objectives fit),
``memory_budget``, the downstream ``protocols`` and the reference rows' features (``reference_features``), the
``model`` (backbone + task head), pretrained ``encoder_weights``, representation ``diagnostics`` and the
pretraining methods (``teacher``, ``tuple_method`` / ``tuple_optim``)."""
