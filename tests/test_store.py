import pytest

from sweet.store import Catalog, iter_jsonl, read_rows, read_shards, write_rows


def test_parquet_roundtrip_and_catalog(tmp_path):
    rows = [{"traj_id": "a__0", "task_id": "a", "reward": 0.5}, {"traj_id": "a__1", "task_id": "a", "reward": 1.0}]
    p = write_rows(rows, tmp_path / "stage" / "trajectories.parquet")
    assert read_rows(p) == rows
    assert not list(p.parent.glob(".*tmp")), "the temp file is renamed away"
    cat = Catalog(tmp_path / "catalog.duckdb")
    assert cat.register_stage(p.parent) == ["trajectories"]
    assert cat.query("SELECT count(*) AS n, sum(reward) AS s FROM trajectories") == [{"n": 2, "s": 1.5}]
    # Re-registering points the view at the newer output.
    write_rows(rows[:1], tmp_path / "stage2" / "trajectories.parquet")
    cat.register_stage(tmp_path / "stage2")
    assert cat.query("SELECT count(*) AS n FROM trajectories") == [{"n": 1}]


def test_shards_and_missing(tmp_path):
    write_rows([{"x": 1}], tmp_path / "s" / "b.parquet")
    write_rows([{"x": 0}], tmp_path / "s" / "a.parquet")
    assert read_shards(tmp_path / "s") == [{"x": 0}, {"x": 1}]
    with pytest.raises(FileNotFoundError, match="missing stage output"):
        read_rows(tmp_path / "nope.parquet")


def test_jsonl_errors_name_file_and_row(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"a": 1}\n\n[1]\n')
    with pytest.raises(ValueError, match=r"t.jsonl: row 2: expected a JSON object"):
        list(iter_jsonl(f))
    f.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"t.jsonl: row 1: not valid JSON"):
        list(iter_jsonl(f))
