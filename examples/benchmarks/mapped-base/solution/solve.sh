#!/bin/bash
cat > /app/primes.py <<'PY'
for n in range(2, 50):
    if all(n % d for d in range(2, int(n ** 0.5) + 1)):
        print(n)
PY
