"""papermill's nbclient engine, saving the executed notebook at most once every SAVE_EVERY_S while its cells run.

papermill writes the whole executed notebook, validated and with its images, as each cell starts and as it ends: in a
`toolkit run` about a sixth of the command's own CPU, most of it for cells that take milliseconds (the report's).
Here a cell's start or end is written only when the last write is SAVE_EVERY_S old; the notebook's start and its
end (whether it ran or failed) are always written, so the notebook a run leaves is papermill's, and one watched
while a long cell runs is at most SAVE_EVERY_S behind (papermill's own autosave within a long cell is unchanged).
"""

from __future__ import annotations

from typing import Any

from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

ENGINE_NAME = "toolkit"
SAVE_EVERY_S = 2.0


class SparseSaves(NotebookExecutionManager):  # type: ignore[misc]
    """papermill's execution manager, whose saves between the notebook's start and end are at most SAVE_EVERY_S
    apart."""

    always = True  # the notebook's start, until it is saved, and its end

    def save(self, **kwargs: Any) -> None:
        if self.always or (self.now() - self.last_save_time).total_seconds() >= SAVE_EVERY_S:
            super().save(**kwargs)

    def notebook_start(self, **kwargs: Any) -> None:
        super().notebook_start(**kwargs)
        self.always = False

    def notebook_complete(self, **kwargs: Any) -> None:
        self.always = True
        super().notebook_complete(**kwargs)


class SparseSavesEngine(NBClientEngine):  # type: ignore[misc]
    """papermill's nbclient engine with `SparseSaves` (papermill's `Engine.execute_notebook`, its manager swapped)."""

    @classmethod
    def execute_notebook(
        cls,
        nb: Any,
        kernel_name: str,
        output_path: str | None = None,
        progress_bar: bool = True,
        log_output: bool = False,
        autosave_cell_every: int = 30,
        **kwargs: Any,
    ) -> Any:
        manager = SparseSaves(nb, output_path=output_path, progress_bar=progress_bar, log_output=log_output,
                              autosave_cell_every=autosave_cell_every)  # fmt: skip
        manager.notebook_start()
        try:
            cls.execute_managed_notebook(manager, kernel_name, log_output=log_output, **kwargs)
        finally:
            manager.cleanup_pbar()
            manager.notebook_complete()
        return manager.nb


papermill_engines.register(ENGINE_NAME, SparseSavesEngine)
