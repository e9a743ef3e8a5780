"""Throughput of sandbox-server builds under 16 clients at once, side by side.

    python3 sandbox-server/benches/concurrent_ab.py bash|read_file BINARY [BINARY…]

Each build serves an empty workspace (and a 10 KiB file); 16 keep-alive threads call the tool
for 3 s, three windows per build, alternating. Prints the median calls per second.
"""
import subprocess, json, time, tempfile, http.client, threading, sys, statistics
def start(binary):
    ws = tempfile.mkdtemp()
    open(ws+"/f.txt","w").write("x"*10240)
    p = subprocess.Popen([binary, "serve", "--workspace", ws, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={"PATH":"/usr/bin:/bin","RUST_LOG":"error"})
    host, port = json.loads(p.stdout.readline())["listening"].rsplit(":",1)
    return p, host, int(port)
def load(host, port, secs, tool):
    count = [0]; stop = time.time()+secs
    body = json.dumps({"path":"f.txt"} if tool=="read_file" else {"cmd":"echo hi"})
    def worker():
        c = http.client.HTTPConnection(host, port)
        n=0
        while time.time() < stop:
            c.request("POST", f"/v1/tools/{tool}", body=body, headers={"content-type":"application/json"}); c.getresponse().read(); n+=1
        count[0]+=n
    ts=[threading.Thread(target=worker) for _ in range(16)]
    [t.start() for t in ts]; [t.join() for t in ts]
    return count[0]/secs
tool = sys.argv[1]
servers = [start(b) for b in sys.argv[2:]]
res = {b: [] for b in sys.argv[2:]}
for r in range(3):
    for b,(p,h,port) in zip(sys.argv[2:], servers):
        res[b].append(load(h, port, 3, tool))
for b in sys.argv[2:]:
    print(tool, b, "median calls/s", round(statistics.median(res[b])), [round(x) for x in res[b]])
for p,_,_ in servers: p.terminate()
