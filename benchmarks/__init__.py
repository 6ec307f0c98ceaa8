"""The maintainers' benchmarks, each a module run from the repository root as
``python -m benchmarks.<name>`` (benchmarks/README.md lists them and what they answer)."""
