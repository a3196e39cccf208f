"""What every run-folder document shares: one reader, one writer, and read access by field name as in the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from toolkit.base.errors import ResultsError
from toolkit.results.store import read_json, write_json_atomic


class Document(BaseModel):
    """A JSON document of a run folder. Only the fields a document holds are written back (`exclude_unset`)."""

    model_config = ConfigDict(extra="allow")

    error: ClassVar[type[ResultsError]] = ResultsError  # what a damaged or newer file of this kind raises

    schema_version: int | None = Field(
        default=None, description="Stamped on save (toolkit.results.store); None: a file written before stamping."
    )
    _order: tuple[str, ...] = PrivateAttr(default=())  # the fields in the order read: written back in it

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: object, handler: ValidatorFunctionWrapHandler) -> Self:
        document: Self = handler(data)
        if isinstance(data, dict):
            document._order = tuple(data)
        return document

    @classmethod
    def read(cls, path: str | Path) -> Self:
        """The document at `path` (OSError when missing); `error`, one line naming the file, when it is damaged,
        of a newer layout, or holds a field of another type."""
        return cls.parsed(read_json(path, cls.error), path)

    @classmethod
    def parsed(cls, data: dict[str, JsonValue], where: str | Path) -> Self:
        """`data` as this document, or `error` in one line naming `where` and the first field that does not fit."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            raise cls.error(f"{where}: {field}: {first['msg']}") from None

    @classmethod
    def written(cls, data: dict[str, object], where: str | Path) -> Self:
        """`data` as it will be written and read back (tuples as lists, other objects as text), as this document;
        `error` in one line naming `where` and the first field that does not fit."""
        return cls.parsed(json.loads(json.dumps(data, default=str)), where)

    def write(self, path: str | Path) -> None:
        """Write the document atomically, stamped (StoreError, one line, when it cannot be written)."""
        write_json_atomic(path, self.as_dict())

    def as_dict(self) -> dict[str, JsonValue]:
        """The fields this document holds, as the file holds them."""
        held: dict[str, JsonValue] = self.model_dump(exclude_unset=True)
        return {key: held[key] for key in dict.fromkeys((*self._order, *held)) if key in held}

    def __getitem__(self, key: str) -> JsonValue:
        """A field as the file holds it (KeyError when it holds none): read as the mapping it was before it had a
        model."""
        return self.as_dict()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.as_dict()
