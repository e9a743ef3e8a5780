#!/bin/bash
# The allowed host, through the proxy the harness set (HTTP_PROXY): its page, and its address.
curl -sf --max-time 10 http://allowed.test/ > /app/allowed.txt
address=$(curl -sf --max-time 10 http://allowed.test/ip)
# What the allow list must refuse, each written down for the verifier to check:
# another host by name, through the proxy;
curl -s --max-time 10 -o /dev/null -w '%{http_code}' http://blocked.test/ > /app/blocked-by-name.txt
# the allowed host's own address, through the proxy (an address is not its name);
curl -s --max-time 10 -o /dev/null -w '%{http_code}' "http://$address/" > /app/allowed-by-address.txt
# that address directly, around the proxy;
curl -s --max-time 2 --noproxy '*' "http://$address/" > /app/direct.txt 2>&1; echo "exit=$?" >> /app/direct.txt
# a resolver of its own (a DNS server out there), and HTTPS to a public resolver.
timeout 3 getent hosts allowed.test > /app/resolver.txt 2>&1; echo "exit=$?" >> /app/resolver.txt
curl -s --max-time 3 -o /dev/null -w '%{http_code}' https://1.1.1.1/dns-query > /app/doh.txt 2>&1
echo "address=$address" > /app/address.txt
