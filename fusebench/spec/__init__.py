"""Layer 1, the benchmark spec: its schema, ``read_spec``, overrides and config hash (``config``), the pretraining
method declarations (``methods``), the precision policy (``precision``) and what one cell / sweep is asked to
do (``request``)."""
