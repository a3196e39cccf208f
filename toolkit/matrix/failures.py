"""What the server or the network can do to a cell: an Error cell that --resume redoes. Anything else is a bug in
the toolkit and stops the run with its traceback, instead of an Error that --resume would redo forever."""

from __future__ import annotations

import httpx

from toolkit.base.errors import CellFailure, PromptError, ServerAPIError

EXPECTED_FAILURES = (CellFailure, PromptError, ServerAPIError, httpx.HTTPError, OSError, TimeoutError)
