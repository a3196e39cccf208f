"""Jupyter: kernels that stay in the caller's session (kernels, watchdog), notebooks executed by papermill
(execute), converted by nbconvert (convert; figures: the images they drew), the reports written from them
(reports), the one run pipeline (pipeline, run_sweep), and what the measuring notebooks call (notebook, rate_notebook).
"""
