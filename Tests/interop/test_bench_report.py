"""docs/BENCHMARKS.md is what results/ makes of it (Benchmarks/report.py): the results are kept
in the repository, so a clone regenerates the page, and neither can drift from the other."""
import shutil
import sys

from conftest import REPO, run

REPORT = REPO / "Benchmarks" / "report.py"


def test_the_page_is_what_the_results_make():
    r = run([sys.executable, str(REPORT), "--check"])
    assert r.returncode == 0, r.stderr.decode()


def test_a_changed_result_makes_the_check_fail(tmp_path):
    """The check reads the results: a copy of the benches' tree with one result changed fails it,
    and a run of the report makes the page agree again."""
    copy = tmp_path / "repo"
    for part in ("Benchmarks", "results", "docs"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "results" / "soak.md").write_text("Measured never.\n\nNothing.\n")
    report = copy / "Benchmarks" / "report.py"
    r = run([sys.executable, str(report), "--check"])
    assert r.returncode == 1 and "make bench-report" in r.stderr.decode(), r
    assert run([sys.executable, str(report)]).returncode == 0
    assert "Measured never." in (copy / "docs" / "BENCHMARKS.md").read_text()
    assert run([sys.executable, str(report), "--check"]).returncode == 0
