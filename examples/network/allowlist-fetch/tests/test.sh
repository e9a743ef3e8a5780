#!/bin/bash
# The verifier's phase has no network: the agent's results are judged, then checked again from here.
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }
[ "$(cat /app/allowed.txt 2>/dev/null)" = allowed.test ] || fail "allowed.test was not fetched: $(cat /app/allowed.txt 2>&1)"
[ "$(cat /app/blocked-by-name.txt)" = 403 ] || fail "blocked.test was not refused: $(cat /app/blocked-by-name.txt)"
[ "$(cat /app/allowed-by-address.txt)" = 403 ] || fail "the allowed host's address went through: $(cat /app/allowed-by-address.txt)"
grep -q 'exit=0' /app/direct.txt && fail "the address was reached around the proxy: $(cat /app/direct.txt)"
grep -q 'exit=0' /app/resolver.txt && fail "the task resolved an outside name itself: $(cat /app/resolver.txt)"
[ "$(cat /app/doh.txt)" = 403 ] || [ "$(cat /app/doh.txt)" = 000 ] || fail "DNS over HTTPS went out: $(cat /app/doh.txt)"
# And now, in the verifier's phase: nothing at all.
code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' http://allowed.test/)
[ "$code" = 403 ] || [ "$code" = 000 ] || fail "the verifier (no-network) reached allowed.test: $code"
curl -s --max-time 2 --noproxy '*' "http://$(cut -d= -f2 /app/address.txt)/" >/dev/null 2>&1 && fail "the verifier reached the address directly"
echo "every check held"
echo 1 > /logs/verifier/reward.txt
