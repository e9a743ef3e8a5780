#!/bin/bash
python3 - <<'PY' > /app/total.txt
import csv
print(f"{sum(float(row['amount']) for row in csv.DictReader(open('/app/sales.csv'))):.2f}")
PY
