"""Trajectory store: Parquet shards written by stages, a DuckDB catalog of views over them.

DuckDB allows one writing process per database file, so stages (and any worker processes) only write Parquet;
the flow's own process registers views in the catalog. Nested fields (chat messages, test cases) are stored as
JSON strings so the schema stays flat and queryable with DuckDB's JSON functions.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any, Iterable

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

# Table name -> (file name inside the stage folder, one-line description). The README documents the columns.
TABLES: dict[str, tuple[str, str]] = {
    "tasks": ("tasks.parquet", "ColBench tasks with their split (train/test)"),
    "trajectories": ("trajectories.parquet", "one row per collected episode"),
    "turns": ("turns.parquet", "one row per agent turn of each collected episode"),
    "pairs": ("pairs.parquet", "trajectory preference pairs (same task, higher vs lower reward)"),
    "candidates": ("candidates.parquet", "N sampled actions per turn with their critic score"),
    "dpo_pairs": ("dpo_pairs.parquet", "per-turn chosen/rejected actions fed to DPO"),
    "eval_results": ("eval_results.parquet", "one row per evaluation episode, per method"),
}


def write_rows(rows: list[dict[str, Any]], path: Path | str, schema: pa.Schema | None = None) -> Path:
    """Write rows atomically (temp file + rename): a crash never leaves a half-written shard behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema) if rows or schema is None else schema.empty_table()
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def read_rows(path: Path | str) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"missing stage output {path}: run the stage that writes it first")
    return pq.read_table(path).to_pylist()


class Shards:
    """A stage's resumable work: one Parquet file per finished unit under `folder`, named by the unit's key (a
    string, or a tuple joined with "__", e.g. (task_id, sample_idx)); a rerun skips the keys already `done`."""

    _UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)

    @classmethod
    def name(cls, key: str | tuple) -> str:
        """The file name of a key: unsafe characters become "_" (so a key never leaves the folder)."""
        text = "__".join(map(str, key)) if isinstance(key, tuple) else str(key)
        return cls._UNSAFE.sub("_", text) + ".parquet"

    def path(self, key: str | tuple) -> Path:
        return self.folder / self.name(key)

    def done(self, key: str | tuple) -> bool:
        return self.path(key).exists()

    def write(self, key: str | tuple, rows: list[dict[str, Any]]) -> Path:
        """The unit's rows, atomically: a unit is either finished on disk or absent."""
        return write_rows(rows, self.path(key))

    def read_all(self) -> list[dict[str, Any]]:
        """Every finished unit's rows, in file-name order (no folder yet: none)."""
        return [row for f in sorted(self.folder.glob("*.parquet")) for row in pq.read_table(f).to_pylist()]


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def loads(text: str) -> Any:
    return json.loads(text)


class Catalog:
    """A DuckDB file whose tables are views over the Parquet outputs of the latest run of each stage."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def register(self, table: str, parquet: Path | str | list[Path | str]) -> None:
        """A view over one Parquet file, or over several (columns matched by name, e.g. runs of several methods)."""
        files = [Path(p).resolve() for p in (parquet if isinstance(parquet, list) else [parquet])]
        files = [f for f in files if f.exists() and pq.read_schema(f).names]  # an empty output has no schema
        with duckdb.connect(str(self.path)) as con:
            if not files:
                con.execute(f'DROP VIEW IF EXISTS "{table}"')
                return
            src = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
            con.execute(f'CREATE OR REPLACE VIEW "{table}" AS SELECT * FROM read_parquet([{src}], union_by_name=true)')

    def register_stage(self, stage_dir: Path | str) -> list[str]:
        """Register every known table file found in a stage's output folder."""
        done = []
        for table, (fname, _) in TABLES.items():
            if (Path(stage_dir) / fname).exists():
                self.register(table, Path(stage_dir) / fname)
                done.append(table)
        return done

    def query(self, sql: str) -> list[dict[str, Any]]:
        with duckdb.connect(str(self.path), read_only=True) as con:
            rel = con.sql(sql)
            cols = rel.columns
            return [dict(zip(cols, r)) for r in rel.fetchall()]

    def tables(self) -> list[str]:
        if not self.path.exists():
            return []
        return [r["table_name"] for r in self.query("SELECT table_name FROM information_schema.tables ORDER BY 1")]


def iter_jsonl(path: Path | str) -> Iterable[tuple[int, dict[str, Any]]]:
    """Yield (0-based row, record); a malformed line raises one error naming the file and row."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: row {i}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}: row {i}: expected a JSON object, got {type(rec).__name__}")
            yield i, rec
