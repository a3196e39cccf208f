"""Open-loop request-rate sweeps: how many requests per second a server takes before its latency breaks a service level.

Each step sends requests at their scheduled arrival times (Poisson, constant or gamma arrivals; `inf` = all at
once) whatever the server is doing, from an idle server, with cold prompts of fixed or drawn lengths or from a local
dataset; it keeps one record per request (`<run>/rates/step-NNN.parquet`), a row per step
(`<run>/rates/steps.jsonl`: offered and achieved rate, latency percentiles, goodput, the client's scheduling lag,
the server's queue and its token counters against the client's sums) and the sweep's parameters
(`<run>/rates/sweep.json`). An optional search bisects between the listed steps for the highest rate meeting the
service level. The judging itself is `toolkit.method.goodput`, so a finished sweep can be judged again from its
records; the entry point is `toolkit.rates.runner.run_rates` (or `python -m toolkit rates`).
"""
