"""Results on disk: the append-only store and run.json, run folders read back as tidy DataFrames, imported
published reports, and local paths as a report shows them.
"""
