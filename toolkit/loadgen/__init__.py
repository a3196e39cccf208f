"""The HTTP load generator: streamed completions sent and timed chunk by chunk (SSE framing, llhttp replies,
the streaming client). It knows nothing of the method: no windows, statuses or matrices.
"""
