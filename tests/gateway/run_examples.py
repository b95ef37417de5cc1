#!/usr/bin/python3
"""Runs the gateway's examples, examples/speculative_scheduler.py (Python client) and
gateway_client_example (C++ client), against a `distsample serve --model ngram` started here on a
Unix socket, then stops the server with SIGTERM. Arguments: the distsample binary, the source
tree, the directory holding the generated distsample_pb2.py, the C++ example binary."""

import os
import signal
import subprocess
import sys
import tempfile
import time

distsample, source_dir, pb2_dir, cpp_example = sys.argv[1:5]


def run(name, command, env=None):
    started = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    print(result.stdout, end="")
    print(result.stderr, end="", file=sys.stderr)
    if result.returncode != 0:
        sys.exit(f"{name} failed with exit code {result.returncode}")
    for expected in ("step  8 (verify)", "acceptance rate:"):
        if expected not in result.stdout:
            sys.exit(f"the output of {name} lacks {expected!r}")
    print(f"{name} ran in {time.monotonic() - started:.1f} s")

with tempfile.TemporaryDirectory() as tmp:
    sock = os.path.join(tmp, "gateway.sock")
    server = subprocess.Popen([distsample, "serve", "--model", "ngram", "--tp", "2", "--listen", "", "--unix-socket", sock,
                               "--set", "max_tokens_per_req=4"], stdout=subprocess.PIPE, text=True)
    try:
        ready = server.stdout.readline()  # printed once the listeners are bound
        print(ready, end="")
        if "distsample serve:" not in ready or not os.path.exists(sock):
            sys.exit(f"the server did not start: {ready!r}")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([pb2_dir, os.path.join(source_dir, "clients", "python")]))
        run("the Python example", [sys.executable, os.path.join(source_dir, "examples", "speculative_scheduler.py"),
                                   "--address", "unix:" + sock, "--steps", "8", "--requests", "3"], env)
        run("the C++ example", [cpp_example, "unix:" + sock, "/usr/share/common-licenses/GPL-3", "8"])
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
    if code != 0:
        sys.exit(f"the server exited with {code} after SIGTERM")
