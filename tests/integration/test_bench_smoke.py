"""The benchmark at a tiny scale factor, so its code cannot rot (figures are not checked here)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.bench


def test_spark_connect_benchmark_runs_both_modes_at_small_size(tmp_path, capsys):
    from benchmarks.bench_spark_connect import main as connect_main

    output = tmp_path / "connect.json"
    argv = ["--tables", "2", "--rows", "300", "--workdir", str(tmp_path / "w"), "--output", str(output)]
    assert connect_main(argv) == 0
    report = json.loads(output.read_text())
    assert set(report["report"]) == {"per-task", "connect", "connect+start"}
    for mode in ("per-task", "connect"):
        run = report["runs"][mode]
        assert run["lake_checked"] and [t["rows"] for t in run["tasks"]] == [300, 300]
    assert report["report"]["connect"]["server_start_seconds"] > 0
    assert "shared Spark Connect" in capsys.readouterr().out


def test_spark_cluster_benchmark_runs_on_two_workers_at_small_size(pg_server, tmp_path, capsys):
    from benchmarks.bench_spark_cluster import main as cluster_main

    # Two workers only (the benchmark compares 1 and 2; a cluster per configuration costs ~45 s here).
    output = tmp_path / "cluster.json"
    argv = ["--rows", "3000", "--split-rows", "500", "--workers", "2", "--dsn", pg_server.dsn]
    assert cluster_main([*argv, "--workdir", str(tmp_path / "w"), "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["rows"] == 3000 and set(report["results"]) == {"2"}
    result = report["results"]["2"]
    assert result["splits"] >= 2 and result["wall_seconds"] > 0 and result["speed_up"] == 1.0
    assert len({e["worker"] for e in result["executors"]}) == 2
    assert sum(e["tasks"] for e in result["executors"]) >= result["splits"]
    assert "per executor" in capsys.readouterr().out


def test_landing_files_benchmark_runs_both_variants_at_small_size(tmp_path, capsys):
    from benchmarks.bench_landing_files import main as files_main

    output = tmp_path / "files.json"
    argv = ["--files", "40", "--file-kb", "2", "--master", "local[2]", "--output", str(output)]
    assert files_main([*argv, "--workdir", str(tmp_path / "w")]) == 0
    report = json.loads(output.read_text())
    assert report["files"] == 40 and report["lines"] > 40
    assert report["runs"]["tiering round"][0]["rows"] == report["lines"]
    assert report["runs"]["spark json"][0]["rows"] == report["lines"]
    assert "files/s" in capsys.readouterr().out


def test_compaction_benchmark_runs_at_small_size(tmp_path, capsys):
    from benchmarks.bench_compaction import main as compaction_main

    output = tmp_path / "compaction.json"
    argv = ["--rounds", "12", "--rows-per-round", "50", "--max-small-files", "5", "--repeat", "1"]
    assert compaction_main([*argv, "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert (report["files_before"], report["files_after"], report["rows"]) == (12, 1, 600)
    assert report["queries"]["full scan"]["rows"] == 600 and report["queries"]["selective (1% id range)"]["rows"] == 6
    assert "speed-up" in capsys.readouterr().out


def test_eviction_benchmark_runs_both_variants_at_small_size(pg_server, tmp_path, capsys):
    from benchmarks.bench_eviction import main as eviction_main

    output = tmp_path / "eviction.json"
    argv = ["--dsn", pg_server.dsn, "--rows", "3000", "--batch-rows", "500", "--repeat", "1"]
    assert eviction_main([*argv, "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["rows"] == 3000 and set(report["results"]) == {"verified", "unverified"}
    assert report["ratio_verified_to_unverified"] > 0
    assert "verified / unverified" in capsys.readouterr().out


def test_mariadb_round_benchmark_runs_every_variant_at_small_size(tmp_path, capsys):
    from benchmarks.bench_mariadb_round import main as mariadb_main

    assert mariadb_main(["--sf", "0.01", "--repeat", "1", "--workdir", str(tmp_path / "w")]) == 0
    report = json.loads((tmp_path / "w" / "round-vs-drain.json").read_text())
    rows = {variant: [run["rows"] for run in runs] for variant, runs in report["results"].items()}
    assert rows["drain"] == rows["round"] == rows["round-splits"] and rows["round"][0] > 50_000
    assert [run["splits"] for run in report["results"]["round"]] == [1]  # one snapshot: one statement
    assert "round / drain" in capsys.readouterr().out


def test_cdc_decoding_benchmark_decodes_both_plugins_alike_at_small_size(pg_server, tmp_path, capsys):
    from benchmarks.bench_cdc_decoding import main as decoding_main

    output = tmp_path / "decoding.json"
    argv = ["--dsn", pg_server.dsn, "--sf", "0.01", "--changes", "2000", "--repeat", "1", "--output", str(output)]
    assert decoding_main([*argv, "--workdir", str(tmp_path / "w")]) == 0
    report = json.loads(output.read_text())
    # 800 inserts (new keys), 800 updates and 400 deletes of distinct loaded keys: one result row per changed key
    assert report["made"] == {"inserts": 800, "updates": 800, "deletes": 400} and report["result_keys"] == 2000
    assert report["ratio_wal2json_to_pgoutput"] > 0
    with pg_server.connect() as conn:  # the benchmark's slots must not outlive it (they would hold WAL back)
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'bench_%'").fetchone() == (
            0,
        )
    assert "wal2json / pgoutput" in capsys.readouterr().out


def test_shape_changes_benchmark_runs_every_change_at_small_size(pg_server, tmp_path, capsys):
    from benchmarks.bench_shape_changes import main as shape_main

    output = tmp_path / "shape.json"
    assert shape_main(["--dsn", pg_server.dsn, "--sf", "0.01", "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    changes = report["changes"]
    for label in ("append, initial default", "append, backfill", "merge"):
        assert report["first_loads"][label]["outcome"] == "tiered"
        assert changes["rename"][label]["data_bytes"] == 0  # metadata only
    assert changes["add column, constant default"]["append, initial default"]["data_bytes"] == 0
    assert changes["add column, constant default"]["append, backfill"]["data_bytes"] > 0  # every file rewritten
    volatile = changes["add column, volatile default"]
    assert volatile["append, initial default"]["outcome"].startswith("refused")
    assert volatile["merge"]["outcome"] == "tiered" and volatile["merge"]["data_bytes"] > 0  # read again, merged
    assert "add column, volatile default" in capsys.readouterr().out


def test_small_rounds_benchmark_counts_a_rounds_connections_at_small_size(capsys):
    from benchmarks.bench_small_rounds import main as small_rounds_main

    assert small_rounds_main(["--rounds", "2", "--rows", "5", "--repeat", "1"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # Planning on one connection, the split's read on another, the check of the columns after writing on a third;
    # only the split's is ADBC's (the small queries connect with psycopg, in a tenth of ADBC's time).
    assert (report["connections"], report["adbc_connections"]) == (3, 1), report
    assert report["wall_ms"] > 0 and report["client_cpu_ms"] > 0 and report["server_cpu_ms"] > 0, report


def test_cdc_lag_benchmark_keeps_the_lake_equal_under_a_writer_process_at_small_size(pg_server, tmp_path, capsys):
    from benchmarks.bench_cdc_lag import main as lag_main

    output = tmp_path / "lag.json"
    argv = ["--dsn", pg_server.dsn, "--sf", "0.01", "--seconds", "6", "--writers", "1", "--maintain-every", "2"]
    assert lag_main([*argv, "--workdir", str(tmp_path / "w"), "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["writer_changes"] > 0 and report["rounds"] and report["final_check"]["rows"] > 0
    assert report["maintenance_runs"] and all(m["outcome"] for m in report["maintenance_runs"]), report
    assert report["rounds_cpu_seconds"] > 0 and report["lag_seconds_p95"] is not None
    assert "changes per CPU-second" in capsys.readouterr().out


def test_round_cpu_benchmark_files_a_rounds_cpu_by_process_at_small_size(pg_server, tmp_path, capsys):
    from benchmarks.round_cpu import main as round_cpu_main

    output = tmp_path / "round_cpu.json"
    argv = ["--dsn", pg_server.dsn, "--sf", "0.01", "--repeat", "1", "--workdir", str(tmp_path / "w")]
    assert round_cpu_main([*argv, "--output", str(output)]) == 0
    summary = json.loads(output.read_text())["summary"]
    copy, tiered = summary["copy-binary"]["cpu"], summary["round"]["cpu"]
    # The read limit runs no Spark; a round this small is one split, written by the task process without Spark.
    assert copy["Spark JVM"] == copy["Spark Python workers"] == 0 and copy["task process"] > 0, copy
    assert tiered["task process"] > copy["task process"] * 0.2 and tiered["PostgreSQL"] > 0, tiered
    assert all(v["machine_cpu"] >= v["processes_cpu"] * 0.5 > 0 for v in summary.values()), summary
    assert "rows/machine CPU-s" in capsys.readouterr().out


def test_merge_benchmark_on_mariadb_checks_each_lake_against_its_table_at_small_size(tmp_path, capsys):
    from benchmarks.bench_merge import main as merge_main

    output = tmp_path / "merge.json"
    argv = ["--hot", "mariadb", "--sf", "0.01", "--scenarios", "1%", "--workdir", str(tmp_path / "w")]
    assert merge_main([*argv, "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert set(report["scenarios"]["1%"]) == {"merge", "cdc", "full-load"}
    assert set(report["checks"]) == {"1%/merge", "1%/cdc", "1%/full-load"}  # each lake = its table, checked
    assert report["changes"]["1%"]["orders_c_updated"] > 0 and report["load_average"]
    assert "cdc" in capsys.readouterr().out


def test_cdc_lag_benchmark_on_mariadb_keeps_the_lake_equal_under_a_writer_process_at_small_size(tmp_path, capsys):
    from benchmarks.bench_cdc_lag import main as lag_main

    output = tmp_path / "lag.json"
    argv = ["--hot", "mariadb", "--sf", "0.01", "--seconds", "6", "--writers", "1", "--workdir", str(tmp_path / "w")]
    assert lag_main([*argv, "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["hot"] == "mariadb" and report["writer_changes"] > 0 and report["final_check"]["rows"] > 0
    assert report["rounds_cpu_seconds"] > 0 and report["lag_seconds_p95"] is not None, report
    assert "changes per CPU-second" in capsys.readouterr().out


def test_binlog_decoding_benchmark_compares_both_decoders_at_small_size(tmp_path, capsys):
    from benchmarks.bench_binlog_decoding import main as decoding_main

    output = tmp_path / "decoding.json"
    argv = ["--sf", "0.01", "--percent", "10", "--repeat", "1", "--workdir", str(tmp_path / "w")]
    assert decoding_main([*argv, "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["changes"] == 1500 and set(report["cpu_us_per_change"]) == {"round", "whole", "library", "events"}
    assert 0 < report["reader_share_of_round_cpu"] < 1, report
    assert "µs of CPU per change" in capsys.readouterr().out


def test_stream_groups_benchmark_decodes_and_tiers_both_setups_on_both_stores_at_small_size(tmp_path, capsys):
    from benchmarks.bench_stream_groups import main as groups_main

    output = tmp_path / "groups.json"
    argv = ["--tables", "6", "--busy", "2", "--seconds", "6", "--rate", "40", "--decode-tables", "1,3",
            "--decode-changes", "300"]  # fmt: skip
    assert groups_main([*argv, "--workdir", str(tmp_path / "w"), "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    for hot in ("postgres", "mariadb"):
        decode = report[hot]["decode"]
        assert [d["tables"] for d in decode] == [1, 3] and all(d["group"]["messages"] > 0 for d in decode), decode
        per_table, group = report[hot]["lag"]
        assert (per_table["setup"], group["setup"]) == ("per_table", "group")
        assert group["changes"] > 0 and group["lags_measured"] > 0 and group["lag_p95_s"] >= group["lag_p50_s"]
        assert group["change_log_expiry"]["seconds"] > 0, group
    pg_per_table, pg_group = report["postgres"]["lag"]
    assert (pg_per_table["slots"], pg_group["slots"]) == (6, 1)
    assert "lag group" in capsys.readouterr().out
