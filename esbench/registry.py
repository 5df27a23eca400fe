"""Entry-point registries: how esbench finds its methods and backends, built-in or plug-in alike.

A kind is a name in an entry-point group (`esbench.methods`, `esbench.backends`) whose value is `module:attr`; the
built-ins are registered the same way, in pyproject.toml, so a plug-in package is one module plus one entry point.
A kind's module is imported only when a suite uses it (`esbench validate` imports no torch), as lm-eval's registries
do. Installing or removing a plug-in changes the entry points on the next lookup; nothing is cached.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Generic, TypeVar

T = TypeVar("T")


class EntryPointRegistry(Generic[T]):
    """The classes registered under one entry-point group, checked on load by `accepts` (which names the contract a
    loaded object broke, or returns None)."""

    def __init__(self, group: str, what: str, accepts: Callable[[object], str | None]):
        self.group, self.what, self._accepts = group, what, accepts

    def entries(self) -> dict[str, metadata.EntryPoint]:
        return {ep.name: ep for ep in metadata.entry_points(group=self.group)}

    def names(self) -> list[str]:
        return sorted(self.entries())

    def get(self, name: str) -> type[T]:
        ep = self.entries().get(name)
        if ep is None:
            known = ", ".join(self.names()) or "none"
            raise KeyError(f"unknown {self.what} {name!r}; registered {self.what}s: {known}")
        cls = ep.load()
        broken = self._accepts(cls)
        if broken is not None:
            raise TypeError(f"entry point {name!r} ({ep.value}) of group {self.group!r} is not {broken}")
        return cls  # type: ignore[no-any-return]  # checked by `accepts`
