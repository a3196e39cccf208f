"""Batches: a sweep file expanded into variants, each run as `toolkit run` would, locally or as Ray tasks,
with its progress and the index of every variant's report.
"""
