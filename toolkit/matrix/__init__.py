"""One matrix against one server: discovery and the server's HTTP API, prompts of exact length, background
sampling, the prefill and sustained-decode cells, raw traces, the run folder's lock, and the runner.
"""
