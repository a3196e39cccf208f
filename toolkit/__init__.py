"""Speed-test matrix toolkit for vLLM servers: prefill and sustained decode, measured and reported."""

__version__ = "0.1.0"
