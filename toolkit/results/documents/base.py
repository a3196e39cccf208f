"""What every run-folder document shares: one reader, one writer, and read access by field name as in the file; and
what every block of one shares: its keys written back in the order read, unknown ones kept."""

from __future__ import annotations

import json
from collections.abc import ItemsView, KeysView, Mapping, ValuesView
from pathlib import Path
from typing import ClassVar, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from toolkit.base.errors import ResultsError
from toolkit.results.store import read_json, write_json_atomic

Number = int | float  # as the file holds it: 4 stays 4, 0.5 stays 0.5


class Block(BaseModel):
    """A JSON object of a run-folder document: its named fields typed, every other key kept (`extra="allow"`), and
    the keys it was read with written back in that order, the fields it was not given left out (`exclude_unset`).
    Read as the mapping it was before it had a model: by key, with `get`, `keys` and `items`, and equal to a mapping
    of its keys."""

    model_config = ConfigDict(extra="allow")

    _order: tuple[str, ...] = PrivateAttr(default=())  # the keys in the order read: written back in it

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: object, handler: ValidatorFunctionWrapHandler) -> Self:
        block: Self = handler(data)
        if isinstance(data, dict):
            block._order = tuple(data)
        return block

    @model_serializer(mode="wrap")
    def _in_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        held: dict[str, object] = handler(self)
        return {key: held[key] for key in dict.fromkeys((*self._order, *held)) if key in held}

    def as_dict(self) -> dict[str, JsonValue]:
        """The keys this block holds, as the file holds them, in its order."""
        held: dict[str, JsonValue] = self.model_dump(exclude_unset=True)
        return held

    def __getitem__(self, key: str) -> JsonValue:
        """A key's value as the file holds it (KeyError when it holds none)."""
        return self.as_dict()[key]

    def get(self, key: str, default: JsonValue = None) -> JsonValue:
        """A key's value as the file holds it, else `default`."""
        return self.as_dict().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.as_dict()

    def keys(self) -> KeysView[str]:
        """The keys it holds, in its order (so `dict(block)` and `{**block}` read it as the file holds it)."""
        return self.as_dict().keys()

    def items(self) -> ItemsView[str, JsonValue]:
        """(key, value) as the file holds them, in its order."""
        return self.as_dict().items()

    def values(self) -> ValuesView[JsonValue]:
        """The values as the file holds them, in its order."""
        return self.as_dict().values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self.as_dict() == dict(other)
        return super().__eq__(other)


class Document(Block):
    """A JSON document of a run folder. Only the fields a document holds are written back (`exclude_unset`)."""

    error: ClassVar[type[ResultsError]] = ResultsError  # what a damaged or newer file of this kind raises

    schema_version: int | None = Field(
        default=None, description="Stamped on save (toolkit.results.store); None: a file written before stamping."
    )

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
