import pytest

from sweet.store import Catalog, Shards, iter_jsonl, read_rows, write_rows


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
    shards = Shards(tmp_path / "s")
    assert shards.read_all() == [] and not shards.done("b")
    shards.write("b", [{"x": 1}])
    shards.write("a", [{"x": 0}])
    assert shards.read_all() == [{"x": 0}, {"x": 1}], "every unit's rows, in file-name order"
    assert shards.done("a") and not shards.done("c")
    with pytest.raises(FileNotFoundError, match="missing stage output"):
        read_rows(tmp_path / "nope.parquet")


def test_shard_names_are_the_stages_file_names(tmp_path):
    """The names the stages wrote before `Shards` existed, so a half-finished stage folder still resumes: episodes
    `<task_id>__<sample_idx>`, candidate turns `<turn_id>`, anything outside [A-Za-z0-9_.-] as "_"."""
    shards = Shards(tmp_path)
    assert shards.path(("ez-01", 3)) == tmp_path / "ez-01__3.parquet"
    assert Shards.name(("off-1a/b c", 0)) == "off-1a_b_c__0.parquet"
    assert Shards.name("ez-01__0__t2") == "ez-01__0__t2.parquet"
    assert Shards.name("../up") == ".._up.parquet" and shards.path("../up").parent == tmp_path
    write_rows([{"x": 7}], tmp_path / "ez-01__3.parquet")  # written by an older run
    assert shards.done(("ez-01", 3))
    shards.write(("ez-01", 4), [{"x": 8}])
    assert not list(tmp_path.glob(".*tmp")), "written atomically"
    assert [r["x"] for r in shards.read_all()] == [7, 8]


def test_jsonl_errors_name_file_and_row(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"a": 1}\n\n[1]\n')
    with pytest.raises(ValueError, match=r"t.jsonl: row 2: expected a JSON object"):
        list(iter_jsonl(f))
    f.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"t.jsonl: row 1: not valid JSON"):
        list(iter_jsonl(f))
