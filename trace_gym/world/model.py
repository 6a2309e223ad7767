"""The world: JSON tables keyed by id, a fixed "now", and a field-level diff.

Keeping the world as plain JSON data makes three things trivial: hashing a task, comparing
an agent's final world with the reference world field by field, and snapshotting the
initial world so that a verifier can recompute what was allowed from what the agent saw.

Tables: ``customers``, ``orders``, ``reservations``, ``payment_methods``, ``flights``,
``products``. Money is a float with two decimals in the data (as tau2-bench stores it) and is
compared in integer cents (:func:`cents`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from trace_gym.primitives.tools import ToolRefusal

TABLES = ("customers", "orders", "reservations", "payment_methods", "flights", "products")
ID_FIELDS = {
    "customers": "customer_id",
    "orders": "order_id",
    "reservations": "reservation_id",
    "payment_methods": "payment_method_id",
    "flights": "flight_number",
    "products": "product_id",
}


_CONTAINERS = (dict, list)


def json_copy(obj: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars); several times faster than
    ``copy.deepcopy``, which matters because every reset and write snapshots the world.

    Scalars are not passed through a call of their own (most values in a record are), which
    makes copying a world about twice as fast; nested containers must be plain ``dict`` and
    ``list``, as JSON data is (a subclass nested inside would be shared, not copied).
    """
    kind = type(obj)
    if kind is dict or isinstance(obj, dict):
        return {k: json_copy(v) if type(v) in _CONTAINERS else v for k, v in obj.items()}
    if kind is list or isinstance(obj, list):
        return [json_copy(v) if type(v) in _CONTAINERS else v for v in obj]
    return obj


def money(x: float) -> float:
    """Round to cents (the one rounding rule of the world: half away from zero)."""
    c = cents(x)
    return c / 100


def cents(x: float) -> int:
    """Amount in integer cents, rounding half away from zero."""
    v = abs(x) * 100 + 0.5 + 1e-9
    return int(v) if x >= 0 else -int(v)


def parse_day(text: str) -> date:
    return date.fromisoformat(text[:10])


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def day_offset(now: str, days: int) -> str:
    """ISO date ``days`` after (negative: before) the date of ``now``."""
    return (parse_day(now) + timedelta(days=days)).isoformat()


def time_offset(now: str, hours: float) -> str:
    """ISO datetime ``hours`` after ``now``, to the minute."""
    return (parse_time(now) + timedelta(hours=hours)).isoformat(timespec="minutes")


@dataclass
class World:
    """All records of one task, plus the current time (``now``, ISO datetime)."""

    now: str
    tables: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    """Side records that tools append (messages sent, refunds issued); part of the diff."""

    def __post_init__(self) -> None:
        for table in TABLES:
            self.tables.setdefault(table, {})

    # -- records -------------------------------------------------------------------------
    def add(self, table: str, record: dict[str, Any]) -> dict[str, Any]:
        key = record[ID_FIELDS[table]]
        if key in self.tables[table]:
            raise ValueError(f"duplicate {table} id {key!r}")
        self.tables[table][key] = record
        return record

    def find(self, table: str, key: Any) -> dict[str, Any] | None:
        return self.tables[table].get(key) if isinstance(key, str) else None

    def get(self, table: str, key: Any) -> dict[str, Any]:
        """The record, or :class:`ToolRefusal` naming the missing id (agent-facing)."""
        record = self.find(table, key)
        if record is None:
            noun = ID_FIELDS[table].replace("_", " ")
            raise ToolRefusal(f"no {noun} {key!r}")
        return record

    def has(self, table: str, key: Any) -> bool:
        return self.find(table, key) is not None

    # -- snapshots -----------------------------------------------------------------------
    def snapshot(self) -> World:
        """A deep copy: verifiers compare against it and never see later mutations."""
        return World(self.now, json_copy(self.tables), json_copy(self.log))

    def to_dict(self) -> dict[str, Any]:
        return {"now": self.now, "tables": self.tables, "log": self.log}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> World:
        """A world built from a copy of ``data`` (safe to mutate)."""
        return cls(data["now"], json_copy(data["tables"]), json_copy(data.get("log", [])))

    @classmethod
    def view(cls, data: dict[str, Any]) -> World:
        """A world over ``data`` itself, without copying: for read-only use only."""
        return cls(data["now"], data["tables"], data.get("log", []))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, World)
            and self.now == other.now
            and self.tables == other.tables
            and self.log == other.log
        )


def world_diff(before: World, after: World) -> list[dict[str, Any]]:
    """Field-level differences ``[{"path", "before", "after"}]``, in a stable order."""
    out: list[dict[str, Any]] = []
    for table in TABLES:
        old, new = before.tables.get(table, {}), after.tables.get(table, {})
        for key in sorted(set(old) | set(new)):
            a, b = old.get(key), new.get(key)
            if a == b:
                continue
            if a is None or b is None:
                out.append({"path": f"{table}.{key}", "before": a, "after": b})
                continue
            for fld in sorted(set(a) | set(b)):
                if a.get(fld) != b.get(fld):
                    path = f"{table}.{key}.{fld}"
                    out.append({"path": path, "before": a.get(fld), "after": b.get(fld)})
    if before.log != after.log:
        out.append(
            {"path": "log", "before": len(before.log), "after": after.log[len(before.log) :]}
        )
    return out
