import csv
from pathlib import Path


def test_total_exists():
    assert Path("/app/total.txt").is_file()


def test_total_value():
    rows = list(csv.DictReader(open("/app/sales.csv")))
    want = f"{sum(float(r['amount']) for r in rows):.2f}"
    assert Path("/app/total.txt").read_text().strip() == want
