#!/bin/bash
want="$(printf '%s\n' 2 3 5 7 11 13 17 19 23 29 31 37 41 43 47)"
got="$(python3 /app/primes.py 2>&1)"
if [ "$got" = "$want" ]; then echo 1 > /logs/verifier/reward.txt; else echo "got: $got"; echo 0 > /logs/verifier/reward.txt; fi
