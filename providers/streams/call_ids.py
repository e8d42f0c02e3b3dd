"""Tool-call fragments to calls, by the provider's id first and its `index` second.

Providers stream a call as fragments: the first carries `id` and `name`, the rest
only argument text. OpenAI keys fragments by `index`, but OpenAI-compatible
servers differ: some reuse index 0 for every parallel call (each with a new id),
some send no `index` at all. Keying by index alone merges such calls into one
whose arguments read `{}{}`. `CallIndex` gives every call its own stable slot:

- a fragment with an id not seen before starts a new call, even at an index in use;
- a fragment with a known id continues that call;
- a fragment without an id continues the call last started at its index (or, with
  no index, the call last started);
- a fragment that contradicts what is known (a known id under another index, a
  second different name for one call) is a provider error, retried like a cut
  stream, never merged silently.

Every reader (`providers.streams`) places its calls here, so these rules hold on every path.
"""

from __future__ import annotations

from dataclasses import dataclass

from providers.stream import ToolCallDelta

__all__ = ["CallIndex", "StreamContradiction"]


class StreamContradiction(Exception):
    """Two fragments of one stream disagree about a tool call: the stream is corrupt (retried)."""


@dataclass(slots=True)
class _Slot:
    slot: int
    index: int | None
    id: str | None
    name: str | None


class CallIndex:
    """Per response stream: maps each fragment to its call's slot (`ToolCallDelta.index` out)."""

    __slots__ = ("_by_id", "_by_index", "_last", "_slots")

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self._by_id: dict[str, _Slot] = {}
        self._by_index: dict[int | None, _Slot] = {}
        self._last: _Slot | None = None

    @property
    def count(self) -> int:
        return len(self._slots)

    def place(self, delta: ToolCallDelta, index: int | None) -> ToolCallDelta:
        """`delta` renumbered to its call's slot; `index` is the provider's (None when absent)."""
        slot = self._slot_for(delta, index)
        if delta.name:
            if slot.name is not None and slot.name != delta.name:
                raise StreamContradiction(
                    f"tool call {slot.id or slot.slot!r} was named {slot.name!r}, then {delta.name!r}"
                )
            slot.name = delta.name
        delta.index = slot.slot
        return delta

    def _slot_for(self, delta: ToolCallDelta, index: int | None) -> _Slot:
        if delta.id:
            known = self._by_id.get(delta.id)
            if known is not None:
                if index is not None and known.index is not None and index != known.index:
                    raise StreamContradiction(
                        f"tool call {delta.id!r} came at index {known.index}, then at index {index}"
                    )
                return known
            return self._new(index, delta.id, None)
        current = self._by_index.get(index) if index is not None else self._last
        if current is None or (index is None and delta.name and current.name):
            return self._new(index, None, None)  # an id-less call starting (the assembler names it)
        return current

    def _new(self, index: int | None, call_id: str | None, name: str | None) -> _Slot:
        slot = _Slot(len(self._slots), index, call_id, name)
        self._slots.append(slot)
        if call_id:
            self._by_id[call_id] = slot
        self._by_index[index] = slot
        self._last = slot
        return slot
