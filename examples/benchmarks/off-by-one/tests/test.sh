#!/bin/bash
printf 'a\nb\nc\n' > /tmp/three.txt
got="$(bash /app/count.sh /tmp/three.txt 2>&1)"
echo "count.sh printed: $got"
if [ "$got" = "3" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
