"""Writes /logs/verifier/ctrf.json (the Common Test Report Format) after the run."""
import json
import time

_results = []
_started = int(time.time() * 1000)


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _results.append({
            "name": report.nodeid,
            "status": {"passed": "passed", "failed": "failed", "skipped": "skipped"}[report.outcome],
            "duration": int(report.duration * 1000),
        })


def pytest_sessionfinish(session, exitstatus):
    summary = {
        "tests": len(_results),
        "passed": sum(r["status"] == "passed" for r in _results),
        "failed": sum(r["status"] == "failed" for r in _results),
        "pending": 0,
        "skipped": sum(r["status"] == "skipped" for r in _results),
        "other": 0,
        "start": _started,
        "stop": int(time.time() * 1000),
    }
    report = {"results": {"tool": {"name": "pytest"}, "summary": summary, "tests": _results}}
    with open("/logs/verifier/ctrf.json", "w") as out:
        json.dump(report, out, indent=2)
