#!/bin/bash
want="$(curl -fsS http://api:8000/secret | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')"
got="$(cat /app/token.txt 2>/dev/null)"
echo "want $want, got $got"
if [ -n "$want" ] && [ "$got" = "$want" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
