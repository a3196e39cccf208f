"""Jupyter: kernels that stay in the caller's session, notebooks executed by papermill and converted by
nbconvert, and what the measuring notebooks call.
"""
