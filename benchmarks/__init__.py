"""Benchmark specifications (``fusebench.benchmarks``): one YAML file per benchmark in this folder."""

if __name__ != "fusebench.benchmarks":  # this folder is mapped to fusebench.benchmarks by pyproject.toml
    raise ImportError("import this folder as fusebench.benchmarks; a bare 'benchmarks' would shadow other packages")
