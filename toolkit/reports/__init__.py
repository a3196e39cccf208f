"""Reports from results: tables and the markdown report, figures, comparisons of runs, the service-level
table and the pieces a notebook displays. Reports read results and the method, never the load generator or servers.
"""
