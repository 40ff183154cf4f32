"""Layer 6, a sweep: ``runner`` (checks once, then the launcher), hyper-parameter ``selection`` on validation,
``launchers`` and the ``process_pool``, ``status``."""
